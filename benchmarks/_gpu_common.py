"""Helpers shared by the GPU benchmarks: the bytes each op must move and the time
that takes at H100 HBM bandwidth (printed with or without a GPU), the no-GPU exit,
device-to-device copy bandwidth, event timing, random device tensors filled in
chunks, launch counting and torch on the same device when it is installed."""
import sys
import time

import numpy as np

HBM_BYTES_PER_S = 3.35e12   # H100 SXM HBM3


def drv_module():
    from caffe2py.cuda import backend
    return backend.driver()


def require_gpu():
    """Exit 0 with a clear message when PyCUDA or a GPU is missing (the CPU emulator
    measures nothing either)."""
    from caffe2py.cuda import backend, context
    ok, reason, _ = context.probe()
    if ok and backend.is_emulator():
        ok, reason = False, "the CUDA emulator is selected (CAFFE2PY_CUDA_BACKEND=emulator): it runs kernels, it does " \
                            "not time them"
    if not ok:
        print("No GPU run: %s. Nothing was measured." % reason)
        sys.exit(0)
    context.activate(0)
    return drv_module()


# ----------------------------------------------------------------------------- traffic models

def sls_bytes(indices, n_bags, row_bytes, dim, index_itemsize=8, weighted=False):
    """Bytes a SparseLengths lookup (lengths form) must move: every distinct table row
    once, the indices, lengths (and weights), and the float32 output."""
    unique_rows = int(np.unique(indices).size)
    n = int(np.asarray(indices).size)
    return (unique_rows * row_bytes + n * index_itemsize + n_bags * 4 + (n * 4 if weighted else 0)
            + n_bags * dim * 4)


def lstm_bytes(n, d, itemsize, gradient=False):
    """Bytes LSTMUnit (or its gradient) must move with every row inside its sequence:
    forward reads gates (4D) and cell_t_prev (D) and writes hidden_t and cell_t (2D);
    the gradient reads cell_t_prev, gates, cell_t, hidden_t_grad, cell_t_grad (8D) and
    writes three gradients (6D); both read N int32 sequence lengths and the timestep."""
    per_row = (14 if gradient else 7) * d * itemsize
    return n * per_row + n * 4 + 4


def hbm_seconds(nbytes):
    return nbytes / HBM_BYTES_PER_S


def bound_row(name, nbytes, measured_s=None):
    """A markdown row: bytes, the HBM lower bound, and (on a GPU) the measured time."""
    bound = hbm_seconds(nbytes)
    measured = "-" if measured_s is None else "%.1f" % (measured_s * 1e6)
    ratio = "-" if measured_s is None else "%.2f" % (measured_s / bound)
    return "| %s | %.1f | %.1f | %s | %s |" % (name, nbytes / 1e6, bound * 1e6, measured, ratio)


BOUND_HEADER = ("| case | MB moved | HBM bound us (3.35 TB/s) | measured us | measured / bound |\n"
                "|---|---|---|---|---|")


def describe_device():
    drv = drv_module()
    from caffe2py.cuda import context, cublas
    major, minor = context.compute_capability(0)
    version = ".".join(str(v) for v in drv.get_version())
    return "%s (sm_%d%d), CUDA %s, driver %s, GEMM backend %s" % (
        context.device_name(0), major, minor, version, drv.get_driver_version(), cublas.backend(0))


def time_on_stream(fn, iters, warmup=3):
    """Seconds per call of fn, measured with CUDA events on the caffe2py stream
    (fn may synchronise itself; events bracket the whole loop)."""
    drv = drv_module()
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
    drv = drv_module()
    from caffe2py.cuda import allocator, context
    src = allocator.empty((nbytes,), np.uint8)
    dst = allocator.empty((nbytes,), np.uint8)
    stream = context.stream(0)
    per_call, _ = time_on_stream(lambda: drv.memcpy_dtod_async(dst.gpudata, src.gpudata, nbytes, stream), iters)
    return 2.0 * nbytes / per_call


def fill_device(shape, dtype, make_chunk, rows_per_chunk=1 << 20):
    """A device array filled chunk by chunk from make_chunk(rows) (host memory stays small)."""
    drv = drv_module()
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
