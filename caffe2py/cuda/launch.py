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
