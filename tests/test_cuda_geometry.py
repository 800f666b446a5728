"""The CUDA device's host side, without a GPU: launch geometry, broadcast and
transpose strides, compile-cache keys, cuBLAS discovery and fallback, the device
placement check, the clear error for CUDA ops without PyCUDA/GPU, and every CUDA
op's argument checks and argument packing (through fake device arrays)."""
import os

import numpy as np
import pytest

from caffe2py import core, devices, workspace
from caffe2py.cuda import compiler, context, cublas, launch
from caffe2py.errors import Caffe2Error
from caffe2py.executor import PlacementTracker
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import CPU, CUDA, schema_for

from _cuda_fakes import run_fake

CUDA0 = core.DeviceOption(caffe2_pb2.CUDA, 0)


# --------------------------------------------------------------------------- geometry

@pytest.mark.parametrize("bags,dim,vec", [(1, 128, 4), (65536, 128, 4), (7, 16, 4), (3, 5, 1), (100, 1024, 4),
                                          (9, 64, 8), (2, 1, 1)])
def test_bag_geometry_covers_every_bag_and_column(bags, dim, vec):
    g = launch.bags(bags, dim, vec)
    lanes, per_block, _ = g.block
    assert lanes * per_block <= 1024 and lanes <= 32 and lanes & (lanes - 1) == 0
    assert g.grid[0] * per_block >= bags > (g.grid[0] - 1) * per_block
    # the lanes of one bag, stepping by lanes * vec, reach every column exactly once
    cols = sorted(c for lane in range(lanes) for c0 in range(lane * vec, dim, lanes * vec)
                  for c in range(c0, min(c0 + vec, dim)))
    assert cols == list(range(dim))
    if dim // vec >= 32:
        assert lanes == 32  # a full warp per bag once the row is wide enough


def test_elementwise_and_row_geometry():
    assert launch.elementwise(1).grid == (1, 1, 1)
    g = launch.elementwise(10 ** 9)
    assert g.grid[0] == launch.MAX_ELEMENTWISE_BLOCKS  # grid-stride loop covers the rest
    g = launch.elementwise(1000, items_per_thread=4)
    assert g.grid[0] * g.block[0] * 4 >= 1000
    r = launch.rows(5, 100)
    assert r.grid == (5, 1, 1) and r.block == (128, 1, 1)
    assert launch.rows(1, 3).block[0] == 32 and launch.rows(1, 10 ** 6).block[0] == 1024
    t = launch.gemm_tiles(33, 17, 4)
    assert t.grid == (2, 3, 4) and t.block == (16, 16, 1)
    assert launch.vector_width(12) == 4 and launch.vector_width(6) == 2 and launch.vector_width(7) == 1


def _offsets_from(dims, strides, n):
    out = []
    for i in range(n):
        rest, off = i, 0
        for d, s in zip(reversed(dims), reversed(strides)):
            off += (rest % d) * s
            rest //= d
        out.append(off)
    return np.array(out)


@pytest.mark.parametrize("a,b", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)),
                                 ((5, 1, 6), (1, 7, 1)), ((1,), (3, 2)), ((2, 1, 3, 1, 2), (2, 4, 3, 5, 1))])
def test_broadcast_strides_address_numpy_broadcast(a, b):
    out = np.broadcast_shapes(a, b)
    dims, (sa, sb) = launch.broadcast_strides(out, a, b)
    assert len(dims) <= launch.MAX_DIMS and int(np.prod(dims)) == int(np.prod(out))
    n = int(np.prod(out))
    want_a = np.broadcast_to(np.arange(int(np.prod(a))).reshape(a), out).ravel()
    want_b = np.broadcast_to(np.arange(int(np.prod(b))).reshape(b), out).ravel()
    np.testing.assert_array_equal(_offsets_from(dims, sa, n), want_a)
    np.testing.assert_array_equal(_offsets_from(dims, sb, n), want_b)


@pytest.mark.parametrize("shape,axes", [((2, 3, 4), (0, 2, 1)), ((2, 3, 4), (2, 1, 0)), ((2, 3, 4), (0, 1, 2)),
                                        ((4, 1, 5, 6), (3, 0, 2, 1)), ((2, 3, 4, 5, 6, 7), (5, 3, 1, 4, 2, 0))])
