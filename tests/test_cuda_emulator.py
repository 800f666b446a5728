"""The CUDA emulator itself (caffe2py.cuda.emulator): the CUDA device surface its
header gives kernel sources (thread coordinates, shuffles, votes, barriers, atomics,
__half, conversions, dynamic shared memory) against references written out here from
CUDA's documented definitions, and the checks a GPU does not give, proven on the
deliberately broken kernels of tests/cuda_kernels/broken.cu and on copies of our own
kernels with a bug injected. Runs on the emulator whatever backend is selected."""
import os
import re
import shutil
from fractions import Fraction

import numpy as np
import pytest

from caffe2py.cuda import emulator

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not emulator.available()[0], reason="needs a CUDA GPU with PyCUDA, or the CPU emulator "
                                 "(these tests: the emulator itself, on Linux with g++ 12+)")]

HERE = os.path.dirname(os.path.abspath(__file__))
SEMANTICS = os.path.join(HERE, "cuda_kernels", "semantics.cu")
BROKEN = os.path.join(HERE, "cuda_kernels", "broken.cu")
KERNELS = os.path.join(os.path.dirname(HERE), "kernels", "cuda")


class Device:
    """Direct use of the emulated device: arrays from a pool, prepared launches."""

    def __init__(self, source):
        from caffe2py.cuda.emulator import memory
        self.memory = memory
        self.pool = memory.DeviceMemoryPool()
        self.module = emulator.module_from_file(source)

    def put(self, host):
        host = np.ascontiguousarray(host)
        arr = self.memory.DeviceArray(host.shape, host.dtype, allocator=self.pool.allocate)
        arr.set(host)
        return arr

    def empty(self, shape, dtype):
        return self.memory.DeviceArray(shape, dtype, allocator=self.pool.allocate)

    def launch(self, name, fmt, grid, block, *args, shared=0):
        # `args` keeps the arrays alive until the launch is over (temporaries would
        # otherwise be freed first: the emulator refuses pointers into freed buffers)
        pointers = [a.ptr if isinstance(a, self.memory.DeviceArray) else a for a in args]
        self.module.get_function(name).prepare(fmt).prepared_call(grid, block, *pointers, shared_size=shared)


@pytest.fixture(scope="module")
def sem():
    return Device(SEMANTICS)


@pytest.fixture(scope="module")
def bad():
    return Device(BROKEN)


@pytest.fixture(autouse=True)
def every_order():
    """All three thread orders, a fixed seed, restored after each test."""
    saved = emulator.configure(orders=("forward", "reversed", "shuffled"), seed=1234)
    yield
    emulator.restore(saved)


# --------------------------------------------------------------------------- the device surface

def test_coordinates_cover_a_3d_grid(sem):
    grid, block = (3, 2, 2), (4, 3, 2)
    n = int(np.prod(grid) * np.prod(block))
    out = sem.empty((n, 6), np.int32)
    sem.launch("coordinates", "P", grid, block, out)
    got = out.get()
    bz, by, bx, tz, ty, tx = np.meshgrid(*(np.arange(d) for d in (grid[2], grid[1], grid[0], block[2], block[1],
                                                                   block[0])), indexing="ij")
    want = np.stack([tx, ty, tz, bx, by, bz], -1).reshape(n, 6)
    np.testing.assert_array_equal(got, want)


def _shuffle_reference(kind, lane, arg, width):
    """Source lane of a shuffle as the CUDA C++ Programming Guide defines it."""
    group = lane // width * width
    if kind == 0:       # __shfl_sync: srcLane modulo width, within the lane's group
        return group + arg % width
    if kind == 1:       # __shfl_up_sync: lane - delta, unless that leaves the group
        return lane - arg if lane % width >= arg else lane
    if kind == 2:       # __shfl_down_sync
        return lane + arg if lane % width + arg < width else lane
    src = lane ^ arg    # __shfl_xor_sync: later groups give the caller's own value
    return lane if src // width > lane // width else src


