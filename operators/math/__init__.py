"""Elementwise math, logic, matrix products, reductions, statistics and random samplers."""
