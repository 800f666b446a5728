"""Recommendation kernels: SparseLengths lookups, fused rowwise-quantised tables, segment ops, lengths and ranges, feature and index hashing."""