@pytest.mark.parametrize("kind,arg", [(0, 0), (0, 5), (0, 31), (0, 37), (0, -1), (1, 0), (1, 1), (1, 3), (1, 16),
                                      (2, 1), (2, 5), (2, 16), (2, 31), (3, 1), (3, 5), (3, 16), (3, 31)])
@pytest.mark.parametrize("width", [32, 16, 8, 2, 1])
def test_shuffles_follow_the_cuda_definitions(sem, kind, arg, width):
    values = np.arange(64, dtype=np.int32) * 7 + 3
    out = sem.empty(64, np.int32)
    sem.launch("shuffle", "PPiii", (1, 1, 1), (64, 1, 1), sem.put(values), out, kind, arg, width)
    want = [values[w * 32 + _shuffle_reference(kind, lane, arg, width)] for w in range(2) for lane in range(32)]
    np.testing.assert_array_equal(out.get(), want)


def test_shuffles_carry_doubles_and_64_bit_integers(sem):
    d = np.random.default_rng(0).standard_normal(32)
    q = (np.arange(32, dtype=np.int64) << 40) - 7
    out_d, out_q = sem.empty(32, np.float64), sem.empty(32, np.int64)
    sem.launch("shuffle_wide", "PPPP", (1, 1, 1), (32, 1, 1), sem.put(d), out_d, sem.put(q), out_q)
    lanes = np.arange(32)
    np.testing.assert_array_equal(out_d.get(), d[np.where(lanes + 3 < 32, lanes + 3, lanes)])
    np.testing.assert_array_equal(out_q.get(), q[lanes ^ 5])


def test_votes_ballots_matches_and_reductions(sem):
    values = np.concatenate([np.arange(1, 33), np.tile([-2, 5, 5, 0], 8)]).astype(np.int32)
    out = sem.empty((64, 8), np.uint32)
    sem.launch("votes", "PP", (1, 1, 1), (64, 1, 1), sem.put(values), out)
    got = out.get()
    for w in range(2):
        v = values[w * 32:(w + 1) * 32]
        ballot = sum(1 << k for k in range(32) if v[k] > 0)
        for lane in range(32):
            row = got[w * 32 + lane]
            match = sum(1 << k for k in range(32) if v[k] == v[lane])
            want = [ballot, int((v > 0).all()), int((v > 0).any()), match, int(v.astype(np.int64).sum()) % 2 ** 32,
                    int(v.min()) % 2 ** 32, int(v.max()) % 2 ** 32, int((v != 0).sum())]
            assert list(row) == want, (w, lane)


def test_half_warp_masks_and_widths(sem):
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    out = sem.empty(64, np.float32)
    sem.launch("half_warp_sums", "PP", (1, 1, 1), (64, 1, 1), sem.put(x), out)
    want = np.repeat(x.reshape(4, 16).astype(np.float64).sum(1), 16)
    np.testing.assert_allclose(out.get(), want, rtol=1e-6)


def test_syncthreads_count_and_or(sem):
    for pred in ([1] * 96, [0] * 96, [1, 0, 0] * 32):
        out = sem.empty(3, np.int32)
        sem.launch("barrier_reductions", "PP", (1, 1, 1), (96, 1, 1), sem.put(np.array(pred, np.int32)), out)
        np.testing.assert_array_equal(out.get(), [sum(pred), int(all(pred)), int(any(pred))])


def test_atomics_in_shared_and_global_memory(sem):
    blocks, threads = 4, 64
    n = blocks * threads
    values = np.random.default_rng(2).integers(-1000, 1000, n).astype(np.int32)
    out = sem.put(np.array([0, 2 ** 31 - 1, -2 ** 31], np.int32))
    uout, cas, fout = sem.put(np.zeros(2, np.uint32)), sem.put(np.zeros(2, np.uint64)), sem.put(np.zeros(1, np.float32))
    sem.launch("atomics", "PPPPP", (blocks, 1, 1), (threads, 1, 1), sem.put(values), out, uout, cas, fout)
    np.testing.assert_array_equal(out.get(), [values.sum(), values.min(), values.max()])
    np.testing.assert_array_equal(uout.get(), [n % 10, 0xFFFFFFFF])   # atomicInc wraps after 9
    np.testing.assert_array_equal(cas.get(), [1, n - 1])                # exactly one CAS saw 0
    assert fout.get()[0] == 0.5 * n


