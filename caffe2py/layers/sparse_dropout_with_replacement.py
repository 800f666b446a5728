"""caffe2.python.layers.sparse_dropout_with_replacement:
SparseDropoutWithReplacement, each example's IdList replaced, with probability
dropout_prob_{train,eval,predict} in the matching net, by the single id
replacement_value (e.g. predict probability 1 for a feature serving lacks)."""
from .. import schema
from .layers import IdList, ModelLayer


class SparseDropoutWithReplacement(ModelLayer):

    def __init__(self, model, input_record, dropout_prob_train, dropout_prob_eval, dropout_prob_predict,
                 replacement_value, name="sparse_dropout", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.equal_schemas(input_record, IdList), "SparseDropoutWithReplacement takes an IdList"
        self.dropout_prob_train = float(dropout_prob_train)
        self.dropout_prob_eval = float(dropout_prob_eval)
        self.dropout_prob_predict = float(dropout_prob_predict)
        self.replacement_value = int(replacement_value)
        for which, prob in (("train", self.dropout_prob_train), ("eval", self.dropout_prob_eval),
                            ("predict", self.dropout_prob_predict)):
            assert 0 <= prob <= 1.0, "expected 0 <= dropout_prob_%s <= 1, got %s" % (which, prob)
        assert max(self.dropout_prob_train, self.dropout_prob_eval, self.dropout_prob_predict) > 0, \
            "the dropout probabilities are all 0 for train, eval and predict"
        self.output_schema = schema.NewRecord(model.net, IdList)
        if input_record.lengths.metadata:
            self.output_schema.lengths.set_metadata(input_record.lengths.metadata)
        if input_record.items.metadata:
            self.output_schema.items.set_metadata(input_record.items.metadata)

    def _add_ops(self, net, ratio):
        net.SparseDropoutWithReplacement(
            [self.input_record.items(), self.input_record.lengths()],
            [self.output_schema.items(), self.output_schema.lengths()],
            ratio=ratio, replacement_value=self.replacement_value)

    def add_train_ops(self, net):
        self._add_ops(net, self.dropout_prob_train)

    def add_eval_ops(self, net):
        self._add_ops(net, self.dropout_prob_eval)

    def add_ops(self, net):
        self._add_ops(net, self.dropout_prob_predict)
