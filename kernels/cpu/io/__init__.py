"""Data-input kernels: walking nested (lengths-encoded) datasets, tokenizing text files."""
