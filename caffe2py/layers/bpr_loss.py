"""caffe2.python.layers.bpr_loss: BPRLoss (Rendle et al.'s Bayesian personalized
ranking): sum over each example's negatives of -log sigmoid(pos - neg) =
softplus(neg - pos). input: Struct(pos_prediction, neg_prediction: a List of
float scores)."""
import numpy as np

from .. import schema
from .layers import ModelLayer
from .tags import Tags


class BPRLoss(ModelLayer):

    def __init__(self, model, input_record, name="bpr_loss", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("pos_prediction", schema.Scalar()),
                                                     ("neg_prediction", schema.List(np.float32))), input_record), \
            "BPRLoss needs pos_prediction and neg_prediction (a List) fields"
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        negatives = self.input_record.neg_prediction
        pos = net.LengthsTile([self.input_record.pos_prediction(), negatives["lengths"]()],
                              net.NextScopedBlob("pos_score_repeated"))
        difference = net.Sub([negatives["values"](), pos], net.NextScopedBlob("neg_minus_pos"))
        softplus = net.Softplus([difference], net.NextScopedBlob("softplus"))
        net.ReduceFrontSum(softplus, self.output_schema.field_blobs())
