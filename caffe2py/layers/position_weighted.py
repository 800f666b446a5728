"""caffe2.python.layers.position_weighted: PositionWeighted, a trained weight per
position in an IdList (pos_w, starting at 1).

output: Struct(position_weights): for each id, the weight of its position in its
list. Pair it with the ids (schema.Map(ids, position_weights, lengths)) to make an
IdScoreList for SparseLookup's PositionWeighted reducer. The number of positions
is the lengths' categorical_limit, else the ids'.
"""
import logging

import numpy as np

from .. import schema
from .layers import ModelLayer, get_categorical_limit
from .tags import Tags

log = logging.getLogger("caffe2py")


class PositionWeighted(ModelLayer):

    def __init__(self, model, input_record, weight_optim=None, name="position_weights"):
        super().__init__(model, name, input_record)
        assert isinstance(input_record, schema.List), "PositionWeighted takes a List"
        lengths_metadata = input_record.lengths.metadata
        max_length = lengths_metadata.categorical_limit if lengths_metadata is not None else None
        if max_length is None:
            max_length = get_categorical_limit(input_record)
            log.warning("PositionWeighted %s: the lengths have no categorical_limit; using the ids' (%s) "
                        "as the number of positions", self.name, max_length)
        self.shape = max_length
        self.pos_w = self.create_param(param_name="pos_w", shape=[self.shape], initializer=("ConstantFill",
                                                                                            {"value": 1.0}),
                                       optimizer=weight_optim)
        self.output_schema = schema.Struct(("position_weights", schema.Scalar(
            (np.float32, self.shape), self.get_next_blob_reference("pos_w_gather"))))
        self.tags.update({Tags.HANDLE_AS_SPARSE_LAYER})

    def get_memory_usage(self):
        return self.shape

    def add_ops(self, net):
        positions = net.LengthsRangeFill([self.input_record.lengths()],
                                         str(self.input_record.lengths()) + "_pos_w_seq")
        net.Gather([self.pos_w, positions], self.output_schema.position_weights.field_blobs())
