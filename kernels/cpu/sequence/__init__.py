"""Sequence kernels: masks, packed-sequence reversal and (un)packing, sinusoid position
encodings, GLU, hierarchical softmax, locally connected layers."""
