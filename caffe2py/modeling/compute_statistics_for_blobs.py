"""caffe2.python.modeling.compute_statistics_for_blobs: a NetModifier that writes
min, max, mean and standard deviation of chosen blobs (Summarize) to
`<blob>_summary` blobs."""
import numpy as np

from .. import core
from .net_modifier import NetModifier, append_output_record, require_defined


class ComputeStatisticsForBlobs(NetModifier):
    def __init__(self, blobs, logging_frequency):
        self._blobs = blobs
        self._logging_frequency = logging_frequency
        self._field_name_suffix = "_summary"

    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None,
                   modify_output_record=False):
        for blob_name in self._blobs:
            blob = require_defined(net, blob_name, "ComputeStatisticsForBlobs")
            as_float = net.Cast(blob, to=core.DataType.FLOAT)
            stats = net.Summarize(as_float, net.NextScopedBlob(prefix=str(blob) + self._field_name_suffix),
                                  to_file=0)
            if self._logging_frequency >= 1:      # Print refuses every_n < 1 (Caffe2 added it always)
                net.Print(stats, [], every_n=self._logging_frequency)
            if modify_output_record:
                append_output_record(net, str(blob) + self._field_name_suffix, stats, np.float64, (1,))
