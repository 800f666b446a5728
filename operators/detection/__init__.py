"""Detectron's ops: RoI pooling and alignment, proposals, boxes, NMS, detection image ops."""
