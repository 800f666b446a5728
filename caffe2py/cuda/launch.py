"""Launch geometry from shapes. Pure functions of ints (no PyCUDA), unit-tested
without a GPU. Each returns (grid, block) as 3-tuples."""
from collections import namedtuple

Launch = namedtuple("Launch", "grid block")

WARP = 32
BLOCK = 256          # threads per block for elementwise work
MAX_GRID_X = 2 ** 31 - 1
MAX_GRID_Y = 65535
# Enough blocks to fill any current GPU (132 SMs x 8 resident blocks of 256 threads);
# grid-stride loops cover the rest, so huge tensors do not need huge grids.
MAX_ELEMENTWISE_BLOCKS = 132 * 8 * 4


def ceil_div(a, b):
    return -(-a // b)


def next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def elementwise(n, items_per_thread=1, block=BLOCK):
    """1-D grid-stride launch over n items, items_per_thread per thread per step."""
    threads = ceil_div(max(int(n), 1), items_per_thread)
    blocks = max(1, min(ceil_div(threads, block), MAX_ELEMENTWISE_BLOCKS))
    return Launch((blocks, 1, 1), (block, 1, 1))


def vector_width(dim, widths=(4, 2, 1)):
    """Widest vector (elements) that divides a row of dim elements."""
    for w in widths:
        if dim % w == 0:
            return w
    return 1


def bags(num_bags, dim, vec, block=BLOCK):
    """Embedding bags: `lanes` threads per bag (a power of two up to a warp) span the
    row in vectors of `vec` elements; block.y bags share a block. A warp per bag once
    the row has 32 vectors; small rows pack several bags into a warp."""
    vectors = max(1, ceil_div(int(dim), vec))
    lanes = min(WARP, next_pow2(vectors))
    per_block = max(1, block // lanes)
    blocks = max(1, ceil_div(int(num_bags), per_block))
    if blocks > MAX_GRID_X:
        raise ValueError("too many bags for one launch: %d" % num_bags)
    return Launch((blocks, 1, 1), (lanes, per_block, 1))


def rows(num_rows, dim, block_max=1024):
    """A block per row (Softmax, row quantisation): threads = a power of two that
    covers the row, at least a warp, at most block_max."""
    threads = max(WARP, min(block_max, next_pow2(int(dim))))
    n = max(1, int(num_rows))
    if n > MAX_GRID_X:
        raise ValueError("too many rows for one launch: %d" % n)
    return Launch((n, 1, 1), (threads, 1, 1))


def scan(n, block=1024):
    """Lengths -> offsets: one block walks the lengths in chunks of `block`."""
    return Launch((1, 1, 1), (block, 1, 1))


def gemm_tiles(m, n, batch, tile=16):
    """Fallback tiled GEMM: one tile x tile block per output tile, batch on z."""
    return Launch((max(1, ceil_div(n, tile)), max(1, ceil_div(m, tile)), max(1, int(batch))), (tile, tile, 1))


MAX_DIMS = 6


def contiguous_strides(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def broadcast_strides(out_shape, *in_shapes):
    """Element strides of each input over out_shape (0 where it broadcasts), with
    adjacent dims merged wherever every input stays contiguous across them.
    Returns (dims, [strides per input]); raises ValueError past MAX_DIMS dims."""
    rank = len(out_shape)
    per_input = []
    for shape in in_shapes:
        shape = [1] * (rank - len(shape)) + list(shape)
        cs = contiguous_strides(shape)
        per_input.append([0 if shape[k] == 1 and out_shape[k] != 1 else cs[k] for k in range(rank)])
    dims = list(out_shape)
    # Drop size-1 dims, then merge dim k into k+1 when, for every input,
    # stride[k] == stride[k+1] * dims[k+1] (both broadcast counts: 0 == 0 * n).
    keep = [k for k in range(rank) if dims[k] != 1]
    dims = [dims[k] for k in keep]
    per_input = [[s[k] for k in keep] for s in per_input]
    k = len(dims) - 2
    while k >= 0:
        if all(s[k] == s[k + 1] * dims[k + 1] for s in per_input):
            dims[k] *= dims[k + 1]
            for s in per_input:
                s[k] = s[k + 1]
                del s[k + 1]
            del dims[k + 1]
        k -= 1
    if not dims:
        dims, per_input = [1], [[0] for _ in per_input]
    if len(dims) > MAX_DIMS:
        raise ValueError("broadcast needs %d dims after merging; at most %d are supported" % (len(dims), MAX_DIMS))
    return dims, per_input


def permuted_strides(shape, axes):
    """Transpose: output dims and, per output dim, the input's element stride,
    merging output dims that are contiguous in the input too."""
    cs = contiguous_strides(shape)
    dims = [shape[a] for a in axes]
    strides = [cs[a] for a in axes]
    return broadcast_like_merge(dims, strides)


def broadcast_like_merge(dims, strides):
    keep = [k for k in range(len(dims)) if dims[k] != 1]
    dims = [dims[k] for k in keep]
    strides = [strides[k] for k in keep]
    k = len(dims) - 2
    while k >= 0:
        if strides[k] == strides[k + 1] * dims[k + 1]:
            dims[k] *= dims[k + 1]
            strides[k] = strides[k + 1]
            del dims[k + 1], strides[k + 1]
        k -= 1
    if not dims:
        return [1], [0]
    if len(dims) > MAX_DIMS:
        raise ValueError("transpose needs %d dims after merging; at most %d are supported" % (len(dims), MAX_DIMS))
    return dims, strides


# Reductions (kernels/cuda/math/reduce.cu and fused chains ending in one): threads per
# block depend only on the reduced length, so a fused chain and the unfused op sum in
# the same order; at most 256 (the kernels' __launch_bounds__).
REDUCE_BLOCK_MAX = 256


def reduction(n_out, r):
    """A block per output value (grid-stride past MAX_ELEMENTWISE_BLOCKS outputs):
    threads = a power of two covering r, at least a warp, at most REDUCE_BLOCK_MAX."""
    threads = max(WARP, min(REDUCE_BLOCK_MAX, next_pow2(int(r))))
    return Launch((max(1, min(int(n_out), MAX_ELEMENTWISE_BLOCKS)), 1, 1), (threads, 1, 1))


def reduction_strides(shape, axes):
    """(kept dims, kept strides, reduced dims, reduced strides) of a contiguous input
    reduced over `axes` (sorted, distinct): size-1 dims dropped, adjacent dims of one
    kind merged; raises ValueError past MAX_DIMS of either kind."""
    cs = contiguous_strides(shape)
    parts = {True: ([], []), False: ([], [])}
    last_kind = None
    for k, d in enumerate(shape):
        if d == 1:
            continue
        kind = k in axes
        dims, strides = parts[kind]
        if kind == last_kind and strides[-1] == cs[k] * d:
            dims[-1] *= d
            strides[-1] = cs[k]
        else:
            dims.append(d)
            strides.append(cs[k])
        last_kind = kind
    for kind, (dims, _) in parts.items():
        if len(dims) > MAX_DIMS:
            raise ValueError("the reduction needs %d %s dims after merging; at most %d are supported"
                             % (len(dims), "reduced" if kind else "kept", MAX_DIMS))
    return parts[False][0], parts[False][1], parts[True][0], parts[True][1]