def test_permuted_strides_address_numpy_transpose(shape, axes):
    dims, strides = launch.permuted_strides(list(shape), list(axes))
    want = np.transpose(np.arange(int(np.prod(shape))).reshape(shape), axes).ravel()
    np.testing.assert_array_equal(_offsets_from(dims, strides, want.size), want)


# --------------------------------------------------------------------------- compiler cache

def test_cache_key_covers_source_options_arch_and_headers():
    base = compiler.cache_key("src", ("-O3",), "sm_80", "h")
    assert base == compiler.cache_key("src", ("-O3",), "sm_80", "h")
    others = {compiler.cache_key("src2", ("-O3",), "sm_80", "h"), compiler.cache_key("src", ("-O2",), "sm_80", "h"),
              compiler.cache_key("src", ("-O3",), "sm_90", "h"), compiler.cache_key("src", ("-O3",), "sm_80", "h2")}
    assert base not in others and len(others) == 4
    assert compiler.arch_for((8, 0)) == "sm_80" and compiler.arch_for((9, 0)) == "sm_90"
    assert compiler.OPTIONS == ("-O3",)


def test_compile_cache_hit_needs_no_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("CAFFE2PY_CUDA_CACHE", str(tmp_path))
    key = compiler.cache_key("// k", compiler.OPTIONS, "sm_90", "")
    (tmp_path / (key + ".cubin")).write_bytes(b"cached cubin")
    assert compiler.compile_cubin("// k", "sm_90", compiler.OPTIONS, "") == b"cached cubin"


def test_every_kernel_source_is_readable():
    names = sorted(compiler.source_paths())
    assert {"embedding", "quantize", "lstm", "tensor_ops", "gemm"} <= set(names)
    for name in names:
        assert "extern \"C\"" in compiler.read_source(name)
    assert "common.cuh" in compiler.headers_text()


# --------------------------------------------------------------------------- cuBLAS discovery

def test_cublas_candidates_from_env_cuda_home_and_wheel(tmp_path):
    home = tmp_path / "cuda"
    (home / "lib64").mkdir(parents=True)
    (home / "lib64" / "libcublas.so.12").write_bytes(b"")
    (home / "lib64" / "libcublasLt.so.12").write_bytes(b"")
    wheel = tmp_path / "site" / "nvidia" / "cublas" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libcublas.so.13").write_bytes(b"")
    paths = cublas.candidate_paths({"CUDA_HOME": str(home), "CAFFE2PY_CUBLAS": "/x/libcublas.so"},
                                   [str(tmp_path / "site")])
    assert paths[0] == "/x/libcublas.so"
    assert str(home / "lib64" / "libcublas.so.12") in paths
    assert str(wheel / "libcublas.so.13") in paths
    assert not any("libcublasLt" in p for p in paths)


def test_cublas_fallback_when_no_library_loads(tmp_path, monkeypatch):
    lib, reason = cublas.load_library([])
    assert lib is None and "no libcublas" in reason
    bogus = tmp_path / "libcublas.so.99"
    bogus.write_bytes(b"not a library")
    lib, reason = cublas.load_library([str(bogus)])
    assert lib is None and str(bogus) in reason
    monkeypatch.setattr(cublas, "candidate_paths", lambda *a, **k: [str(bogus)])
    monkeypatch.setattr(cublas, "_state", {})
    assert cublas.backend(0) == "fallback"


def test_gemm_argument_mapping_matches_column_major_identity():
    # Row-major C = op(A) op(B) computed as column-major C^T = op(B)^T op(A)^T.
    rng = np.random.default_rng(0)
    for ta in (False, True):
        for tb in (False, True):
            m, n, k = 3, 4, 5
            a = rng.standard_normal((k, m) if ta else (m, k))
            b = rng.standard_normal((n, k) if tb else (k, n))
            op_b, op_a, cm, cn, ck, ldb, lda, ldc = cublas.gemm_args(ta, tb, m, n, k)
            # interpret the row-major buffers as column-major matrices with the given lds
            bcol = b.ravel().reshape(-1, ldb).T
            acol = a.ravel().reshape(-1, lda).T
            left = bcol.T if op_b == cublas.CUBLAS_OP_T else bcol
            right = acol.T if op_a == cublas.CUBLAS_OP_T else acol
            ccol = left[:cm, :ck] @ right[:ck, :cn]
            want = (a.T if ta else a) @ (b.T if tb else b)
            np.testing.assert_allclose(ccol.T.reshape(m, n), want)
            assert ldc == n


