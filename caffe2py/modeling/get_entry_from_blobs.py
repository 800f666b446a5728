"""caffe2.python.modeling.get_entry_from_blobs: a NetModifier that copies entry
[i1, i2] (or row i1 when i2 == -1) of chosen 2-D blobs to `<blob>_<i1>_<i2>`
(`<blob>_<i1>_all`) blobs, for monitoring."""
import numpy as np

from ..errors import Caffe2Error
from .net_modifier import NetModifier, append_output_record, require_defined


class GetEntryFromBlobs(NetModifier):
    def __init__(self, blobs, logging_frequency, i1=0, i2=0):
        if i1 < 0:
            raise Caffe2Error("GetEntryFromBlobs: i1 is out of range (%d < 0)" % i1)
        if i2 < -1:
            raise Caffe2Error("GetEntryFromBlobs: i2 must be >= 0 or -1 (the whole row), got %d" % i2)
        self._blobs = blobs
        self._logging_frequency = logging_frequency
        self._i1 = i1
        self._i2 = i2
        self._field_name_suffix = "_%d_%d" % (i1, i2) if i2 >= 0 else "_%d_all" % i1

    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None,
                   modify_output_record=False):
        i1, i2 = self._i1, self._i2
        for blob_name in self._blobs:
            blob = require_defined(net, blob_name, "GetEntryFromBlobs")
            row = net.Slice([blob], starts=[i1, 0], ends=[i1 + 1, -1])
            if i2 == -1:
                entry = net.Copy([row], [net.NextScopedBlob(prefix=str(blob) + "_%d_all" % i1)])
            else:
                entry = net.Slice([row], net.NextScopedBlob(prefix=str(blob) + "_%d_%d" % (i1, i2)),
                                  starts=[0, i2], ends=[-1, i2 + 1])
            if self._logging_frequency >= 1:
                net.Print(entry, [], every_n=self._logging_frequency)
            if modify_output_record:
                append_output_record(net, str(blob) + self._field_name_suffix, entry, np.float32)
