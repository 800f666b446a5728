"""What a GPU would do with our kernels, without one: ptxas's resource usage per
kernel (registers, spills, stack frame, static shared memory) and the theoretical
occupancy it allows on sm_80 (A100-class) and sm_90 (H100-class) at the largest
block each kernel is launched with.

Occupancy follows the rules of CUDA's occupancy calculator (cuda_occupancy.h):
registers are allocated per warp in units of 256 and per SM sub-partition (4 per SM);
each block also takes 1 KiB of reserved shared memory, shared memory is allocated in
128-byte units; an SM holds at most 64 warps (2048 threads) and 32 blocks.
"""
import re
from dataclasses import dataclass

ARCHS = {
    # shared memory: the most an SM can give blocks (the largest carveout)
    "sm_80": dict(max_warps=64, max_blocks=32, regs=65536, regs_per_block=65536, reg_unit=256, sub_partitions=4,
                  smem=164 * 1024, smem_reserved=1024, smem_unit=128),
    "sm_90": dict(max_warps=64, max_blocks=32, regs=65536, regs_per_block=65536, reg_unit=256, sub_partitions=4,
                  smem=228 * 1024, smem_reserved=1024, smem_unit=128),
}

# Largest block each kernel is launched with (caffe2py.cuda.launch): 256 threads unless
# listed (the lengths scan and Softmax take up to 1024).
LARGEST_BLOCK = {"lengths_to_offsets": 1024, "softmax_rows": 1024}
DEFAULT_BLOCK = 256

# Sources whose kernels must not spill to local memory (the lookups and LSTMUnit:
# bandwidth-bound kernels where a spill adds memory traffic per element).
NO_SPILL_SOURCES = ("embedding.cu", "lstm.cu")


@dataclass
class KernelResources:
    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    smem: int

    @property
    def spills(self):
        return self.spill_stores + self.spill_loads


def parse(text):
    """[KernelResources] from the output of nvcc --resource-usage (ptxas -v)."""
    found, cur = [], None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for '(sm_\d+)'", line)
        if m:
            cur = KernelResources(m.group(1), m.group(2), 0, 0, 0, 0, 0)
            found.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.stack, cur.spill_stores, cur.spill_loads = (int(v) for v in m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur.registers = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur.smem = int(s.group(1)) if s else 0
    return found


def _round_up(x, unit):
    return -(-x // unit) * unit


def occupancy(registers, smem, block_threads, arch, dynamic_smem=0):
    """(resident blocks per SM, occupancy as a fraction of the SM's warps, limiter)."""
    a = ARCHS[arch]
    warps = -(-block_threads // 32)
    limits = {"blocks": a["max_blocks"], "warps": a["max_warps"] // warps}
    regs_per_warp = _round_up(max(registers, 1) * 32, a["reg_unit"])
    if regs_per_warp * warps > a["regs_per_block"]:
        limits["registers"] = 0
    else:
        per_sub_partition = (a["regs"] // a["sub_partitions"]) // regs_per_warp
        limits["registers"] = per_sub_partition * a["sub_partitions"] // warps
    smem_per_block = _round_up(smem + dynamic_smem + a["smem_reserved"], a["smem_unit"])
    limits["shared memory"] = a["smem"] // smem_per_block
    limiter = min(limits, key=lambda k: (limits[k], k != "warps"))
    blocks = limits[limiter]
    return blocks, blocks * warps / a["max_warps"], limiter


def block_for(kernel):
    return LARGEST_BLOCK.get(kernel, DEFAULT_BLOCK)


def spill_failures(source_name, resources):
    """Lines naming each spilling kernel of a source that must not spill."""
    if source_name not in NO_SPILL_SOURCES:
        return []
    return ["%s: %s spills on %s (%d bytes stored, %d loaded): local-memory traffic in a bandwidth-bound kernel"
            % (source_name, r.kernel, r.arch, r.spill_stores, r.spill_loads) for r in resources if r.spills]


def table(rows):
    """Markdown: one row per (source, kernel) with sm_80 and sm_90 side by side.
    rows: [(source name, KernelResources)]."""
    by_kernel = {}
    for source, r in rows:
        by_kernel.setdefault((source, r.kernel), {})[r.arch] = r
    out = ["| source | kernel | block | registers sm_80 / sm_90 | spill bytes (st+ld) | stack | shared | "
           "occupancy sm_80 | occupancy sm_90 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (source, kernel), per_arch in sorted(by_kernel.items()):
        block = block_for(kernel)
        regs = " / ".join(str(per_arch[a].registers) if a in per_arch else "-" for a in ARCHS)
        spills = " / ".join(str(per_arch[a].spills) if a in per_arch else "-" for a in ARCHS)
        any_r = next(iter(per_arch.values()))
        occ = []
        for a in ARCHS:
            if a not in per_arch:
                occ.append("-")
                continue
            blocks, frac, limiter = occupancy(per_arch[a].registers, per_arch[a].smem, block, a)
            occ.append("%d%% (%d blocks; %s)" % (round(100 * frac), blocks, limiter))
        out.append("| %s | %s | %d | %s | %s | %d | %d | %s | %s |"
                   % (source, kernel, block, regs, spills, any_r.stack, any_r.smem, occ[0], occ[1]))
    return "\n".join(out)
