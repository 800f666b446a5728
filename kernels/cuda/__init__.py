"""CUDA C kernel sources (*.cu), compiled at run time through PyCUDA."""