# --------------------------------------------------------------------------- placement

class _FakeValue:
    def __init__(self, host, device_id=0):
        self.host, self.device_id = host, device_id


class _FakeCudaAdapter(devices.DeviceAdapter):
    device_type = CUDA

    def available(self):
        return True

    def count(self):
        return 1

    def to_device(self, array, device_id):
        return _FakeValue(array, device_id)

    def owns(self, value):
        return isinstance(value, _FakeValue)

    def device_id_of(self, value):
        return value.device_id

    def to_host(self, value):
        return value.host.copy()


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setitem(devices._adapters, CUDA, _FakeCudaAdapter())
    ws = workspace.Workspace("placement")
    return ws


def _net(*ops, name="n"):
    net = caffe2_pb2.NetDef(name=name)
    for op in ops:
        net.op.add().CopyFrom(op)
    return net


def test_cpu_op_reading_a_gpu_blob_is_refused_at_create_net(fake_cuda):
    ws = fake_cuda
    ws.feed_blob("x", np.ones(3, np.float32), CUDA0)
    with pytest.raises(Caffe2Error, match=r"input 'x' is on CUDA:0 but the op runs on CPU.*CopyCPUToGPU"):
        ws.create_net(_net(core.CreateOperator("Relu", ["x"], ["y"])))
    assert "n" not in ws.nets


def test_explicit_copy_to_host_passes_and_runs(fake_cuda):
    ws = fake_cuda
    ws.feed_blob("x", np.array([-1.0, 2.0], np.float32), CUDA0)
    ws.create_net(_net(core.CreateOperator("EnsureCPUOutput", ["x"], ["xh"]),
                       core.CreateOperator("Relu", ["xh"], ["y"])))
    ws.run_net("n")
    np.testing.assert_array_equal(ws.fetch_blob("y"), [0.0, 2.0])


def test_op_outputs_live_on_the_op_device():
    tracker = PlacementTracker({"x": np.zeros(2)})
    gpu_op = core.CreateOperator("Relu", ["xg"], ["yg"], device_option=CUDA0)
    copy_in = core.CreateOperator("CopyCPUToGPU", ["x"], ["xg"], device_option=CUDA0)
    tracker.check_and_record(copy_in, schema_for("CopyCPUToGPU"), "op0")
    tracker.check_and_record(gpu_op, schema_for("Relu"), "op1")
    assert tracker.where["yg"] == (CUDA, 0)
    with pytest.raises(Caffe2Error, match="input 'yg' is on CUDA:0 but the op runs on CPU"):
        tracker.check_and_record(core.CreateOperator("Relu", ["yg"], ["z"]), schema_for("Relu"), "op2")
    back = core.CreateOperator("CopyGPUToCPU", ["yg"], ["yh"], device_option=CUDA0)
    tracker.check_and_record(back, schema_for("CopyGPUToCPU"), "op3")
    assert tracker.where["yh"] == (CPU, 0)
    other = core.CreateOperator("Relu", ["yg"], ["w"], device_option=core.DeviceOption(caffe2_pb2.CUDA, 1))
    with pytest.raises(Caffe2Error, match="on CUDA:0 but the op runs on CUDA:1"):
        tracker.check_and_record(other, schema_for("Relu"), "op4")


def test_cuda_op_without_gpu_is_a_clear_error(fake_cuda, monkeypatch):
    monkeypatch.setattr(context, "probe", lambda: (False, "no CUDA device was found", 0))
    ws = fake_cuda
    ws.feed_blob("x", np.ones(3, np.float32), CUDA0)
    with pytest.raises(Caffe2Error, match="CUDA is not available"):
        ws.create_net(_net(core.CreateOperator("Relu", ["x"], ["y"], device_option=CUDA0)))


def test_gpu_support_reports_the_truth():
    assert workspace.NumGpuDevices() == context.device_count()
    assert workspace.has_gpu_support == context.available()
    assert workspace.GpuDeviceType == caffe2_pb2.CUDA


# --------------------------------------------------------------------------- op host side

def _op(op_type, ins, outs, **kw):
    return core.CreateOperator(op_type, ins, outs, device_option=CUDA0, **kw)


