"""caffe2.python.muji: all-reduce of one blob held on several GPUs, built from Copy
and Add ops (Caffe2's multi-GPU helper, named after the Chinese word for "cow").

OnGPU(i) / OnCPU() are the device options; Allreduce(net, blobs, reduced_affix,
gpu_indices) adds ops after which every `blob + reduced_affix` holds the sum of all
`blobs` (blobs[i] lives on gpu_indices[i]), and returns those references.
Allreduce2/4/8 reduce pairwise on the GPUs themselves (Caffe2 picks them when every
pair of GPUs has peer access); AllreduceFallback sums on the first GPU and copies back.
"""
from . import core, workspace
from .proto import caffe2_pb2


def OnGPU(gpu_id):
    return core.DeviceOption(workspace.GpuDeviceType, gpu_id)


def OnCPU():
    return core.DeviceOption(caffe2_pb2.CPU)


def _peer_access_everywhere(gpu_indices):
    pattern = getattr(workspace, "GetGpuPeerAccessPattern", None)
    if pattern is None:
        return False
    access = pattern()
    return all(access[i][j] for i in gpu_indices for j in gpu_indices)


def Allreduce(net, blobs, reduced_affix="_reduced", gpu_indices=None):
    """Sum `blobs` across GPUs: returns the reduced blob of each GPU."""
    if gpu_indices is None:
        gpu_indices = list(range(len(blobs)))
    if len(gpu_indices) != len(blobs):
        raise RuntimeError("gpu_indices length and blobs length mismatch: %d vs %d"
                           % (len(gpu_indices), len(blobs)))
    if len(blobs) in (2, 4, 8) and _peer_access_everywhere(gpu_indices):
        return {2: Allreduce2, 4: Allreduce4, 8: Allreduce8}[len(blobs)](net, blobs, reduced_affix, gpu_indices)
    return AllreduceFallback(net, blobs, reduced_affix, gpu_indices)


def _pairwise(net, blobs, reduced_affix, gpu_indices):
    """Tree reduction: pairs add on the first GPU of each pair until one sum is left
    (on gpu_indices[0]), then the sum is copied to every other GPU."""
    partial = [(blob, gpu) for blob, gpu in zip(blobs, gpu_indices)]
    first = True
    while len(partial) > 1:
        merged = []
        for (a, gpu_a), (b, gpu_b) in zip(partial[0::2], partial[1::2]):
            out = str(a) + reduced_affix if first else a
            merged.append((net.Add([a, b], out, device_option=OnGPU(gpu_a)), gpu_a))
        partial, first = merged, False
    total = partial[0][0]
    reduced = [total]
    for blob, gpu in zip(blobs[1:], gpu_indices[1:]):
        reduced.append(net.Copy(total, str(blob) + reduced_affix, device_option=OnGPU(gpu)))
    return reduced


def Allreduce2(net, blobs, reduced_affix, gpu_indices):
    return _pairwise(net, blobs, reduced_affix, gpu_indices)


def Allreduce4(net, blobs, reduced_affix, gpu_indices):
    return _pairwise(net, blobs, reduced_affix, gpu_indices)


def Allreduce4Group2(net, blobs, reduced_affix, gpu_indices):
    return _pairwise(net, blobs, reduced_affix, gpu_indices)


def Allreduce8(net, blobs, reduced_affix, gpu_indices):
    return _pairwise(net, blobs, reduced_affix, gpu_indices)


def AllreduceFallback(net, blobs, reduced_affix, gpu_indices):
    """Copy every blob to the first GPU, sum there, copy the sum back to each GPU."""
    first = OnGPU(gpu_indices[0])
    if reduced_affix:
        total = net.Copy(blobs[0], str(blobs[0]) + reduced_affix, device_option=first)
    else:
        total = blobs[0]
    temp = str(total) + "_temp_copy"
    for blob in blobs[1:]:
        copied = net.Copy(blob, temp, device_option=first)
        total = net.Add([copied, total], total, device_option=first)
    reduced = [total]
    for blob, gpu in zip(blobs[1:], gpu_indices[1:]):
        reduced.append(net.Copy(total, str(blob) + reduced_affix, device_option=OnGPU(gpu)))
    return reduced
