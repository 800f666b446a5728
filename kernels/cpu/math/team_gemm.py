"""Matrix products split over caffe2py's thread team, with the output pass fused.

Public:
    gemm_into(a, b, out, bias=None, residual=None, relu=False) -> out
        out = a @ b [+ bias per row] [+ residual] [then ReLU], for 2-D (M, K) @ (K, N)
        or batched 3-D (G, M, K) @ (G, K, N) operands. a and b may be views with a unit
        stride along rows or columns (padded buffers, column ranges, transposes); out
        and residual are C-contiguous (M, N) / (G, M, N); bias has G * M values (one
        per output row).

With NumPy's OpenBLAS (float32/float64) the output is cut into one block per team
thread (columns when there are many, else rows, and groups); each thread runs one
single-threaded GEMM on its block and then adds bias and residual and applies ReLU
to that block while it is still in cache, so the product and its finish pass are
one parallel region. Otherwise (another BLAS, other dtypes): np.matmul, then
epilogue.finish_channels.
"""
import numpy as np

from ..runtime.blas import gemm_entry
from .epilogue import bias_values, finish_channels
from ..runtime.jit import call_gemm, call_gemv, compiled, prange, serial_variant, team, team_size

# Columns per block below which the output is split by rows instead (a GEMM on a
# narrow column block packs the whole of `a` for little work).
_MIN_BLOCK_COLS = 128
# Output blocks that get a fused output pass are kept about this size, so the pass
# finds them in L2.
_EPILOGUE_BLOCK_BYTES = 256 << 10
# Products of fewer multiply-adds run on the calling thread, without a parallel
# region: one thread does 2^20 in ~20-40 us, about what splitting saves on an idle
# machine, while on a loaded one a region waits for the other threads to be scheduled
# (the training nets' small FC layers and their gradients, batch 256 x 13..68 x 64).
_MIN_PARALLEL_MACS = 1 << 20


