"""caffe2.python.layers.build_index: MapToRange, ids mapped to dense indices.

Training assigns each new id the next index (1, 2, ...; up to max_index of them),
eval and prediction freeze the map first, so unseen ids get 0. output:
Struct(indices (int64), handler (the index, a parameter)).
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer


class MapToRange(ModelLayer):

    def __init__(self, model, input_record, max_index, name="map_to_range", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert max_index > 0, "max_index must be > 0, got %s" % max_index
        assert isinstance(input_record, schema.Scalar), "MapToRange takes a Scalar"
        self.max_index = max_index
        self.handler = self.create_param(param_name="handler", shape=[], initializer=(
            "LongIndexCreate", {"max_elements": self.max_index}), optimizer=model.NoOptim)
        self.output_schema = schema.Struct(
            ("indices", schema.Scalar(np.int64, self.get_next_blob_reference("indices"))),
            ("handler", schema.Scalar(np.void, self.handler)))

    def add_train_ops(self, net):
        keys = self.input_record()
        if self.input_record.field_type().base != np.int64:
            keys = net.Cast(keys, net.NextScopedBlob("indices_before_mapping"), to=core.DataType.INT64)
        indices = net.IndexGet([self.handler, keys], self.output_schema.indices())
        net.StopGradient(indices, indices)

    def add_eval_ops(self, net):
        net.IndexFreeze(self.handler, self.handler)
        self.add_train_ops(net)

    def add_ops(self, net):
        self.add_eval_ops(net)
