"""Detectron's detection kernels: box arithmetic, NMS, RoIAlign / RoIPool, proposal
generation, FPN level assignment, and the image ops the detection heads use
(nearest resize, im2col, RMAC regions)."""
