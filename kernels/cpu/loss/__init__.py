"""Loss and metric kernels (softmax cross-entropy, cross-entropies, distances)."""