def _only_launch(rt, function_prefix):
    names = [fn for _, fn, *_ in rt.launches]
    assert any(n.startswith(function_prefix) for n in names), names
    for _, _, _, g, _ in rt.launches:
        assert g.block[0] * g.block[1] * g.block[2] <= 1024


@pytest.mark.parametrize("op_type,table", [
    ("SparseLengthsSum", np.zeros((10, 16), np.float32)),
    ("SparseLengthsMean", np.zeros((10, 6), np.float16)),
    ("SparseLengthsSumFused8BitRowwise", np.zeros((10, 24), np.uint8)),
    ("SparseLengthsMeanFused4BitRowwise", np.zeros((10, 12), np.uint8)),
])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_sparse_lengths_host_side(monkeypatch, op_type, table, itype):
    idx = np.array([1, 2, 3], itype)
    out, rt = run_fake(monkeypatch, _op(op_type, ["d", "i", "l"], ["o"]), table, idx, np.array([2, 1], np.int32))
    dim = {"SparseLengthsSum": 16, "SparseLengthsMean": 6, "SparseLengthsSumFused8BitRowwise": 16,
           "SparseLengthsMeanFused4BitRowwise": 16}[op_type]
    assert out.shape == (2, dim) and out.dtype == np.float32
    assert [fn for _, fn, *_ in rt.launches][0] == "lengths_to_offsets"
    _only_launch(rt, "sls_")


def test_sparse_lengths_offsets_and_weights(monkeypatch):
    op = _op("SparseLengthsWeightedSumIdx", ["d", "w", "i", "o"], ["y"], include_last_offset=0)
    out, rt = run_fake(monkeypatch, op, np.zeros((5, 8), np.float32), np.ones(4, np.float32),
                       np.array([0, 1, 2, 3], np.int64), np.array([0, 3], np.int32))
    assert out.shape == (2, 8) and len(rt.launches) == 1 and rt.launches[0][1] == "sls_f32_i64_o32"


def test_sparse_lengths_errors_use_the_cpu_texts(monkeypatch):
    from _cuda_fakes import FakeStatus
    monkeypatch.setattr(FakeStatus, "read", lambda self: (1, 0))
    with pytest.raises(Caffe2Error, match="Index 1 is out of bounds: 7, range 0 to 5"):
        run_fake(monkeypatch, _op("SparseLengthsSum", ["d", "i", "l"], ["o"]), np.zeros((5, 4), np.float32),
                 np.array([0, 7], np.int32), np.array([2], np.int32))
    monkeypatch.setattr(FakeStatus, "read", lambda self: (None, 2))
    with pytest.raises(Caffe2Error, match="the sum of lengths values should be the size of the indices"):
        run_fake(monkeypatch, _op("SparseLengthsSum", ["d", "i", "l"], ["o"]), np.zeros((5, 4), np.float32),
                 np.array([0, 1], np.int32), np.array([3], np.int32))
    with pytest.raises(Caffe2Error, match="INDICES must be a vector"):
        run_fake(monkeypatch, _op("SparseLengthsSum", ["d", "i", "l"], ["o"]), np.zeros((5, 4), np.float32),
                 np.zeros((1, 2), np.int32), np.array([2], np.int32))
    with pytest.raises(Caffe2Error, match="expected a CUDA tensor"):
        from caffe2py.registry import OpContext, select_kernel
        from caffe2py.operators import _cuda_runtime
        from _cuda_fakes import FakeRuntime
        monkeypatch.setattr(_cuda_runtime, "_runtime", FakeRuntime)
        op = _op("Relu", ["x"], ["y"])
        entry, _, schema = select_kernel(op)
        entry.factory(OpContext(op, schema, 0))(np.zeros(3, np.float32))