def _nearest_half(value):
    """Round an exact rational to binary16, ties to even (a reference independent of
    the float conversions under test)."""
    value = Fraction(value)
    with np.errstate(over="ignore"):
        h = np.float16(float(value))
    if np.isinf(h):
        return h
    cands = [np.nextafter(h, np.float16(-np.inf)), h, np.nextafter(h, np.float16(np.inf))]
    cands = [c for c in cands if np.isfinite(c)]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - value), int(c.view(np.uint16)) & 1))
    return best


def _directed_half(x, mode):
    """float32 -> binary16 rounded toward zero / down / up."""
    x = float(x)
    with np.errstate(over="ignore"):
        h = np.float16(x)
        if np.isnan(h) or float(h) == x:
            return h
        lo = h if float(h) < x else np.nextafter(h, np.float16(-np.inf))
        hi = h if float(h) > x else np.nextafter(h, np.float16(np.inf))
    if mode == "rd":
        return lo
    if mode == "ru":
        return hi
    return lo if x > 0 else hi


def test_half_conversions_and_arithmetic(sem):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-8, 6, 200),
                        [65504.0, 65519.0, 65520.0, 1e6, -1e6, 6e-8, 3e-8, 2.0 ** -25, -2.0 ** -25,
                         1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, np.nan, np.inf, -np.inf, 0.0, -0.0]]).astype(np.float32)
    n = x.size
    a = rng.standard_normal(n).astype(np.float16)
    b = (rng.uniform(0.5, 4, n) * rng.choice([-1, 1], n)).astype(np.float16)
    c = rng.standard_normal(n).astype(np.float16)
    # ties that a rounding to float before half would get wrong: a * b is exactly
    # halfway between two halves and c is the smallest subnormal, either sign
    a[:4] = np.float16(1.015625)
    b[:4] = np.float16(1.03125)
    c[:4] = [2.0 ** -24, -2.0 ** -24, 0.0, 2.0 ** -23]
    outs = [sem.empty(n, np.float16) for _ in range(8)] + [sem.empty(n, np.float32)]
    sem.launch("half_ops", "PPPPq" + "P" * 9, (2, 1, 1), (64, 1, 1), sem.put(x), sem.put(a), sem.put(b),
               sem.put(c), n, *outs)
    rn, rz, rd, ru, add, mul, div, fma, h2f = (o.get() for o in outs)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(rn, x.astype(np.float16))
    for got, mode in ((rz, "rz"), (rd, "rd"), (ru, "ru")):
        np.testing.assert_array_equal(got, [_directed_half(v, mode) for v in x])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_array_equal(add, (a64 + b64).astype(np.float16))   # exact in float64, one rounding
    np.testing.assert_array_equal(mul, (a64 * b64).astype(np.float16))
    np.testing.assert_array_equal(div, [_nearest_half(Fraction(float(p)) / Fraction(float(q))) for p, q in zip(a, b)])
    want_fma = [_nearest_half(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))) for p, q, r in zip(a, b, c)]
    np.testing.assert_array_equal(fma, want_fma)
    assert fma[0] > fma[1]   # the tie went up with +c, down with -c
    np.testing.assert_array_equal(h2f, a.astype(np.float32) + b.astype(np.float32))


