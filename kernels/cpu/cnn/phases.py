"""Stride phases of an image: the input copied into zero-bordered buffers, one per
(row phase, column phase) of a stride, so that a strided convolution reads contiguous
rows (conv.py's flattened-row path and direct_conv.py both take their input this way)."""
from ..runtime.jit import compiled, prange, serial_variant


@compiled(parallel=True)
def _phase_copy(img, buf, i0, sh, j0, sw, q0, ni, r0, nj, blocks):
    """buf[c, q0 + i, r0 + j] = img[c, i0 + i * sh, j0 + j * sw] for i < ni, j < nj: one
    stride phase of the input into its zero-bordered buffer; rows over the team."""
    c_count = img.shape[0]
    for t in prange(blocks):
        for job in range(c_count * ni * t // blocks, c_count * ni * (t + 1) // blocks):
            c, i = job // ni, job % ni
            src = img[c, i0 + i * sh]
            dst = buf[c, q0 + i, r0:r0 + nj]
            if sw == 1:
                part = src[j0:j0 + nj]
                for j in range(nj):
                    dst[j] = part[j]
            else:
                for j in range(nj):
                    dst[j] = src[j0 + j * sw]


@_phase_copy.numpy_twin
def _phase_copy_numpy(img, buf, i0, sh, j0, sw, q0, ni, r0, nj, blocks):
    if ni > 0 and nj > 0:
        buf[:, q0:q0 + ni, r0:r0 + nj] = img[:, i0:i0 + (ni - 1) * sh + 1:sh, j0:j0 + (nj - 1) * sw + 1:sw]


_phase_copy_serial = serial_variant(_phase_copy, "_phase_copy_serial")


def _copy_phase(img, buf, layout, blocks):
    """_phase_copy of layout (i0, sh, j0, sw, q0, ni, r0, nj), blocks from its c * ni rows of nj."""
    (_phase_copy if blocks > 1 else _phase_copy_serial)(img, buf, *layout, blocks)
