"""RoIAlign forward (and its gradient): caffe2py's op run as a one-op net next to a
peer in the same process, alternating blocks (see _timing.interleaved_ms).

The peer is torchvision.ops.roi_align when torchvision imports, else a plain torch
implementation written here (one F.grid_sample over every region's sample grid, then
a mean per bin; it matches Caffe2's RoIAlign for regions inside the image, which the
benchmark draws): the table says which. Shapes are Mask R-CNN's heads
on a stride-16 map of an 800 x 1088 image: the box head (7 x 7), the mask head (14 x 14).

Usage: python benchmarks/roi_align_bench.py [--threads 1] [--runs 15]
"""
import argparse
import os

import numpy as np
from _timing import interleaved_ms, machine_label

try:
    import torch
except ImportError:          # benchmark-only dependency
    torch = None
try:
    import torchvision
except Exception:            # noqa: BLE001 - absent, or built for another torch
    torchvision = None


def torch_roi_align(x, rois, scale, ph, pw, sr):
    """RoIAlign of one image in plain torch, for a fixed sampling ratio and regions
    inside the image: every region's ph*sr x pw*sr sample grid goes through one
    F.grid_sample call (bilinear, border padding = Caffe2's clamping, align_corners so
    pixel centres sit on integers), then each bin averages its sr x sr samples."""
    import torch.nn.functional as F
    n, c, h, w = x.shape
    r = rois.shape[0]
    x1, y1, x2, y2 = (rois[:, 1:] * scale).unbind(1)
    bh, bw = (y2 - y1).clamp(min=1.0) / ph, (x2 - x1).clamp(min=1.0) / pw
    iy, ix = torch.arange(ph * sr, dtype=x.dtype), torch.arange(pw * sr, dtype=x.dtype)
    yy = y1[:, None] + (torch.div(iy, sr, rounding_mode="floor") + (iy % sr + 0.5) / sr) * bh[:, None]
    xx = x1[:, None] + (torch.div(ix, sr, rounding_mode="floor") + (ix % sr + 0.5) / sr) * bw[:, None]
    gy = (yy / (h - 1) * 2 - 1)[:, :, None].expand(r, ph * sr, pw * sr)
    gx = (xx / (w - 1) * 2 - 1)[:, None, :].expand(r, ph * sr, pw * sr)
    grid = torch.stack([gx, gy], dim=-1).reshape(1, r * ph * sr, pw * sr, 2)
    samples = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)
    return samples.view(c, r, ph, sr, pw, sr).mean(dim=(3, 5)).permute(1, 0, 2, 3)


def _peer(x, rois, scale, pooled, sr):
    if torchvision is not None:
        return "torchvision.ops.roi_align", lambda: torchvision.ops.roi_align(x, rois, pooled, scale, sr, False)
    return "torch grid_sample + mean (torchvision absent)", lambda: torch_roi_align(x, rois, scale, pooled, pooled, sr)


def _rois(rng, n, height, width):
    xy = rng.uniform(0, [width - 16, height - 16], (n, 2))
    size = rng.uniform(16, 400, (n, 2))
    boxes = np.concatenate([xy, np.minimum(xy + size, [width, height])], 1)
    return np.concatenate([np.zeros((n, 1)), boxes], 1).astype(np.float32)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=15)
    a = p.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    from caffe2py import core
    from caffe2py.workspace import Workspace
    print("# RoIAlign, %s, %d thread(s), median of %d runs (alternating blocks)" % (machine_label(), a.threads, a.runs))
    if torch is None:
        print("# torch is absent: no peer")
        return
    torch.set_num_threads(a.threads)
    print("| case | ours ms | peer | peer ms | ratio (ours / peer) | max abs diff |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    feat = rng.standard_normal((1, 256, 50, 68), dtype=np.float32)
    for label, rois_n, pooled, grad in (("box head 7x7, 512 RoIs", 512, 7, False),
                                        ("mask head 14x14, 100 RoIs", 100, 14, False),
                                        ("box head 7x7, 512 RoIs, gradient", 512, 7, True)):
        rois = _rois(rng, rois_n, 800, 1088)
        ws = Workspace("roi_bench")
        ws.feed_blob("X", feat)
        ws.feed_blob("R", rois)
        net = core.Net("roi_bench_%s" % rois_n)
        net.Proto().op.extend([core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], spatial_scale=1.0 / 16,
                                                   pooled_h=pooled, pooled_w=pooled, sampling_ratio=2)])
        ws.create_net(net)
        ws.run_net(net.Name())
        y = ws.fetch_blob("Y")
        tx, tr = torch.from_numpy(feat), torch.from_numpy(rois)
        name, peer = _peer(tx, tr, 1.0 / 16, pooled, 2)
        diff = float(np.abs(y - peer().numpy()).max())
        if grad:
            dy = rng.standard_normal(y.shape, dtype=np.float32)
            ws.feed_blob("dY", dy)
            gnet = core.Net("roi_grad_bench")
            gnet.Proto().op.extend([core.CreateOperator("RoIAlignGradient", ["X", "R", "dY"], ["dX"],
                                                        spatial_scale=1.0 / 16, pooled_h=pooled, pooled_w=pooled,
                                                        sampling_ratio=2)])
            ws.create_net(gnet)
            ws.run_net(gnet.Name())
            txg = tx.clone().requires_grad_(True)
            tdy = torch.from_numpy(dy)
            _, fwd = _peer(txg, tr, 1.0 / 16, pooled, 2)

            def peer_grad():
                txg.grad = None
                fwd().backward(tdy)
            peer_grad()
            diff = float(np.abs(ws.fetch_blob("dX") - txg.grad.numpy()).max())
            ours, theirs = interleaved_ms(lambda: ws.run_net(gnet.Name()), peer_grad, a.runs)
            name += " (autograd, forward + backward)"
        else:
            ours, theirs = interleaved_ms(lambda: ws.run_net(net.Name()), lambda: peer(), a.runs)
        print("| %s | %.2f | %s | %.2f | %.2f | %.1e |" % (label, ours, name, theirs, ours / theirs, diff))


if __name__ == "__main__":
    main()
