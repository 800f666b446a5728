"""caffe2.python.layers.margin_rank_loss: MarginRankLoss.

input: Struct(pos_prediction (one score per example), neg_prediction (a List of
scores per example)). Each negative is paired with its example's positive:
loss = mean (sum with average_loss=False) of max(0, margin - (pos - neg)).
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer
from .tags import Tags


class MarginRankLoss(ModelLayer):

    def __init__(self, model, input_record, name="margin_rank_loss", margin=0.1, average_loss=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert margin >= 0, "margin must be >= 0, got %s" % margin
        assert isinstance(input_record, schema.Struct) and "pos_prediction" in input_record \
            and "neg_prediction" in input_record, "MarginRankLoss needs pos_prediction and neg_prediction"
        assert isinstance(input_record.neg_prediction, schema.List), "neg_prediction must be a List"
        self._margin = margin
        self._average_loss = average_loss
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        negatives = self.input_record.neg_prediction
        pos = net.FlattenToVec(self.input_record.pos_prediction(), net.NextScopedBlob("pos_vector"))
        pos_per_negative = net.LengthsTile([pos, negatives.lengths()], net.NextScopedBlob("pos_pred_rep"))
        ones = net.ConstantFill([negatives.items()], net.NextScopedBlob("const_1"), value=1,
                                dtype=core.DataType.INT32)
        rank_loss = net.MarginRankingCriterion([pos_per_negative, negatives.items(), ones],
                                               net.NextScopedBlob("rank_loss"), margin=self._margin)
        if self._average_loss:
            net.AveragedLoss(rank_loss, self.output_schema.field_blobs())
        else:
            net.ReduceFrontSum(rank_loss, self.output_schema.field_blobs())
