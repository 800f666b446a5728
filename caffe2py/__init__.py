"""caffe2py: a Caffe2-style operator registry and net executor in Python."""
__version__ = "0.1.0"

from . import operators as _operators  # noqa: F401,E402  (registers every op)