@pytest.mark.parametrize("op_type,inputs,shape", [
    ("FloatToFused8BitRowwiseQuantized", [np.zeros((3, 5), np.float32)], (3, 13)),
    ("Fused8BitRowwiseQuantizedToFloat", [np.zeros((3, 13), np.uint8)], (3, 5)),
    ("FloatToHalf", [np.zeros((7,), np.float32)], (7,)),
    ("HalfToFloat", [np.zeros((2, 3), np.float16)], (2, 3)),
    ("Add", [np.zeros((2, 3), np.float32), np.zeros((3,), np.float32)], (2, 3)),
    ("Mul", [np.zeros((2, 1, 4), np.float16), np.zeros((3, 1), np.float16)], (2, 3, 4)),
    ("Relu", [np.zeros((4, 4), np.float32)], (4, 4)),
    ("Tanh", [np.zeros((4,), np.float16)], (4,)),
    ("Softmax", [np.zeros((4, 10), np.float32)], (4, 10)),
    ("Transpose", [np.zeros((2, 3, 4), np.float32)], (4, 3, 2)),
    ("Gather", [np.zeros((6, 3), np.float32), np.zeros((2, 2), np.int64)], (2, 2, 3)),
    ("FC", [np.zeros((4, 3), np.float32), np.zeros((5, 3), np.float32), np.zeros(5, np.float32)], (4, 5)),
])
def test_other_ops_host_side(monkeypatch, op_type, inputs, shape):
    from caffe2py.cuda import cublas as cb
    calls = []
    monkeypatch.setattr(cb, "sgemm_batched", lambda *a, **k: calls.append(a))
    names = ["x%d" % i for i in range(len(inputs))]
    out, rt = run_fake(monkeypatch, _op(op_type, names, ["y"]), *inputs)
    assert out.shape == shape
    if op_type == "FC":
        assert calls and calls[0][3:7] == (4, 5, 3, 1)


def test_concat_and_lstm_host_side(monkeypatch):
    xs = [np.zeros((2, k, 3), np.float32) for k in range(1, 11)]  # ten inputs: two launches
    (out, split), rt = run_fake(monkeypatch, _op("Concat", ["x%d" % i for i in range(10)], ["y", "s"], axis=1), *xs)
    assert out.shape == (2, 55, 3) and len(rt.launches) == 2
    np.testing.assert_array_equal(split.get(), np.arange(1, 11))
    n, d = 3, 8
    args = [np.zeros((1, n, d), np.float16), np.zeros((1, n, d), np.float16), np.zeros((1, n, 4 * d), np.float16),
            np.zeros(n, np.int32), np.zeros(1, np.int32)]
    (h, c), rt = run_fake(monkeypatch, _op("LSTMUnit", ["h", "c", "g", "s", "t"], ["H", "C"]), *args)
    assert h.shape == (1, n, d) and rt.launches[0][1] == "lstm_unit_f16_v4"
    grads, rt = run_fake(monkeypatch, _op("LSTMUnitGradient", ["h", "c", "g", "s", "t", "H", "C", "dH", "dC"],
                                          ["dh", "dc", "dg"]),
                         *(args + [np.zeros((1, n, d), np.float16)] * 4))
    assert [g.shape for g in grads] == [(1, n, d), (1, n, d), (1, n, 4 * d)]


def test_gpu_test_references_agree_with_the_cpu_ops():
    """tests/test_cuda_ops.py, dry-run with CPU kernels standing in for the CUDA ones
    (tests/_cuda_dryrun.py): its NumPy references and harness match the CPU ops."""
    import subprocess
    import sys
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=tests + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_cuda_dryrun", "-p", "no:cacheprovider",
                           os.path.join(tests, "test_cuda_ops.py")], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout


def test_nvcc_is_found_off_path(tmp_path):
    (tmp_path / "bin").mkdir()
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    assert compiler.find_nvcc({"PATH": "/nonexistent", "CUDA_HOME": str(tmp_path)}) == str(nvcc)
    assert compiler.find_nvcc({"PATH": str(tmp_path / "bin")}) == str(nvcc)


def test_sparse_lengths_with_no_indices_gives_zeros_without_launching(monkeypatch):
    out, rt = run_fake(monkeypatch, _op("SparseLengthsSum", ["d", "i", "l"], ["o"]), np.ones((5, 4), np.float32),
                       np.zeros(0, np.int32), np.array([0, 0], np.int32))
    assert out.shape == (2, 4) and not rt.launches
    np.testing.assert_array_equal(out.get(), 0)


# --------------------------------------------------------------------------- fake PyCUDA smoke runs