def test_float_to_int_conversions_saturate_like_a_gpu(sem):
    x = np.array([1.5, 2.5, -1.5, -2.5, 0.49999997, 3e9, -3e9, 1e20, np.nan, np.inf, -np.inf, 7.9, -7.9], np.float32)
    outs = [sem.empty(x.size, t) for t in (np.int32, np.int32, np.uint32, np.int64)]
    sem.launch("conversions", "PqPPPP", (1, 1, 1), (32, 1, 1), sem.put(x), x.size, *outs)
    x64 = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=1e300, neginf=-1e300)

    def sat(v, info):
        return np.clip(v, info.min, info.max)
    np.testing.assert_array_equal(outs[0].get(), sat(np.rint(x64), np.iinfo(np.int32)))
    np.testing.assert_array_equal(outs[1].get(), sat(np.trunc(x64), np.iinfo(np.int32)))
    np.testing.assert_array_equal(outs[2].get(), sat(np.rint(x64), np.iinfo(np.uint32)))
    np.testing.assert_array_equal(outs[3].get(), sat(np.floor(x64), np.iinfo(np.int64)))


def test_dynamic_shared_memory_is_one_window_bounded_by_the_launch(sem):
    n = 64
    out = sem.empty(2 * n, np.float32)
    sem.launch("dynamic_shared", "Pi", (1, 1, 1), (n, 1, 1), out, n, shared=4 * n)
    np.testing.assert_array_equal(out.get(), np.concatenate([np.arange(n)[::-1], np.ones(n)]))
    with pytest.raises(emulator.EmulatorError, match=r"extern __shared__ byte 128, but the launch gave 128 bytes"):
        sem.launch("dynamic_shared", "Pi", (1, 1, 1), (n, 1, 1), out, n, shared=128)


def test_a_correct_reduction_agrees_in_every_order(sem):
    x = np.random.default_rng(4).standard_normal(3000).astype(np.float32)
    out = sem.empty(3, np.float32)
    sem.launch("block_sum", "PPi", (3, 1, 1), (256, 1, 1), sem.put(x), out, x.size)
    np.testing.assert_allclose(out.get(), np.full(3, x.astype(np.float64).sum()), rtol=1e-5)


def test_device_variables_see_each_launch_once(sem):
    """Each launch runs three times (one per thread order) from the same state: a
    __device__ counter still advances once per launch."""
    out = sem.empty(1, np.uint64)
    sem.launch("read_count", "P", (1, 1, 1), (1, 1, 1), out)
    start = int(out.get()[0])
    for _ in range(2):
        sem.launch("count_threads", "P", (3, 1, 1), (64, 1, 1), sem.empty(1, np.uint64))
    sem.launch("read_count", "P", (1, 1, 1), (1, 1, 1), out)
    assert int(out.get()[0]) - start == 2 * 3 * 64


def test_unwritten_memory_reads_as_nan(sem):
    """Fresh shared memory and fresh (or reused) device buffers are 0xFF bytes."""
    out = sem.empty(64, np.float32)
    sem.launch("reads_unwritten_shared", "P", (1, 1, 1), (64, 1, 1), out)
    assert np.isnan(out.get()).all()
    for _ in range(2):   # the second buffer comes back from the pool: filled again
        acc = sem.empty(100, np.float32)
        sem.launch("accumulates_into_output", "Pi", (1, 1, 1), (128, 1, 1), acc, 100)
        assert np.isnan(acc.get()).all()
        del acc


# --------------------------------------------------------------------------- the checks catch each bug

def _raises(kind, pattern, fn, *args, **kw):
    with pytest.raises(emulator.EmulatorError, match=pattern) as info:
        fn(*args, **kw)
    assert info.value.kind == kind, str(info.value)
    return info.value


def test_off_by_one_read_names_kernel_thread_and_buffer(bad):
    from caffe2py.cuda.emulator import runtime
    n = 100
    err = _raises(runtime.ERR_OUT_OF_BOUNDS, r"kernel off_by_one \(broken.cu\), block \(0,0,0\) thread \(100,0,0\): "
                  r"out-of-bounds access: read of 4 bytes at 0x[0-9a-f]+, 0 bytes past the end of argument 'in' "
                  r"\(a 400-byte buffer, float32\[100\]\)",
                  bad.launch, "off_by_one", "PPi", (1, 1, 1), (128, 1, 1), bad.put(np.ones(n, np.float32)),
                  bad.empty(n, np.float32), n)
    assert err.kernel == "off_by_one" and err.argument == "in"


