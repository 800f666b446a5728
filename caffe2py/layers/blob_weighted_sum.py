"""caffe2.python.layers.blob_weighted_sum: BlobWeightedSum, sum_i w_i * input_i of
the input record's blobs (same shapes) with trained scalar weights w_i
(`<layer>/w_<i>`, starting at init_weights or 1)."""
from .. import schema
from .layers import ModelLayer


class BlobWeightedSum(ModelLayer):

    def __init__(self, model, input_record, init_weights=None, weight_optim=None, name="blob_weighted_sum",
                 **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.blobs = self.input_record.field_blobs()
        self.num_weights = len(self.blobs)
        assert self.num_weights > 1, "BlobWeightedSum needs more than one input blob, got %d" % self.num_weights
        assert len(input_record.field_types()[0].shape) > 0, "BlobWeightedSum needs the inputs' inner shape"
        self.init_weights = init_weights or [1.0] * self.num_weights
        assert len(self.init_weights) == self.num_weights, \
            "%d init_weights for %d inputs" % (len(self.init_weights), self.num_weights)
        self.weight_optim = weight_optim
        field_type = input_record.field_types()[0]
        self.output_schema = schema.Scalar((field_type.base, field_type.shape),
                                           self.get_next_blob_reference("blob_weighted_sum_out"))
        self.weights = [
            self.create_param(param_name="w_%d" % index, shape=[1],
                              initializer=("ConstantFill", {"value": float(self.init_weights[index])}),
                              optimizer=weight_optim)
            for index in range(self.num_weights)]

    def add_ops(self, net):
        net.WeightedSum([b for pair in zip(self.blobs, self.weights) for b in pair], self.output_schema(),
                        grad_on_w=True)
