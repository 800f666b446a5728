"""caffe2py: a Caffe2-style operator registry and net executor in Python."""
__version__ = "0.1.0"

from . import devices as _devices  # noqa: E402
from .registry import CUDA as _CUDA  # noqa: E402


def _load_cuda_device():
    from . import cuda  # noqa: F401,PLC0415  (registers its adapter with caffe2py.devices)
    from . import fusion_cuda  # noqa: F401,PLC0415  (elementwise groups on CUDA devices)


# devices is below caffe2py.cuda: the CUDA device is loaded through this, on first use
_devices.register_adapter_loader(_CUDA, _load_cuda_device)

from . import operators as _operators  # noqa: F401,E402  (registers every op)
from . import extension as _extension  # noqa: F401,E402  (fills in workspace.C)