def test_write_past_the_end_and_read_before_the_start(bad):
    from caffe2py.cuda.emulator import runtime
    x = bad.put(np.ones(50, np.float32))
    _raises(runtime.ERR_OUT_OF_BOUNDS, r"write of 4 bytes at 0x[0-9a-f]+, 0 bytes past the end of argument 'out'",
            bad.launch, "writes_one_past", "PPi", (1, 1, 1), (64, 1, 1), x, bad.empty(50, np.float32), 50)
    _raises(runtime.ERR_OUT_OF_BOUNDS, r"thread \(0,0,0\).*read of 4 bytes.* 4 bytes before the start of argument 'in'",
            bad.launch, "reads_before_start", "PPi", (1, 1, 1), (64, 1, 1), x, bad.empty(50, np.float32), 50)


def test_missing_barrier_is_caught_by_the_order_check(bad):
    x = bad.put(np.arange(256, dtype=np.float32))
    err = _raises("order", r"kernel missing_barrier \(broken.cu\) gives different results when the threads of a "
                  r"block run in forward and in reversed order.*argument 'out' differs first at byte [0-3] ",
                  bad.launch, "missing_barrier", "PPi", (1, 1, 1), (256, 1, 1), x, bad.empty(1, np.float32), 256)
    assert err.argument == "out"
    # in one order only, the race goes unseen: the orders are what catch it
    emulator.configure(orders=("forward",))
    bad.launch("missing_barrier", "PPi", (1, 1, 1), (256, 1, 1), x, bad.empty(1, np.float32), 256)


def test_scratch_reused_without_a_barrier_is_caught(bad):
    """The race common.cuh's block_reduce avoids with its first __syncthreads."""
    x = bad.put(np.random.default_rng(5).standard_normal(128).astype(np.float32))
    _raises("order", r"reused_scratch_without_barrier.*different results", bad.launch,
            "reused_scratch_without_barrier", "PP", (1, 1, 1), (128, 1, 1), x, bad.empty(128, np.float32))


def test_blocks_writing_the_same_output_are_caught(bad):
    _raises("order", r"blocks_race.*different results", bad.launch, "blocks_race", "P", (8, 1, 1), (32, 1, 1),
            bad.empty(1, np.float32))


def test_a_race_on_a_device_variable_is_caught(bad):
    _raises("order", r"blocks_race_on_a_device_variable \(broken.cu\) leaves __device__ variable 'last_block' "
            r"different", bad.launch, "blocks_race_on_a_device_variable", "", (4, 1, 1), (32, 1, 1))


def test_warp_collective_misuse(bad):
    from caffe2py.cuda.emulator import runtime
    x = bad.put(np.ones(32, np.float32))
    _raises(runtime.ERR_WARP, r"__shfl_xor_sync with mask 0xffffffff: lane 16 has exited", bad.launch,
            "shuffle_after_exit", "PP", (1, 1, 1), (32, 1, 1), x, bad.empty(32, np.float32))
    _raises(runtime.ERR_WARP, r"lane 0 reads lane 16, which is not in the mask", bad.launch,
            "shuffle_outside_mask", "PP", (1, 1, 1), (32, 1, 1), x, bad.empty(32, np.float32))
    _raises(runtime.ERR_DEADLOCK, r"deadlock: no thread can go on: 16 wait at __syncthreads, 16 at warp operations",
            bad.launch, "divergent_barrier", "P", (1, 1, 1), (32, 1, 1), bad.empty(32, np.float32))


def test_misaligned_vector_load(bad):
    from caffe2py.cuda.emulator import runtime
    _raises(runtime.ERR_MISALIGNED, r"read of 16 bytes at 0x[0-9a-f]+ is not 16-byte aligned \(byte 4 of argument 'in'",
            bad.launch, "misaligned_vector_load", "PP", (1, 1, 1), (1, 1, 1), bad.put(np.ones(8, np.float32)),
            bad.empty(1, np.float32))


