"""TorchScript modules held in blobs, as Caffe2's PyTorch integration held them:
FeedBlob of a `torch.jit.ScriptModule` stores the module itself (FetchBlob gives it
back), the `ScriptModule` op calls one of its methods on tensor blobs, the
`ScriptModuleLoad` op makes one from `torch.jit.save` bytes, and Save / Load write and
read such a blob as those bytes.

torch is optional (`pip install torch`): nothing here imports it until a module is
met or loaded, and an op that needs it without it says how to get it. TorchScript is
code, so a model file (an untrusted one, docs/security.md) may not load one:
model_trust_ops refuses ScriptModuleLoad and the Load of such a blob there.
"""
import io
import sys

from .errors import Caffe2Error

# the BlobProto type Save writes for a module blob (its content: torch.jit.save's bytes)
BLOB_TYPE = "torch::jit::Module"
NEEDS_TORCH = "TorchScript modules need PyTorch: pip install torch"


def torch_module():
    """The torch package, or a Caffe2Error saying how to install it."""
    try:
        import torch
    except ImportError:
        raise Caffe2Error(NEEDS_TORCH) from None
    return torch


def is_script_module(value):
    """Whether value is a TorchScript module (without importing torch when the program
    has not: then it cannot hold one)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(value, (torch.jit.ScriptModule, torch._C.ScriptModule))


class ScriptModuleType(type):
    """isinstance(x, ScriptModuleBlob) is is_script_module(x): lets the serializer
    registry (keyed by class) recognise modules without importing torch."""

    def __instancecheck__(cls, value):
        return is_script_module(value)


class ScriptModuleBlob(metaclass=ScriptModuleType):
    pass


def to_bytes(module):
    buffer = io.BytesIO()
    torch_module().jit.save(module, buffer)
    return buffer.getvalue()


def from_bytes(data, what):
    torch = torch_module()
    try:
        return torch.jit.load(io.BytesIO(bytes(data)))
    except Exception as exc:        # torch raises RuntimeError / ValueError for a bad archive
        raise Caffe2Error("%s: not a TorchScript module saved by torch.jit.save (%s)"
                          % (what, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)) from None
