"""caffe2.python.layers.sparse_lookup: SparseLookup, embedding lookup with pooling.

input: an IdList (List of int64 ids) or an IdScoreList (Map id -> float score)
whose ids carry metadata.categorical_limit (the table's row count). The table w
(categorical_limit x inner_shape) starts uniform in +-sqrt(1 / rows).
reducer, for an IdList: Sum, Mean (SparseLengthsSum/Mean), WeightedSum /
WeightedMean (the same as Sum / Mean: every id weighs 1), Sqrt (sum weighted by
1/sqrt(length)), Max, LogSumExp, LogMeanExp (SortedSegmentRange*), None (the
gathered rows, one per id). For an IdScoreList: Sum, Mean (scores ignored),
WeightedSum, WeightedMean (score-weighted sum of rows; divided by the list length
for WeightedMean), PositionWeighted /
RecencyWeighted (weighted sum, with gradient on the weights), None.
"""
import functools
import math
import operator

import numpy as np

from .. import schema
from .layers import IdList, IdScoreList, LayerPsParam, ModelLayer, get_categorical_limit, get_key


def _is_id_list(record):
    return schema.equal_schemas(record, IdList)


def _is_id_score_list(record):
    return schema.equal_schemas(record, IdScoreList, check_field_types=False)


class SparseLookup(ModelLayer):
    _id_list_supported_reducers = ["LogMeanExp", "LogSumExp", "Max", "Mean", "Sum", "WeightedSum",
                                   "WeightedMean", "Sqrt", "None"]
    _id_score_list_supported_reducers = ["PositionWeighted", "RecencyWeighted", "Mean", "Sum", "WeightedSum",
                                         "WeightedMean", "None"]

    def __init__(self, model, input_record, inner_shape, reducer, weight_init=None, weight_optim=None,
                 name="sparse_lookup", regularizer=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if isinstance(inner_shape, int):
            inner_shape = [inner_shape]
        assert isinstance(inner_shape, (list, tuple)), \
            "inner_shape must be a list or tuple, got %s" % type(inner_shape).__name__
        if reducer in ("PositionWeighted", "RecencyWeighted"):
            assert _is_id_score_list(self.input_record), (
                "%s supports only IdScoreList input, got %r; the PositionWeighted layer turns an IdList "
                "into one" % (reducer, self.input_record))
            self.external_weights = input_record.values()
        if _is_id_list(self.input_record):
            assert reducer in self._id_list_supported_reducers, "unsupported reducer %s for an IdList" % reducer
            sparse_key = self.input_record.items()
        elif _is_id_score_list(self.input_record):
            assert reducer in self._id_score_list_supported_reducers, \
                "unsupported reducer %s for an IdScoreList" % reducer
            sparse_key = self.input_record.keys()
        else:
            raise NotImplementedError("SparseLookup takes an IdList or IdScoreList, got %r" % (input_record,))
        self.reducer = reducer
        input_dim = get_categorical_limit(input_record)
        assert input_dim is not None and input_dim > 0, \
            "%s should have categorical limit > 0, got %s" % (get_key(input_record)(), input_dim)
        self.input_dim = input_dim
        self.shape = [input_dim] + list(inner_shape)
        scale = math.sqrt(1.0 / input_dim)
        self.weight_init = weight_init or ("UniformFill", {"min": -scale, "max": scale})
        lengths_metadata = self.input_record.lengths.metadata
        avg_length = lengths_metadata.expected_value if lengths_metadata else None
        self.w = self.create_param(param_name="w", shape=self.shape, initializer=self.weight_init,
                                   optimizer=weight_optim,
                                   ps_param=LayerPsParam(sparse_key=sparse_key, average_length=avg_length),
                                   regularizer=regularizer)
        # the row-wise quantization's scale and bias (used by quantized predictors)
        self.scale_bias = self.create_param(param_name="scale_bias", shape=[],
                                            initializer=("ConstantFill", {"value": 0.0}), optimizer=model.NoOptim)
        self.output_schema = schema.Scalar((np.float32, inner_shape), self.get_next_blob_reference("output"))

    def get_memory_usage(self):
        return functools.reduce(operator.mul, self.shape) * 4

    def get_fp16_compatible_parameters(self):
        return [self.w]

    def _weighted_sum(self, net, ids, weights, grad_on_weights=0):
        net.SparseLengthsWeightedSum([self.w, weights, ids, self.input_record.lengths()],
                                     self.output_schema.field_blobs(), grad_on_weights=grad_on_weights)

    def _add_id_list_ops(self, net):
        ids, lengths = self.input_record.items(), self.input_record.lengths()
        reducer = {"WeightedSum": "Sum", "WeightedMean": "Mean"}.get(self.reducer, self.reducer)
        if reducer in ("Sum", "Mean"):
            net.__getattr__("SparseLengths" + reducer)([self.w, ids, lengths], self.output_schema.field_blobs())
        elif reducer == "Sqrt":
            weights = net.LengthsToWeights([lengths], [net.NextScopedBlob("lengths_sqrt")], power=0.5)
            self._weighted_sum(net, ids, weights)
        elif reducer == "None":
            net.Gather([self.w, ids], self.output_schema.field_blobs())
        else:
            rows = net.Gather([self.w, ids], net.NextScopedBlob("table_rows"))
            segment_ids = net.LengthsToSegmentIds(lengths, net.NextScopedBlob(str(lengths) + "_sid"))
            net.__getattr__("SortedSegmentRange" + reducer)([rows, segment_ids], self.output_schema.field_blobs())

    def _add_id_score_list_ops(self, net):
        ids, lengths = self.input_record.keys(), self.input_record.lengths()
        if self.reducer == "WeightedSum":
            self._weighted_sum(net, ids, self.input_record.values())
        elif self.reducer == "WeightedMean":
            # each score divided by its list's length, then the weighted sum
            inverse = net.LengthsToWeights([lengths], [net.NextScopedBlob("inverse_lengths")], power=1.0)
            weights = net.Mul([self.input_record.values(), inverse], net.NextScopedBlob("mean_weights"))
            self._weighted_sum(net, ids, weights)
        elif self.reducer in ("Sum", "Mean"):
            net.__getattr__("SparseLengths" + self.reducer)([self.w, ids, lengths],
                                                             self.output_schema.field_blobs())
        elif self.reducer in ("PositionWeighted", "RecencyWeighted"):
            self._weighted_sum(net, ids, self.external_weights, grad_on_weights=1)
        else:   # None
            net.Gather([self.w, ids], self.output_schema.field_blobs())

    def add_ops(self, net):
        if _is_id_list(self.input_record):
            self._add_id_list_ops(net)
        else:
            self._add_id_score_list_ops(net)
