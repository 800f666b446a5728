"""caffe2.python.layers.label_smooth: LabelSmooth, labels replaced by rows of a
smoothing matrix.

smooth_matrix with 2 entries: a binary probability label -> smooth_matrix[0] if
it is below 0.5 else smooth_matrix[1] (one value per example). With C x C entries:
class c -> row c (C values per example; OneHot then MatMul).
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer


class LabelSmooth(ModelLayer):

    def __init__(self, model, label, smooth_matrix, name="label_smooth", **kwargs):
        super().__init__(model, name, label, **kwargs)
        self.label = label
        smooth_matrix = np.array(smooth_matrix).astype(np.float32).flatten()
        self._set_dim(smooth_matrix)
        self._set_smooth_matrix(smooth_matrix)
        self.output_schema = schema.Scalar((np.float32, (self.dim,)), self.get_next_blob_reference("smoothed_label"))

    def _set_dim(self, smooth_matrix):
        count = smooth_matrix.size
        self.binary_prob_label = count == 2
        if self.binary_prob_label:
            self.dim = 1
            return
        side = int(round(np.sqrt(count)))
        assert side * side == count, "the smoothing matrix must be square or have 2 entries, got %d" % count
        self.dim = side

    def _set_smooth_matrix(self, smooth_matrix):
        if self.binary_prob_label:
            self.smooth_matrix = smooth_matrix
            return
        self.smooth_matrix = self.model.add_global_constant(
            "%s_label_smooth_matrix" % self.name, array=smooth_matrix.reshape((self.dim, self.dim)),
            dtype=np.dtype(np.float32))
        self.len = self.model.add_global_constant("%s_label_dim" % self.name, array=self.dim,
                                                  dtype=np.dtype(np.int64))

    def _add_ops_for_binary_prob_label(self, net):
        label = self.label()
        if self.label.field_type().base != np.float32:
            label = net.Cast([label], [net.NextScopedBlob("float32_label")], to=core.DataType.FLOAT)
        net.StumpFunc(label, self.output_schema(), threshold=0.5, low_value=float(self.smooth_matrix[0]),
                      high_value=float(self.smooth_matrix[1]))

    def _add_ops_for_categorical_label(self, net):
        label = self.label()
        if self.label.field_type().base != np.int64:
            label = net.Cast([label], [net.NextScopedBlob("int64_label")], to=core.DataType.INT64)
        label = net.FlattenToVec(label, net.NextScopedBlob("label_vector"))
        one_hot = net.OneHot([label, self.len], [net.NextScopedBlob("one_hot_label")])
        net.MatMul([one_hot, self.smooth_matrix], self.output_schema())

    def add_ops(self, net):
        if self.binary_prob_label:
            self._add_ops_for_binary_prob_label(net)
        else:
            self._add_ops_for_categorical_label(net)
