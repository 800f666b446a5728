"""General tensor math: elementwise passes, layout copies, GEMMs on the team and their output passes (bias, residual, ReLU)."""
