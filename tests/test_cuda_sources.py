"""Every CUDA source compiles with nvcc for sm_80 and sm_90 (tools/check_cuda_sources.py),
and every kernel's parameter list (read from nvcc's PTX) matches the argument format
the host side packs for it. Skipped when nvcc is not installed."""
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "check_cuda_sources.py")


def _kernel_sources():
    """(file name, path) of every kernels/cuda/<family>/*.cu."""
    from caffe2py.cuda import compiler
    return [(os.path.basename(p), p) for _, p in sorted(compiler.source_paths().items())]
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


@needs_nvcc
def test_every_source_compiles_for_sm80_and_sm90():
    proc = subprocess.run([sys.executable, TOOL], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("kernels/")]
    sources = _kernel_sources()
    assert len(lines) == 2 * len(sources) and all(" ok " in ln for ln in lines)
    # the resource table: a row per kernel, both archs, and no spilling lookup or LSTM kernel
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| embedding.cu | sls_")]
    assert len(rows) == 20 and "0 spilling lookup/LSTM kernel(s)" in proc.stdout


@needs_nvcc
def test_a_broken_source_fails_the_check(tmp_path):
    sys.path.insert(0, os.path.dirname(TOOL))
    try:
        import check_cuda_sources as tool
    finally:
        sys.path.pop(0)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "bad.cu").write_text("extern \"C\" __global__ void k() { undefined_thing(); }\n")
    found = tool.sources(str(tmp_path))
    assert found == [str(tmp_path / "kernels" / "bad.cu")]
    rc, text = tool.compile_one(NVCC, found[0], "sm_80", str(tmp_path))
    assert rc != 0 and "undefined_thing" in text


