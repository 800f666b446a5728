"""Stride phases of an image: the input copied into zero-bordered buffers, one per
(row phase, column phase) of a stride, so that a strided convolution reads contiguous
rows (conv.py's flattened-row path, direct_conv.py and panel_conv.py take their input
this way).

    TapLayout(x_shape, w_shape, strides, pads, dilations, out_spatial, block): the
        phase buffers' shape and, per tap (c, a, b) of the reduction, the
        offset into them at which output p's input sits (p = oy * wq + ox, flat outputs
        of rows wq wide; columns ox >= OW are computed and dropped); long enough that
        every block of `block` flat outputs reads in bounds.
    TapLayout.fill(img) -> the flat phase buffers of one image (C, H, W) (this thread's)
    subsample(img, strides, out_spatial) -> img[:, ::sh, ::sw] as a new contiguous array
    tap_offsets(c, kernel, strides, dilations, plane, wq) -> the offset of each tap
        (c, a, b) into phase buffers of `plane` floats per channel, rows wq wide
    gathered_product(taps, w2, out, wq, bias, has_bias, residual, has_residual, relu)
        the NumPy twins' product: out = [relu](w2 @ taps cropped to out's width + bias
        + residual), taps (K, OH * wq) gathered from the phase buffers
"""
import numpy as np

from ..runtime.jit import LazyGlobal, compiled, per_team, prange, serial_variant, team_blocks

LANES_16 = LazyGlobal(".simd", "LANES_16")
address = LazyGlobal(".simd", "address")
vload_f32_lanes = LazyGlobal(".simd", "vload_f32_lanes")
vstore_f32_lanes = LazyGlobal(".simd", "vstore_f32_lanes")


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


@compiled(inline=True)
def copy_floats(dst, src, count):
    """`count` float32 from address src to address dst as masked 16-lane vectors: rows
    of 7-28 floats are shorter than the vectors LLVM gives a copy loop, which then
    copies them a float at a time (its scalar remainder)."""
    for j in range(0, count, 16):
        k = min(16, count - j)
        vstore_f32_lanes(dst + j * 4, vload_f32_lanes(LANES_16, src + j * 4, 0, k), 0, k)


