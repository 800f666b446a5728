"""Recommendation kernels: SparseLengths lookups, fused rowwise-quantised tables, segment ops, LSTMUnit."""
