"""caffe2.python.modeling.compute_histogram_for_blobs: a NetModifier that writes the
L1-normalised histogram (num_buckets + 2 bins: below, the buckets, at or above)
of chosen blobs, this run's (`<blob>_curr_normalized_hist`) or accumulated over
runs (`<blob>_acc_normalized_hist`), and appends it to the net's output record."""
import numpy as np

from .. import core
from ..errors import Caffe2Error
from .net_modifier import NetModifier, append_output_record, require_defined


class ComputeHistogramForBlobs(NetModifier):
    def __init__(self, blobs, logging_frequency, num_buckets=30, lower_bound=0.0, upper_bound=1.0,
                 accumulate=False):
        if int(num_buckets) <= 0:
            raise Caffe2Error("ComputeHistogramForBlobs: num_buckets must be > 0, got %r" % (num_buckets,))
        if not float(upper_bound) > float(lower_bound):
            raise Caffe2Error("ComputeHistogramForBlobs: upper_bound (%g) must be above lower_bound (%g)"
                              % (upper_bound, lower_bound))
        self._blobs = blobs
        self._logging_frequency = logging_frequency
        self._accumulate = accumulate
        self._field_name_suffix = "_acc_normalized_hist" if accumulate else "_curr_normalized_hist"
        self._num_buckets = int(num_buckets)
        self._lower_bound = float(lower_bound)
        self._upper_bound = float(upper_bound)

    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None,
                   modify_output_record=True):     # Caffe2 always records the histogram
        for blob_name in self._blobs:
            blob = require_defined(net, blob_name, "ComputeHistogramForBlobs")
            # the blob as float first (Caffe2's later form: histograms of int blobs too)
            as_float = net.Cast(blob, net.NextScopedBlob(prefix=str(blob) + "_float"), to=core.DataType.FLOAT)
            curr_hist, acc_hist = net.AccumulateHistogram(
                [as_float], [net.NextScopedBlob(prefix=str(blob) + "_curr_hist"),
                         net.NextScopedBlob(prefix=str(blob) + "_acc_hist")],
                num_buckets=self._num_buckets, lower_bound=self._lower_bound, upper_bound=self._upper_bound)
            hist = net.Cast(acc_hist if self._accumulate else curr_hist,
                            net.NextScopedBlob(prefix=str(blob) + "_cast_hist"), to=core.DataType.FLOAT)
            normalized = net.NormalizeL1(hist, net.NextScopedBlob(prefix=str(blob) + self._field_name_suffix))
            if self._logging_frequency >= 1:
                net.Print(normalized, [], every_n=self._logging_frequency)
            append_output_record(net, str(blob) + self._field_name_suffix, normalized, np.float32,
                                 (self._num_buckets + 2,))

    def __call__(self, net, init_net=None, grad_map=None, blob_to_device=None, modify_output_record=True):
        self.modify_net(net, init_net=init_net, grad_map=grad_map, blob_to_device=blob_to_device,
                        modify_output_record=modify_output_record)