@compiled(parallel=True)
def _phase_copy_rows(img, buf, i0, sh, j0, q0, ni, r0, nj, blocks):
    """_phase_copy at column stride 1 for C-contiguous float32 img and buf, each row
    copied by copy_floats (the loop above copied short rows a float at a time)."""
    c_count, h, wd = img.shape
    _, rows, wq = buf.shape
    x0 = address(img)
    b0 = address(buf)
    for t in prange(blocks):
        for job in range(c_count * ni * t // blocks, c_count * ni * (t + 1) // blocks):
            c, i = job // ni, job % ni
            copy_floats(b0 + ((c * rows + q0 + i) * wq + r0) * 4, x0 + ((c * h + i0 + i * sh) * wd + j0) * 4, nj)


@_phase_copy_rows.numpy_twin
def _phase_copy_rows_numpy(img, buf, i0, sh, j0, q0, ni, r0, nj, blocks):
    _phase_copy_numpy(img, buf, i0, sh, j0, 1, q0, ni, r0, nj, blocks)


_phase_copy_serial = serial_variant(_phase_copy, "_phase_copy_serial")
_phase_copy_rows_serial = serial_variant(_phase_copy_rows, "_phase_copy_rows_serial")


def _copy_phase(img, buf, layout, blocks):
    """_phase_copy of layout (i0, sh, j0, sw, q0, ni, r0, nj), blocks from its c * ni rows of nj."""
    i0, sh, j0, sw, q0, ni, r0, nj = layout
    if sw == 1 and img.dtype == np.float32 and img.flags.c_contiguous and buf.flags.c_contiguous:
        (_phase_copy_rows if blocks > 1 else _phase_copy_rows_serial)(img, buf, i0, sh, j0, q0, ni, r0, nj, blocks)
    else:
        (_phase_copy if blocks > 1 else _phase_copy_serial)(img, buf, *layout, blocks)


def subsample(img, strides, out_spatial):
    """img (C, H, W)[:, ::sh, ::sw] cut to out_spatial, as a new C-contiguous array: a
    strided 1x1 conv's input. Compiled for float32 (a run's kernel replay redoes compiled
    copies, not NumPy ones: caffe2py/kernel_replay.py), NumPy for other dtypes."""
    (sh, sw), (oh, ow) = strides, out_spatial
    if img.dtype != np.float32 or img.ndim != 3 or oh < 1 or ow < 1 or \
            (oh - 1) * sh >= img.shape[1] or (ow - 1) * sw >= img.shape[2]:
        return np.ascontiguousarray(img[:, :oh * sh:sh, :ow * sw:sw])
    c = img.shape[0]
    out = np.empty((c, oh, ow), np.float32)
    _copy_phase(img, out, (0, sh, 0, sw, 0, oh, 0, ow), team_blocks(c * oh, ow))
    return out


class TapLayout:
    """See the module docstring. Fields: wq (flat row width), rows (rows per phase),
    offsets (C * kh * kw int64), blocks (flat output blocks of `block`), size (floats of
    the phase buffers)."""

    def __init__(self, x_shape, w_shape, strides, pads, dilations, out_spatial, block):
        _, c, h, wd = x_shape
        _, _, kh, kw = w_shape
        (sh, sw), (dh, dw) = strides, dilations
        oh, _ = out_spatial
        pt, pl, pb, pr = pads
        hq, self.wq = -(-(h + pt + pb) // sh), -(-(wd + pl + pr) // sw)
        wq = self.wq
        self.phases = sh * sw
        self.blocks = -(-(oh * wq) // block)
        a_max, b_max = (kh - 1) * dh // sh, (kw - 1) * dw // sw
        # rows per phase: every padded row, and room for the last block's overrun
        self.rows = max(hq, a_max + 1 + -(-(self.blocks * block + b_max) // wq))
        plane = self.rows * wq
        self.used = {((a * dh) % sh) * sw + (b * dw) % sw for a in range(kh) for b in range(kw)}
        self.offsets = tap_offsets(c, (kh, kw), strides, dilations, plane, wq)
        self.size = self.phases * c * plane
        # a kernel's reads: p + offset for p < blocks * block
        if int(self.offsets.max()) + self.blocks * block > self.size:
            raise AssertionError("phase buffers too short")   # the layout above guarantees it
        # where input (i, j) goes: padded (i + pt, j + pl) -> phase ((i + pt) % sh, (j + pl) % sw)
        self.layouts = []
        for p0 in range(sh):
            for p1 in range(sw):
                i0, j0 = (p0 - pt) % sh, (p1 - pl) % sw
                ni, nj = len(range(i0, h, sh)), len(range(j0, wd, sw))
                self.layouts.append((i0, sh, j0, sw, (pt + i0) // sh, ni, (pl + j0) // sw, nj))
        self.shape = (self.phases, c, self.rows, wq)
        self._setups = {}

    def _setup(self):
        """(flat buffers, [(phase buffer, layout, blocks)]): this thread's zero-bordered
        buffers (callers only ever rewrite their interior) and the copies that fill them."""
        grid = np.zeros(self.shape, np.float32)
        c = self.shape[1]
        copies = [(grid[k], layout, team_blocks(c * layout[5], layout[7]))
                  for k, layout in enumerate(self.layouts) if layout[5] > 0 and layout[7] > 0 and k in self.used]
        return grid.reshape(-1), copies

    def fill(self, img):
        """The flat phase buffers holding img (C, H, W): zero borders, the interior
        rewritten. One set per calling thread and layout."""
        flat, copies = per_team(self._setups, self._setup)
        for buf, layout, blocks in copies:
            _copy_phase(img, buf, layout, blocks)
        return flat



def tap_offsets(c, kernel, strides, dilations, plane, wq):
    """(C * kh * kw,) int64: where tap (c, a, b)'s input for flat output 0 sits in phase
    buffers laid out (phase, c, rows, wq) with `plane` = rows * wq floats a channel."""
    kh, kw = kernel
    (sh, sw), (dh, dw) = strides, dilations
    offsets = np.empty((c, kh, kw), np.int64)
    for a in range(kh):
        for b in range(kw):
            phase = ((a * dh) % sh) * sw + (b * dw) % sw
            for ci in range(c):
                offsets[ci, a, b] = (phase * c + ci) * plane + (a * dh // sh) * wq + b * dw // sw
    return offsets.reshape(-1)


def gathered_product(taps, w2, out, wq, bias, has_bias, residual, has_residual, relu):
    """out (M, OH, OW) = [relu](w2 (M, K) @ taps (K, OH * wq), cropped to OW columns, +
    bias + residual (M, OH * OW)): the direct and panel kernels' NumPy twins."""
    m, oh, ow = out.shape
    y = (w2 @ taps).reshape(m, oh, wq)[:, :, :ow]
    if has_bias:
        y = y + bias[:m].reshape(m, 1, 1)
    if has_residual:
        y = y + residual.reshape(m, oh, ow)
    if relu:
        y = np.maximum(y, np.float32(0))
    out[...] = y
