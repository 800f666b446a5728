"""Helpers shared by the GPU benchmarks: the no-GPU exit, device-to-device copy
bandwidth, event timing, random device tensors filled in chunks, launch counting
and torch on the same device when it is installed."""
import sys
import time

import numpy as np


def require_gpu():
    """Exit 0 with a clear message when PyCUDA or a GPU is missing."""
    from caffe2py.cuda import context
    ok, reason, _ = context.probe()
    if not ok:
        print("No GPU run: %s. Nothing was measured." % reason)
        sys.exit(0)
    context.activate(0)
    import pycuda.driver as drv
    return drv


def describe_device():
    import pycuda.driver as drv
    from caffe2py.cuda import context, cublas
    major, minor = context.compute_capability(0)
    version = ".".join(str(v) for v in drv.get_version())
    return "%s (sm_%d%d), CUDA %s, driver %s, GEMM backend %s" % (
        context.device_name(0), major, minor, version, drv.get_driver_version(), cublas.backend(0))


def time_on_stream(fn, iters, warmup=3):
    """Seconds per call of fn, measured with CUDA events on the caffe2py stream
    (fn may synchronise itself; events bracket the whole loop)."""
    import pycuda.driver as drv
    from caffe2py.cuda import context
    stream = context.stream(0)
    for _ in range(warmup):
        fn()
    stream.synchronize()
    start, stop = drv.Event(), drv.Event()
    start.record(stream)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    stop.record(stream)
    stop.synchronize()
    wall = (time.perf_counter() - t0) / iters
    return max(stop.time_since(start) / 1e3 / iters, 1e-9), wall


def time_synced(run, sync, iters, warmup=3):
    """Wall seconds per call of run, with sync() (e.g. torch.cuda.synchronize) before
    and after the loop: for peers that launch on their own streams."""
    for _ in range(warmup):
        run()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    sync()
    return (time.perf_counter() - t0) / iters


def copy_bandwidth(nbytes=1 << 30, iters=20):
    """Device-to-device memcpy bandwidth in bytes/s, counting bytes read + written
    (the same convention as the kernels' effective bandwidth)."""
    import pycuda.driver as drv
    from caffe2py.cuda import allocator, context
    src = allocator.empty((nbytes,), np.uint8)
    dst = allocator.empty((nbytes,), np.uint8)
    stream = context.stream(0)
    per_call, _ = time_on_stream(lambda: drv.memcpy_dtod_async(dst.gpudata, src.gpudata, nbytes, stream), iters)
    return 2.0 * nbytes / per_call


def fill_device(shape, dtype, make_chunk, rows_per_chunk=1 << 20):
    """A device array filled chunk by chunk from make_chunk(rows) (host memory stays small)."""
    import pycuda.driver as drv
    from caffe2py.cuda import adapter, allocator
    arr = adapter.tag(allocator.empty(shape, dtype), 0)
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    for lo in range(0, shape[0], rows_per_chunk):
        n = min(rows_per_chunk, shape[0] - lo)
        chunk = np.ascontiguousarray(make_chunk(n), dtype=dtype)
        drv.memcpy_htod(int(arr.gpudata) + lo * row_bytes, chunk)
    return arr


class LaunchCounter:
    """Counts kernel launches made through caffe2py.cuda.program.Program."""

    def __init__(self):
        from caffe2py.cuda import program
        self.program = program
        self.count = 0
        self._plain = program.Program.__call__

    def __enter__(self):
        counter = self

        def counting(prog, geometry, *args):
            counter.count += 1
            return counter._plain(prog, geometry, *args)
        self.program.Program.__call__ = counting
        return self

    def __exit__(self, *exc):
        self.program.Program.__call__ = self._plain


def torch_cuda():
    """torch when it is installed with CUDA and sees the GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def gb(x):
    return x / 1e9
