"""caffe2.python.layers.pairwise_dot_product: PairwiseDotProduct.

input: Struct(all_embeddings) or Struct(x_embeddings, y_embeddings), Scalars of
shape (n, d) / (m, d) per example, optionally indices_to_gather. output: the
n x m dot products per example, flattened (output_dim of them), or the ones at
indices_to_gather.
"""
import numpy as np

from .. import schema
from .layers import ModelLayer


class PairwiseDotProduct(ModelLayer):

    def __init__(self, model, input_record, output_dim, name="pairwise_dot_product", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Struct), "PairwiseDotProduct takes a Struct"
        assert ("all_embeddings" in input_record) ^ ("x_embeddings" in input_record and
                                                     "y_embeddings" in input_record), \
            "give either all_embeddings or both x_embeddings and y_embeddings"
        if "all_embeddings" in input_record:
            x_embeddings = y_embeddings = input_record["all_embeddings"]
        else:
            x_embeddings, y_embeddings = input_record["x_embeddings"], input_record["y_embeddings"]
        assert isinstance(x_embeddings, schema.Scalar) and isinstance(y_embeddings, schema.Scalar), \
            "the embeddings must be Scalars"
        self.x_embeddings, self.y_embeddings = x_embeddings, y_embeddings
        if "indices_to_gather" in input_record:
            assert isinstance(input_record["indices_to_gather"], schema.Scalar), "indices_to_gather must be a Scalar"
        self.output_schema = schema.Scalar((np.float32, (output_dim,)), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        x, y = self.x_embeddings(), self.y_embeddings()
        products = net.BatchMatMul([x, y], [net.NextScopedBlob("pairwise_products")], trans_b=1)
        if "indices_to_gather" in self.input_record:
            flattened = net.Flatten(products, net.NextScopedBlob("flattened_products"))
            net.BatchGather([flattened, self.input_record.indices_to_gather()], self.output_schema.field_blobs())
        else:
            net.Flatten(products, self.output_schema.field_blobs())