_SMOKE = r"""
import numpy as np
from caffe2py import core, workspace
from caffe2py.cuda import allocator, cublas
from caffe2py.proto import caffe2_pb2
assert workspace.has_gpu_support and workspace.NumGpuDevices() == 1
g = core.DeviceOption(caffe2_pb2.CUDA, 0)
x = np.arange(12, dtype=np.float32).reshape(3, 4)
workspace.FeedBlob("x", x, g)
np.testing.assert_array_equal(workspace.FetchBlob("x"), x)
workspace.FeedBlob("w", np.ones((5, 4), np.float32), g)
workspace.FeedBlob("b", np.ones(5, np.float32), g)
workspace.FeedBlob("i", np.array([0, 2, 1], np.int64), g)
workspace.FeedBlob("l", np.array([2, 1], np.int32), g)
net = core.Net("smoke")
net.Proto().device_option.CopyFrom(g)
net.FC(["x", "w", "b"], "f")
net.Concat(["x", "x"], ["c", "split"], axis=1)
net.SparseLengthsSum(["x", "i", "l"], "s")
net.CopyGPUToCPU(["s"], "s_host")
workspace.CreateNet(net)
for _ in range(3):
    workspace.RunNet("smoke")
assert workspace.FetchBlob("f").shape == (3, 5) and workspace.FetchBlob("s").shape == (2, 4)
np.testing.assert_array_equal(workspace.FetchBlob("split"), [4, 4])
assert isinstance(workspace.current_workspace().blobs["s_host"], np.ndarray)
assert cublas.backend() == "fallback"
print("smoke ok", allocator.stats(0))
"""


@pytest.mark.parametrize("command", [
    ["-c", _SMOKE],
    ["benchmarks/gpu_embedding_bench.py", "--rows", "500", "--bags", "32", "--per-bag", "4", "--iters", "2",
     "--copy-mb", "4"],
    ["benchmarks/gpu_lstm_bench.py", "--n", "32", "--d", "16", "--iters", "2", "--copy-mb", "4"],
])
def test_host_code_and_benchmarks_run_on_fake_pycuda(tmp_path, command):
    """tests/_fake_pycuda stands in for PyCUDA (host memory, kernels only checked for
    argument packing): the device layer, the ops and both GPU benchmarks run end to end."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "tests", "_fake_pycuda"),
               CAFFE2PY_CUDA_CACHE=str(tmp_path))
    proc = subprocess.run([sys.executable] + command, cwd=root, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Fake GPU" in proc.stdout or "smoke ok" in proc.stdout
    assert "No GPU run" not in proc.stdout


# --------------------------------------------------------------------------- bytes each op must move

def _gpu_common():
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    try:
        import _gpu_common
    finally:
        sys.path.pop(0)
    return _gpu_common


def test_lookup_and_lstm_traffic_and_the_hbm_bound():
    g = _gpu_common()
    # 6 indices, 4 distinct rows of 136 bytes (fused 8-bit, dim 128), 2 bags of 128 float32 outputs
    indices = np.array([5, 7, 5, 9, 1, 7], np.int64)
    assert g.sls_bytes(indices, 2, 136, 128) == 4 * 136 + 6 * 8 + 2 * 4 + 2 * 128 * 4
    assert g.sls_bytes(indices.astype(np.int32), 2, 136, 128, index_itemsize=4, weighted=True) == \
        4 * 136 + 6 * 4 + 2 * 4 + 6 * 4 + 2 * 128 * 4
    # forward: 4D gates + D cell in, 2D out; gradient: 8D in, 6D out; plus N lengths and the timestep
    assert g.lstm_bytes(3, 10, 4) == 3 * 7 * 10 * 4 + 3 * 4 + 4
    assert g.lstm_bytes(3, 10, 2, gradient=True) == 3 * 14 * 10 * 2 + 3 * 4 + 4
    assert g.hbm_seconds(3.35e12) == 1.0
    assert g.bound_row("x", 3.35e6, 2e-6) == "| x | 3.4 | 1.0 | 2.0 | 2.00 |"


def test_gpu_benchmarks_print_the_bounds_without_a_gpu():
    """With PyCUDA missing (or no GPU) both GPU benchmarks still print the bytes each
    call must move and the HBM-bandwidth lower bound, then exit 0."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, CAFFE2PY_CUDA_BACKEND="pycuda")
    for args in (["gpu_embedding_bench.py", "--rows", "1000", "--bags", "64", "--per-bag", "8"],
                 ["gpu_lstm_bench.py", "--n", "64", "--d", "32"]):
        proc = subprocess.run([sys.executable, os.path.join("benchmarks", args[0])] + args[1:], cwd=root,
                              capture_output=True, text=True, env=env, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "| case | MB moved | HBM bound us (3.35 TB/s) |" in proc.stdout
        assert "No GPU run" in proc.stdout or "device:" in proc.stdout
