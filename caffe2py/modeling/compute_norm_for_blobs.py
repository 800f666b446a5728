"""caffe2.python.modeling.compute_norm_for_blobs: a NetModifier that writes the
L1 or L2 norm of chosen blobs (optionally averaged over the element count, or of
one row) to `<blob>_l<p>_norm` blobs, for monitoring training."""
import numpy as np

from .. import core
from ..errors import Caffe2Error
from ..proto import caffe2_pb2
from .net_modifier import NetModifier, append_output_record, require_defined


class ComputeNormForBlobs(NetModifier):
    """blobs: names; logging_frequency: Print the norm every that many runs (< 1:
    never); p: 1 or 2 (the L2 norm is written as LpNorm's sum of squares, as in
    Caffe2); compute_averaged_norm: divide by the element count; row_index: the
    norm of that row only."""

    def __init__(self, blobs, logging_frequency, p=2, compute_averaged_norm=False, row_index=None):
        if p not in (1, 2):
            raise Caffe2Error("ComputeNormForBlobs: p must be 1 or 2, got %r" % (p,))
        if row_index is not None and row_index < 0:
            raise Caffe2Error("ComputeNormForBlobs: %d is not a valid row index, row_index should be >= 0"
                              % row_index)
        self._blobs = blobs
        self._logging_frequency = logging_frequency
        self._p = p
        self._compute_averaged_norm = compute_averaged_norm
        self._field_name_suffix = ("_averaged" if compute_averaged_norm else "") + "_l%d_norm" % p
        self.row_index = row_index

    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None,
                   modify_output_record=False):
        blob_to_device = blob_to_device or {}
        for blob_name in self._blobs:
            blob = require_defined(net, blob_name, "ComputeNormForBlobs")
            device = blob_to_device.get(blob, core.DeviceOption(caffe2_pb2.CPU))
            with core.DeviceScope(device):
                source = blob
                if self.row_index:      # Caffe2 treats row 0 as "the whole blob"
                    source = net.Slice([blob], net.NextScopedBlob(prefix=str(blob) + "_row_%d" % self.row_index),
                                       starts=[self.row_index, 0], ends=[self.row_index + 1, -1])
                as_float = net.Cast(source, net.NextScopedBlob(prefix=str(source) + "_float"),
                                    to=core.DataType.FLOAT)
                norm_name = net.NextScopedBlob(prefix=str(source) + self._field_name_suffix)
                norm = net.LpNorm(as_float, norm_name, p=self._p, average=self._compute_averaged_norm)
                net.StopGradient(norm, net.NextScopedBlob(str(norm_name) + "_stop_gradient"))
                if self._logging_frequency >= 1:
                    net.Print(norm, [], every_n=self._logging_frequency)
                if modify_output_record:
                    append_output_record(net, str(source) + self._field_name_suffix, norm, np.float64, (1,))
