"""The CPU runtime every kernel family shares: numba compilation settings, the one thread team, BLAS entry points and thread count, reusable buffers."""
