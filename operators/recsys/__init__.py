"""Recommendation ops: embedding lookups (float, half and fused 8/4/2-bit tables), segments, lengths, sparse features, indexes."""
