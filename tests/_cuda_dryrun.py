"""pytest plugin: a dry run of tests/test_cuda_ops.py without a GPU.

"CUDA" blobs become an ndarray subclass and every CUDA kernel is replaced by the
op's CPU kernel, so the GPU tests' NumPy references and harness are checked
against the CPU ops (the reference semantics) on any machine:

    PYTHONPATH=tests pytest -p _cuda_dryrun tests/test_cuda_ops.py

Never load it in a normal run: it rewires the kernel registry of its process.
"""
import numpy as np

import caffe2py.operators  # noqa: F401 - registers the kernels it rewires
from caffe2py import devices, registry
from caffe2py.registry import CUDA, CPU, KernelEntry
from caffe2py.cuda import context

class Dev(np.ndarray):
    pass

def to_dev(a):
    return np.array(a, copy=True).view(Dev)

def host(a):
    return np.array(a, copy=True).view(np.ndarray) if isinstance(a, np.ndarray) else a

class A(devices.DeviceAdapter):
    device_type = CUDA
    def available(self): return True
    def count(self): return 1
    def to_device(self, a, i): return to_dev(a)
    def owns(self, v): return isinstance(v, Dev)
    def to_host(self, v): return host(v)

devices._adapters[CUDA] = A()
context._probe.update(ok=True, reason="", count=1)
devices.devices_changed()  # workspace.has_gpu_support follows the stand-in device
_orig_place = devices.placement_of
devices.placement_of = lambda v: (CUDA, 0) if isinstance(v, Dev) else _orig_place(v)
_orig_to_host = devices.to_host
devices.to_host = lambda v: host(v) if isinstance(v, Dev) else _orig_to_host(v)

def wrap(cpu_factory):
    def factory(ctx):
        run = cpu_factory(ctx)
        def go(*ins):
            out = run(*[host(x) for x in ins])
            if isinstance(out, tuple):
                return tuple(to_dev(o) for o in out)
            return to_dev(out)
        return go
    return factory

def matmul(ctx):
    ta, tb = ctx.int("trans_a", 0), ctx.int("trans_b", 0)
    def go(a, b, like=None):
        a, b = host(a), host(b)
        y = (a.T if ta else a) @ (b.T if tb else b)
        if like is not None:
            if y.size != host(like).size:
                raise ctx.input_error(2, "shape %s does not hold the %d x %d product"
                                      % (list(like.shape), y.shape[0], y.shape[1]))
            y = y.reshape(like.shape)
        return to_dev(y)
    return go

special = {"MatMul": matmul,
           "CopyCPUToGPU": lambda ctx: (lambda x: to_dev(x)),
           "CopyGPUToCPU": lambda ctx: (lambda x: host(x)),
           "EnsureCPUOutput": lambda ctx: (lambda x: host(x))}
for (dom, op, dev), table in list(registry._kernels.items()):
    if dev != CUDA:
        continue
    if op in special:
        f = special[op]
    else:
        cpu = registry._kernels.get((dom, op, CPU))
        if not cpu:
            print("no CPU kernel for", op); continue
        f = wrap(cpu[""][0].factory)
    registry._kernels[(dom, op, dev)] = {"": [KernelEntry(f)]}
# EnsureCPUOutput also on CPU
registry._kernels[("", "EnsureCPUOutput", CPU)] = {"": [KernelEntry(special["EnsureCPUOutput"])]}
