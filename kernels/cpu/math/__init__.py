"""Elementwise passes, GEMMs on the team and their output passes, reductions, distances, statistics."""