def test_shared_and_device_variable_overflows(bad):
    from caffe2py.cuda.emulator import runtime
    _raises(runtime.ERR_SHARED, r"shared_overflow.*thread \(1,0,0\): out-of-bounds access to shared memory: write",
            bad.launch, "shared_overflow", "P", (1, 1, 1), (32, 1, 1), bad.empty(32, np.float32))
    _raises(runtime.ERR_GLOBAL, r"lookup_table: byte 16 of a 16-byte variable", bad.launch, "device_table_overflow",
            "PP", (1, 1, 1), (4, 1, 1), bad.put(np.array([0, 1, 4, 2], np.int32)), bad.empty(4, np.int32))


def test_bad_pointers_are_refused(bad):
    from caffe2py.cuda.emulator import runtime
    out = bad.empty(4, np.float32)
    _raises(runtime.ERR_NULL, r"null_dereference.*a null pointer access", bad.launch, "null_dereference", "PP",
            (1, 1, 1), (4, 1, 1), 0, out)
    host = np.ones(4, np.float32)
    _raises(runtime.ERR_WILD, r"argument 'in' = 0x[0-9a-f]+ is not device memory", bad.launch, "off_by_one", "PPi",
            (1, 1, 1), (4, 1, 1), host.ctypes.data, out, 3)
    gone = bad.put(np.ones(4, np.float32))
    address = gone.ptr
    del gone   # back to the pool: poisoned as freed
    _raises(runtime.ERR_WILD, r"argument 'in' = 0x[0-9a-f]+ points into a freed device buffer", bad.launch,
            "off_by_one", "PPi", (1, 1, 1), (4, 1, 1), address, out, 3)


def test_crashes_traps_and_hangs_end_the_launch_not_the_process(bad):
    from caffe2py.cuda.emulator import runtime
    _raises(runtime.ERR_CRASH, r"integer division by zero", bad.launch, "divides_by_zero", "PPP", (1, 1, 1),
            (4, 1, 1), bad.put(np.ones(4, np.int32)), bad.put(np.array([1, 2, 0, 4], np.int32)), bad.empty(4, np.int32))
    _raises(runtime.ERR_TRAP, r"thread \(2,0,0\): assert\(in\[threadIdx.x\] >= 0\) failed", bad.launch,
            "failing_assert", "P", (1, 1, 1), (4, 1, 1), bad.put(np.array([1, 2, -3, 4], np.int32)))
    _raises(runtime.ERR_CRASH, r"stack overflow", bad.launch, "overflows_stack", "P", (1, 1, 1), (1, 1, 1),
            bad.empty(1, np.int32))
    emulator.configure(timeout_s=1)
    _raises(runtime.ERR_TIMEOUT, r"ran past its 1 s limit", bad.launch, "spins_forever", "P", (1, 1, 1), (1, 1, 1),
            bad.put(np.zeros(1, np.int32)))
    # the device is fine afterwards
    out = bad.empty(4, np.float32)
    bad.launch("off_by_one", "PPi", (1, 1, 1), (3, 1, 1), bad.put(np.arange(4, dtype=np.float32)), out, 3)
    np.testing.assert_array_equal(out.get()[:3], [0, 2, 4])


def test_argument_format_must_match_the_kernel(bad):
    from caffe2py.cuda.emulator import runtime
    fn = bad.module.get_function("takes_int")
    _raises(runtime.ERR_LAUNCH, r"kernel takes_int parameter 1 'n' \(signed integer, 4 bytes at offset 8\): the host "
            r"packs 'q' \(8 bytes\) at offset 8", fn.prepare, "Pq")
    _raises(runtime.ERR_LAUNCH, r"takes 12 bytes of parameters, the host packs 16", fn.prepare, "Pii")
    fn.prepare("Pi")


def test_bad_launch_configuration(bad):
    from caffe2py.cuda.emulator import runtime
    _raises(runtime.ERR_LAUNCH, r"more than 1024 threads per block", bad.launch, "blocks_race", "P", (1, 1, 1),
            (1024, 2, 1), bad.empty(1, np.float32))


