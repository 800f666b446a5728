"""caffe2.python.layers.bucket_weighted: BucketWeighted, a trained weight per bucket
of the values (scores) of an IdScoreList (a List of Struct with a `values` field),
like PositionWeighted but keyed by value instead of position.

Buckets: Bucketize by bucket_boundaries (len + 1 buckets), else the values cast to
int; with hash_buckets they are hashed into [0, number of buckets). The number of
buckets is len(bucket_boundaries) + 1, max_score, or the values' categorical_limit.
output: Struct(bucket_weights).
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer, get_categorical_limit
from .tags import Tags


class BucketWeighted(ModelLayer):

    def __init__(self, model, input_record, max_score=0, bucket_boundaries=None, hash_buckets=True,
                 weight_optim=None, name="bucket_weighted"):
        super().__init__(model, name, input_record)
        assert isinstance(input_record, schema.List), "BucketWeighted takes a List"
        self.bucket_boundaries = bucket_boundaries
        self.hash_buckets = hash_buckets
        if bucket_boundaries is not None:
            self.shape = len(bucket_boundaries) + 1
        elif max_score > 0:
            self.shape = max_score
        else:
            self.shape = get_categorical_limit(input_record)
        self.bucket_w = self.create_param(param_name="bucket_w", shape=[self.shape],
                                          initializer=("ConstantFill", {"value": 1.0}), optimizer=weight_optim)
        self.output_schema = schema.Struct(("bucket_weights", schema.Scalar(
            (np.float32, self.shape), self.get_next_blob_reference("bucket_w_gather"))))
        self.tags.update({Tags.HANDLE_AS_SPARSE_LAYER})

    def get_memory_usage(self):
        return self.shape

    def add_ops(self, net):
        values = self.input_record.values()
        if self.bucket_boundaries is not None:
            buckets = net.Bucketize(values, net.NextScopedBlob("buckets_int"), boundaries=self.bucket_boundaries)
        else:
            buckets = net.Cast(values, net.NextScopedBlob("buckets_int"), to=core.DataType.INT32)
        if self.hash_buckets:
            buckets = net.IndexHash(buckets, net.NextScopedBlob("hashed_buckets_int"), seed=0, modulo=self.shape)
        net.Gather([self.bucket_w, buckets], self.output_schema.bucket_weights.field_blobs())
