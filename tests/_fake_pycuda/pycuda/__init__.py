"""A host-memory stand-in for the parts of PyCUDA caffe2py uses, for smoke tests of
the CUDA device's host code and the GPU benchmarks on machines without a GPU.
Device memory is host memory; copies work; kernels are checked for argument
packing and otherwise do nothing. Only importable when this folder is put on
sys.path on purpose (tests/test_cuda_geometry.py does it in a subprocess)."""
VERSION = (0, 0, 0)