# --------------------------------------------------------------------------- our kernels, with a bug injected

_FAMILY_OF = {"embedding.cu": "recsys", "quantize.cu": "recsys"}   # kernels/cuda/<family>/<fname>


def _mutated_copy(tmp_path, fname, old, new):
    """A copy of kernels/cuda with one source edited (the edit must apply)."""
    dst = tmp_path / "kernels"
    shutil.copytree(KERNELS, dst, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    path = dst / _FAMILY_OF.get(fname, "") / fname
    text = path.read_text()
    assert text.count(old) == 1, (fname, old)
    path.write_text(text.replace(old, new))
    return dst


def test_an_off_by_one_in_the_lookup_loop_is_caught(tmp_path):
    """embedding.cu with `p <= end` in its tail loop: the read past the indices fails."""
    from caffe2py.cuda.emulator import runtime
    dst = _mutated_copy(tmp_path, "embedding.cu", "for (; p < end; ++p) {", "for (; p <= end; ++p) {")
    dev = Device(str(dst / "recsys" / "embedding.cu"))
    table = dev.put(np.ones((10, 3), np.float32))
    indices = dev.put(np.array([1, 2, 3], np.int32))
    offsets = dev.put(np.array([0, 3], np.int64))
    err = _raises(runtime.ERR_OUT_OF_BOUNDS, r"sls_f32_i32_o64 \(embedding.cu\).*0 bytes past the end of argument "
                  r"'indices'", dev.launch, "sls_f32_i32_o64", "PqqPqPqqPiiPP", (1, 1, 1), (4, 64, 1), table, 10, 3,
                  indices, 3, offsets, 2, 1, 0, 0, 0, dev.empty((1, 3), np.float32),
                  dev.put(np.array([2 ** 63 - 1, 0], np.int64)))
    assert err.argument == "indices"


def test_a_missing_barrier_in_block_reduce_is_caught(tmp_path):
    """common.cuh's block_reduce without its first __syncthreads: the rowwise 8-bit
    quantiser (a min then a max reduction) races on the scratch words."""
    dst = _mutated_copy(tmp_path, "common.cuh", "    __syncthreads();  // scratch may still be read by a previous "
                        "reduction\n", "")
    dev = Device(str(dst / "recsys" / "quantize.cu"))
    rows, cols = 3, 100
    x = dev.put(np.random.default_rng(6).standard_normal((rows, cols)).astype(np.float32))
    with pytest.raises(emulator.EmulatorError, match=r"float_to_fused8 \(quantize.cu\) gives different results"):
        dev.launch("float_to_fused8", "PqqP", (rows, 1, 1), (128, 1, 1), x, rows, cols,
                   dev.empty((rows, cols + 8), np.uint8))
    # the unmodified kernel agrees in every order
    good = Device(os.path.join(KERNELS, "recsys", "quantize.cu"))
    good.launch("float_to_fused8", "PqqP", (rows, 1, 1), (128, 1, 1), good.put(x.get()), rows, cols,
                good.empty((rows, cols + 8), np.uint8))


def _kernels_outside_macros(text):
    kept, in_macro = [], False
    for line in text.splitlines():
        if in_macro or line.lstrip().startswith("#define"):
            in_macro = line.rstrip().endswith("\\")
            continue
        kept.append(line)
    return set(re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', "\n".join(kept)))


def test_every_kernel_source_builds_with_every_kernel():
    """Each kernels/cuda/*.cu compiles unchanged for the emulator, and its library has
    every kernel written out in the source (tests/test_cuda_sources.py checks the full
    list, macro-generated kernels included, against nvcc's PTX)."""
    from caffe2py.cuda import compiler
    for name, path in sorted(compiler.source_paths().items()):
        fname = name + ".cu"
        with open(path, encoding="utf-8") as f:
            written = _kernels_outside_macros(f.read())
        found = set(emulator.module_from_file(path).library.kernels)
        assert found and written <= found, (fname, written - found)
