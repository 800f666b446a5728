"""Packed and padded sequences and hierarchical softmax."""