def test_without_nvcc_the_check_passes_with_a_message(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))
    proc = subprocess.run([sys.executable, TOOL], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0 and "nvcc is not on PATH" in proc.stdout


# --------------------------------------------------------------------------- signatures

_SIZES = {"P": 8, "q": 8, "i": 4, "f": 4}
_TYPE_TOKENS = {"f32", "f16", "i32", "i64", "o32", "o64", "u8", "u16", "u32", "u64", "v1", "v2", "v4",
                "fused8", "fused4", "fused2"}


def _ptx_entries(path):
    ptx = subprocess.run([NVCC, "-ptx", "-arch=compute_80", "-I", os.path.dirname(path), "-o", "-", path],
                         capture_output=True, text=True, check=True).stdout
    entries = {}
    for m in re.finditer(r"\.entry (\w+)\(\s*(.*?)\)", ptx, re.S):
        params = []
        for p in m.group(2).split(","):
            p = p.strip()
            s = re.match(r"\.param \.align (\d+) \.b8 \w+\[(\d+)\]", p)
            if s:
                params.append(("struct", int(s.group(1)), int(s.group(2))))
            else:
                kind = re.match(r"\.param \.(\w+)", p).group(1)
                size = int(kind[1:]) // 8
                params.append((kind, size, size))
        entries[m.group(1)] = params
    return entries


def _format_items(fmt):
    """(offset, size, char) per item, with native alignment as struct.pack uses."""
    items, off = [], 0
    for ch in fmt:
        size = _SIZES[ch]
        off = (off + size - 1) // size * size
        items.append((off, size, ch))
        off += size
    assert off == struct.calcsize(fmt)
    return items


def _matches(params, fmt):
    items = _format_items(fmt)
    off, i = 0, 0
    for kind, align, size in params:
        off = (off + align - 1) // align * align
        if kind == "struct":
            covered = 0
            while i < len(items) and items[i][0] < off + size:
                assert items[i][0] >= off
                covered += items[i][1]
                i += 1
            if covered != size:
                return False
        else:
            if i >= len(items) or items[i][0] != off or items[i][1] != size:
                return False
            if (kind == "f32") != (items[i][2] == "f"):
                return False
            i += 1
        off += size
    return i == len(items)


def _family(name):
    return "_".join(t for t in name.split("_") if t not in _TYPE_TOKENS)


def _recorded_formats(monkeypatch):
    """(function, format) of every launch the host side makes, from fake runs."""
    from caffe2py import core
    from caffe2py.proto import caffe2_pb2
    from _cuda_fakes import run_fake
    cuda0 = core.DeviceOption(caffe2_pb2.CUDA, 0)
    f32 = np.float32
    cases = [
        ("SparseLengthsWeightedSum", [np.zeros((4, 8), f32), np.ones(2, f32), np.zeros(2, np.int32),
                                      np.array([2], np.int32)]),
        ("FloatToFused8BitRowwiseQuantized", [np.zeros((2, 4), f32)]),
        ("Fused8BitRowwiseQuantizedToFloat", [np.zeros((2, 12), np.uint8)]),
        ("FloatToHalf", [np.zeros(4, f32)]), ("HalfToFloat", [np.zeros(4, np.float16)]),
        ("LSTMUnit", [np.zeros((1, 2, 4), f32)] * 2 + [np.zeros((1, 2, 16), f32), np.zeros(2, np.int32),
                                                       np.zeros(1, np.int32)]),
        ("LSTMUnitGradient", [np.zeros((1, 2, 4), f32)] * 2 + [np.zeros((1, 2, 16), f32), np.zeros(2, np.int32),
                                                               np.zeros(1, np.int32)] + [np.zeros((1, 2, 4), f32)] * 4),
        ("Add", [np.zeros((2, 3), f32), np.zeros(3, f32)]), ("Relu", [np.zeros(3, f32)]),
        ("Softmax", [np.zeros((2, 3), f32)]), ("Concat", [np.zeros((2, 3), f32)] * 2),
        ("Transpose", [np.zeros((2, 3), f32)]), ("Gather", [np.zeros((3, 2), f32), np.zeros(2, np.int32)]),
        ("FC", [np.zeros((2, 3), f32), np.zeros((4, 3), f32), np.zeros(4, f32)]),
        ("Conv", [np.zeros((1, 2, 5, 5), f32), np.zeros((3, 2, 3, 3), f32), np.zeros(3, f32)]),
        ("MaxPool", [np.zeros((1, 2, 4, 4), f32)]), ("AveragePool", [np.zeros((1, 2, 4, 4), f32)]),
        ("ReduceSum", [np.zeros((2, 3), f32)]),
    ]
    from caffe2py.cuda import cublas
    monkeypatch.setattr(cublas, "sgemm_batched", lambda *a, **k: None)
    formats = {}
    for op_type, inputs in cases:
        outs = {"LSTMUnit": 2, "LSTMUnitGradient": 3}.get(op_type, 1)
        args = {"kernel": 2} if op_type.endswith("Pool") else {}
        op = core.CreateOperator(op_type, ["x%d" % i for i in range(len(inputs))], ["y%d" % i for i in range(outs)],
                                 device_option=cuda0, **args)
        _, rt = run_fake(monkeypatch, op, *inputs)
        for _, function, fmt, _, _ in rt.launches:
            formats[_family(function)] = fmt
    formats["sgemm_tiled"] = cublas.FALLBACK_FORMAT
    return formats


def _emulator_kernels(path):
    """{kernel: [(offset, size, align, kind)]} of the emulator's build of a source, or
    None when the emulator cannot build here."""
    from caffe2py.cuda import emulator
    if not emulator.available()[0]:
        return None
    return {name: k.layout for name, k in emulator.module_from_file(path).library.kernels.items()}


@needs_nvcc
def test_kernel_parameters_match_host_argument_formats(monkeypatch):
    """PTX parameter lists against the host's argument formats, and the emulator's
    build of each source against the PTX: the same kernels with the same layout."""
    formats = _recorded_formats(monkeypatch)
    checked = 0
    for fname, path in _kernel_sources():
        entries = _ptx_entries(path)
        for name, params in entries.items():
            family = _family(name)
            assert family in formats, "no host-side launch of %s (%s) was exercised" % (name, fname)
            assert _matches(params, formats[family]), "%s: PTX params %s vs format %s" % (name, params, formats[family])
            checked += 1
        emulated = _emulator_kernels(path)
        if emulated is not None:
            assert set(emulated) == set(entries), fname
            for name, params in entries.items():
                off = 0
                for (kind, align, size), (e_off, e_size, e_align, e_kind) in zip(params, emulated[name]):
                    off = (off + align - 1) // align * align
                    assert (off, size, align) == (e_off, e_size, e_align), (name, params, emulated[name])
                    assert (kind == "f32") == (e_kind == "f"), (name, kind, e_kind)
                    off += size
                assert len(params) == len(emulated[name]), name
    assert checked >= 40


# Largest block each kernel is launched with (caffe2py.cuda.launch): 256 threads unless listed.
_BIG_BLOCKS = {"lengths_to_offsets": 1024, "softmax_rows": 1024}


@needs_nvcc
def test_registers_fit_the_largest_block_each_kernel_is_launched_with():
    """65,536 registers per SM: a kernel launched with B threads may use 65536 / B
    registers per thread or the launch fails ("too many resources requested")."""
    seen = 0
    for fname, path in _kernel_sources():
        proc = subprocess.run([NVCC, "--cubin", "-arch=sm_80", "-O3", "-Xptxas", "-v", "-o", os.devnull,
                               path], capture_output=True, text=True, check=True)
        current = None
        for line in proc.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line)
            if m:
                current = m.group(1)
            m = re.search(r"Used (\d+) registers", line)
            if m and current:
                block = _BIG_BLOCKS.get(current, 256)
                assert int(m.group(1)) * block <= 65536, "%s uses %s registers at %d threads" % (
                    current, m.group(1), block)
                seen += 1
                current = None
    assert seen >= 40