@compiled(parallel=True)
def _gemm_blocks(address, gemv, ilp64, a, b, out, ta, lda, gsa, tb, ldb, gsb, k, bias, has_bias, res, has_res,
                 relu, groups, grid_m, grid_n):
    """out[g] = op(a[g]) @ op(b[g]) (+ bias, + res, ReLU) over groups * grid_m * grid_n
    blocks. a, b: any arrays of out's dtype whose first element starts the operand; op
    transposes when ta / tb; lda / ldb are BLAS leading dimensions and gsa / gsb group
    strides, in elements; k the inner dimension. A single output row or column is a
    matrix-vector product: GEMV at `gemv` (OpenBLAS's GEMM is 2-3x slower there:
    a 1 x 9216 by 9216 x 4096 FC took 16 ms, measured)."""
    m, n = out.shape[1], out.shape[2]
    item = out.itemsize
    for t in prange(groups * grid_m * grid_n):
        g = t // (grid_m * grid_n)
        tm = (t // grid_n) % grid_m
        tn = t % grid_n
        m0, m1 = m * tm // grid_m, m * (tm + 1) // grid_m
        n0, n1 = n * tn // grid_n, n * (tn + 1) // grid_n
        if m1 == m0 or n1 == n0:
            continue
        # the block's first row of op(a) and first column of op(b)
        a_at = g * gsa + (m0 if ta else m0 * lda)
        b_at = g * gsb + (n0 * ldb if tb else n0)
        c_at = (g * m + m0) * n + n0
        if m == 1:      # out row = a row @ op(b): op(b)^T (columns n0..n1) times the row
            call_gemv(gemv, ilp64, not tb, k if not tb else n1 - n0, n1 - n0 if not tb else k,
                      b.ctypes.data + b_at * item, ldb, a.ctypes.data + a_at * item, lda if ta else 1,
                      out.ctypes.data + c_at * item, 1, out)
        elif n == 1:    # out column = op(a) (rows m0..m1) @ b column
            call_gemv(gemv, ilp64, ta, m1 - m0 if not ta else k, k if not ta else m1 - m0,
                      a.ctypes.data + a_at * item, lda, b.ctypes.data + b_at * item, 1 if tb else ldb,
                      out.ctypes.data + c_at * item, 1, out)
        else:
            call_gemm(address, ilp64, ta, tb, m1 - m0, n1 - n0, k, 1.0, a.ctypes.data + a_at * item, lda,
                      b.ctypes.data + b_at * item, ldb, 0.0, out.ctypes.data + c_at * item, n, out)
        if not (has_bias or has_res or relu):
            continue
        # one pass per row, a loop per flag combination, the ReLU inside it: a store of
        # every element vectorises, a ReLU pass of its own stores only where it clamps
        # and does not (bias + residual + ReLU of a 256 x 3136 output: 0.9 ms in three
        # passes, 0.13 ms in one; one thread, 256x64 @ 64x3136 with them: 2.6 -> 1.6 ms)
        for r in range(m0, m1):
            row = out[g, r, n0:n1]
            extra = res[g, r, n0:n1] if has_res else row
            v = bias[g * m + r] if has_bias else bias[0]
            if has_bias and has_res:
                for i in range(n1 - n0):
                    x = row[i] + v + extra[i]
                    row[i] = 0.0 if relu and x < 0 else x
            elif has_res:
                for i in range(n1 - n0):
                    x = row[i] + extra[i]
                    row[i] = 0.0 if relu and x < 0 else x
            elif has_bias:
                for i in range(n1 - n0):
                    x = row[i] + v
                    row[i] = 0.0 if relu and x < 0 else x
            else:
                for i in range(n1 - n0):
                    x = row[i]
                    row[i] = 0.0 if x < 0 else x


@_gemm_blocks.numpy_twin
def _gemm_blocks_numpy(address, gemv, ilp64, a, b, out, ta, lda, gsa, tb, ldb, gsb, k, bias, has_bias, res, has_res,
                       relu, groups, grid_m, grid_n):
    """_gemm_blocks with NumPy: a (G, M, K) and b (G, K, N) are the operands themselves
    (gemm_into passes them so), the BLAS layout arguments are not needed."""
    numpy_product_pass(a, b, out, bias, has_bias, res, has_res, relu)


def numpy_product_pass(a, b, out, bias, has_bias, res, has_res, relu):
    """The NumPy twins' product and output pass: out (G, M, N) = a @ b, + bias[g * M + r]
    per row r, + res, then ReLU (the compiled blocked kernels' results, in NumPy)."""
    np.matmul(a, b, out=out)
    if has_bias:
        out += bias[:out.shape[0] * out.shape[1]].reshape(out.shape[0], out.shape[1], 1)
    if has_res:
        out += res
    if relu:
        np.maximum(out, out.dtype.type(0), out=out)


_gemm_blocks_serial = serial_variant(_gemm_blocks, "_gemm_blocks_serial")


def _grid(m, n, k, groups, item, epilogue):
    """(rows, columns) blocks per group so that every team thread gets one block; with
    an output pass, wide outputs in more column blocks (a multiple of the team), each
    small enough that the pass reads it from cache. (0, 0): too small to split, run
    serially."""
    if groups * m * n * k < _MIN_PARALLEL_MACS:
        return 0, 0
    threads = max(1, team_size() // groups) if groups < team_size() else 1
    if threads == 1:
        return 1, 1
    if m == 1 or n == 1:                   # a matrix-vector product: split the long side
        return (1, min(n, threads)) if m == 1 else (min(m, threads), 1)
    if n >= _MIN_BLOCK_COLS * threads:
        cols = threads
        if epilogue:
            cols *= max(1, min(n // (_MIN_BLOCK_COLS * threads), -(-m * n * item // (_EPILOGUE_BLOCK_BYTES * threads))))
        return 1, cols
    return min(m, threads), 1


def _operand(x):
    """(transposed, leading dimension, group stride) for BLAS, or None when the 2-D
    matrices of x (..., rows, cols) have no unit stride along rows or columns."""
    item = x.itemsize
    s_rows, s_cols = x.strides[-2], x.strides[-1]
    group = x.strides[0] // item if x.ndim == 3 and x.strides[0] % item == 0 else 0
    if s_cols == item and s_rows % item == 0 and s_rows // item >= max(1, x.shape[-1]):
        return False, s_rows // item, group
    if s_rows == item and s_cols % item == 0 and s_cols // item >= max(1, x.shape[-2]):
        return True, s_cols // item, group
    return None


def _layout(a3, b3, out3, epilogue):
    """The launch parameters for these operand layouts (None: use np.matmul)."""
    entry = gemm_entry(out3.dtype)
    groups, m, k = a3.shape
    n = b3.shape[2]
    if entry is None or not a3.dtype == b3.dtype == out3.dtype or not out3.flags.c_contiguous \
            or not (groups and m and n and k):
        return None
    ops = _operand(a3), _operand(b3)
    if ops[0] is None or ops[1] is None:
        return None
    (ta, lda, gsa), (tb, ldb, gsb) = ops
    return (entry.gemm, entry.gemv, entry.ilp64, ta, lda, gsa, tb, ldb, gsb, k) + \
        _grid(m, n, k, groups, out3.itemsize, epilogue)


_layouts = {}          # operand shapes, strides and dtype, epilogue -> _layout(...)


def gemm_into(a, b, out, bias=None, residual=None, relu=False):
    """See the module docstring."""
    a3, b3, out3 = (v if v.ndim == 3 else v[None] for v in (a, b, out))
    epilogue = bias is not None or residual is not None or relu
    # the launch parameters depend only on layouts: worked out once per layout (~4 us)
    key = (a3.shape, a3.strides, b3.shape, b3.strides, out3.shape, out3.strides, out.dtype.char, epilogue,
           team_size(), gemm_entry(out.dtype))
    launch = _layouts.get(key, False)
    if launch is False:
        if len(_layouts) > 4096:
            _layouts.clear()
        launch = _layouts[key] = _layout(a3, b3, out3, epilogue)
    if launch is None or (residual is not None and (residual.dtype != out.dtype or not residual.flags.c_contiguous)):
        np.matmul(a, b, out=out)
        if epilogue:
            groups, m, n = out3.shape
            rows = out3.reshape(1, groups * m, n)
            finish_channels(rows, bias, None if residual is None else residual.reshape(rows.shape), relu)
        return out
    b_vec = bias_values(bias, out.dtype)
    res3 = out3[:0] if residual is None else residual.reshape(out3.shape)
    gemm, gemv, ilp64, ta, lda, gsa, tb, ldb, gsb, k, grid_m, grid_n = launch
    kernel = _gemm_blocks if grid_m else _gemm_blocks_serial
    with team():
        kernel(gemm, gemv, ilp64, a3, b3, out3, ta, lda, gsa, tb, ldb, gsb, k, b_vec, bias is not None,
               res3, residual is not None, relu, a3.shape[0], grid_m or 1, grid_n or 1)
    return out
