"""caffe2.python.layers.dropout: Dropout of `ratio` in training; identity in eval
and prediction (unless dropout_for_eval)."""
from .. import schema
from .layers import ModelLayer


class Dropout(ModelLayer):

    def __init__(self, model, input_record, name="dropout", ratio=0.5, dropout_for_eval=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "Dropout takes a Scalar"
        assert 0 <= ratio < 1.0, "Dropout ratio must be in [0, 1), got %s" % ratio
        self.output_schema = schema.Scalar(input_record.field_type(), self.get_next_blob_reference("output"))
        self.dropout_for_eval = dropout_for_eval
        self.ratio = ratio

    def _add_ops(self, net, is_test):
        outputs = self.output_schema.field_blobs() + [net.NextScopedBlob("d_mask")]
        net.Dropout(self.input_record.field_blobs(), outputs, ratio=self.ratio, is_test=is_test)

    def add_train_ops(self, net):
        self._add_ops(net, is_test=False)

    def add_eval_ops(self, net):
        self._add_ops(net, is_test=not self.dropout_for_eval)

    def add_ops(self, net):
        self.add_eval_ops(net)