# --------------------------------------------------------------------------- ptxas resources

def _resources_module():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import cuda_resources
    finally:
        sys.path.pop(0)
    return cuda_resources


_PTXAS_SAMPLE = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'lengths_to_offsets' for 'sm_90'
ptxas info    : Function properties for lengths_to_offsets
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 61 registers, used 1 barriers, 264 bytes smem
ptxas info    : Compiling entry function 'sls_f32_i32_o64' for 'sm_90'
ptxas info    : Function properties for sls_f32_i32_o64
    16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers
ptxas info    : Compiling entry function 'sgemm_tiled' for 'sm_80'
ptxas info    : Function properties for sgemm_tiled
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 2176 bytes smem, 448 bytes cmem[0]
"""


def test_ptxas_resource_lines_are_parsed():
    res = _resources_module().parse(_PTXAS_SAMPLE)
    got = [(r.kernel, r.arch, r.registers, r.spill_stores, r.spill_loads, r.stack, r.smem) for r in res]
    assert got == [("lengths_to_offsets", "sm_90", 61, 0, 0, 0, 264), ("sls_f32_i32_o64", "sm_90", 255, 24, 20, 16, 0),
                   ("sgemm_tiled", "sm_80", 30, 0, 0, 0, 2176)]


@pytest.mark.parametrize("regs,smem,block,arch,want", [
    # 61 registers -> 2048 per warp (units of 256); a sub-partition's 16384 hold 8 warps, the SM 32:
    # one 32-warp block, half of the SM's 64 warps
    (61, 264, 1024, "sm_90", (1, 0.5, "registers")),
    # 30 registers -> 1024 per warp: 64 warps by registers, 8 blocks of 8 warps; shared memory
    # (2176 + 1024 reserved -> 3200 bytes) allows 52 blocks; warps allow 8
    (30, 2176, 256, "sm_80", (8, 1.0, "warps")),
    # 66 registers -> 2304 per warp: 7 warps per sub-partition, 28 per SM: 3 blocks of 8 warps
    (66, 0, 256, "sm_80", (3, 24 / 64, "registers")),
    # 48 KiB of shared memory per block: (49152 + 1024) -> 3 blocks in 164 KiB, 4 in 228 KiB
    (32, 48 * 1024, 128, "sm_80", (3, 12 / 64, "shared memory")),
    (32, 48 * 1024, 128, "sm_90", (4, 16 / 64, "shared memory")),
    # 1024 threads at 255 registers: 32 warps x 8192 registers > 65536 per block: no launch at all
    (255, 0, 1024, "sm_90", (0, 0.0, "registers")),
])
def test_occupancy_follows_the_calculator_rules(regs, smem, block, arch, want):
    assert _resources_module().occupancy(regs, smem, block, arch) == want


def test_a_spilling_lookup_or_lstm_kernel_fails_the_check():
    tool = _resources_module()
    res = tool.parse(_PTXAS_SAMPLE)
    failures = tool.spill_failures("embedding.cu", res)
    assert len(failures) == 1 and "sls_f32_i32_o64 spills on sm_90 (24 bytes stored, 20 loaded)" in failures[0]
    assert tool.spill_failures("lstm.cu", res) and not tool.spill_failures("tensor_ops.cu", res)
    table = tool.table([("embedding.cu", r) for r in res])
    assert "| embedding.cu | lengths_to_offsets | 1024 | - / 61 | - / 0 | 0 | 264 | - | 50% (1 blocks; registers) |" \
        in table


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_generated_chain_kernels_compile_and_match_their_format(tmp_path, dtype):
    """A fused elementwise chain's generated kernel (caffe2py/cuda/fused.py, built from
    the ops' CUDA forms) compiles with nvcc for sm_80 and sm_90, with no spills, and
    its PTX parameters are the layout the host packs (arg_format)."""
    from caffe2py import core, fusion
    from caffe2py.cuda.fused import CudaFusedProgram, literal
    from caffe2py.proto import caffe2_pb2
    from caffe2py.registry import OpContext, normalize_domain
    chain = [("Mul", 2), ("Add", 2), ("Relu", 1), ("Sigmoid", 1), ("Tanh", 1), ("Exp", 1), ("Log", 1),
             ("Sqrt", 1), ("Abs", 1), ("Negative", 1), ("Sub", 2), ("Div", 2)]
    body, n_inputs, prev = [], 0, None
    for n, (op_type, arity) in enumerate(chain):
        rule = fusion._RULES[(normalize_domain(""), op_type)](
            OpContext(core.CreateOperator(op_type, ["a", "b"][:arity], ["y"],
                                          device_option=core.DeviceOption(caffe2_pb2.CUDA, 0))))
        args = [prev or "x0"] + ["x%d" % (n_inputs + 1)] * (arity - 1)
        n_inputs += arity - 1
        body += rule.cuda(args, "t%d" % n, lambda v: literal(v, dtype)) + ["t%d = c2f_round(t%d);" % (n, n)]
        prev = "t%d" % n
    program = CudaFusedProgram(dtype, n_inputs + 1, body, ["t2", prev], ["t%d" % n for n in range(len(chain))])
    path = tmp_path / "chain.cu"
    path.write_text(program.source)
    (entry,) = _ptx_entries(str(path)).values()
    assert _matches(entry, program.arg_format), (entry, program.arg_format)
    for arch in ("sm_80", "sm_90"):
        proc = subprocess.run([NVCC, "-cubin", "-O3", "-arch=" + arch, "--resource-usage", "-o",
                               str(tmp_path / ("chain_%s.cubin" % arch)), str(path)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "spill" not in proc.stderr or "0 bytes spill stores, 0 bytes spill loads" in proc.stderr, proc.stderr


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_generated_reduction_chain_kernels_compile_and_match_their_format(tmp_path, dtype):
    """A fused chain ending in a row sum (cuda/fused.py's row kernel, with its
    shuffle / shared-memory tree and __launch_bounds__) compiles for sm_80 and sm_90
    without spills, with the PTX parameters the host packs."""
    from caffe2py.cuda.fused import CudaFusedProgram
    body = ["t0 = __fmul_rn(x0, x1);", "t0 = c2f_round(t0);", "t1 = tanhf(t0);", "t1 = c2f_round(t1);"]
    program = CudaFusedProgram(dtype, 2, body, ["t0"], ["t0", "t1"], reduced="t1")
    path = tmp_path / "chain_reduce.cu"
    path.write_text(program.source)
    (entry,) = _ptx_entries(str(path)).values()
    assert _matches(entry, program.arg_format), (entry, program.arg_format)
    for arch in ("sm_80", "sm_90"):
        proc = subprocess.run([NVCC, "-cubin", "-O3", "-arch=" + arch, "--resource-usage", "-o",
                               str(tmp_path / ("chain_reduce_%s.cubin" % arch)), str(path)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr, proc.stderr
