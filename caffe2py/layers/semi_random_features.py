"""caffe2.python.layers.semi_random_features: SemiRandomFeatures (Kar & Karnick's
semi-random features): the arc-cosine random features of `random` times a
trained linear map of `full`.

input: a Scalar (both parts) or Struct(full, random). output: Struct(full,
random): random = ArcCosine features (fixed random W, b; scale_random), full =
random * (full . learned_w^T + learned_b) (trained; scale_learned).
"""
import numpy as np

from .. import schema
from .arc_cosine_feature_map import ArcCosineFeatureMap


class SemiRandomFeatures(ArcCosineFeatureMap):

    def __init__(self, model, input_record, output_dims, s=1, scale_random=1.0, scale_learned=1.0,
                 weight_init_random=None, bias_init_random=None, weight_init_learned=None,
                 bias_init_learned=None, weight_optim=None, bias_optim=None, set_weight_as_global_constant=False,
                 name="semi_random_features", **kwargs):
        if isinstance(input_record, schema.Struct):
            schema.is_schema_subset(schema.Struct(("full", schema.Scalar()), ("random", schema.Scalar())),
                                    input_record)
            self.input_record_full = input_record.full
            self.input_record_random = input_record.random
        elif isinstance(input_record, schema.Scalar):
            self.input_record_full = input_record
            self.input_record_random = input_record
        super().__init__(model, self.input_record_full, output_dims, s=s, scale=scale_random,
                         weight_init=weight_init_random, bias_init=bias_init_random, weight_optim=None,
                         bias_optim=None, set_weight_as_global_constant=set_weight_as_global_constant,
                         initialize_output_schema=False, name=name, **kwargs)
        self.output_schema = schema.Struct(
            ("full", schema.Scalar((np.float32, output_dims), model.net.NextScopedBlob(name + "_full_output"))),
            ("random", schema.Scalar((np.float32, output_dims), model.net.NextScopedBlob(name + "_random_output"))))
        assert scale_learned > 0.0, "scale_learned must be > 0, got %s" % scale_learned
        self.stddev_learned = scale_learned * np.sqrt(1.0 / self.input_dims)
        weight_init_learned = weight_init_learned or ("GaussianFill", {"mean": 0.0, "std": self.stddev_learned})
        bias_init_learned = bias_init_learned or ("UniformFill", {"min": -self.stddev_learned,
                                                                  "max": self.stddev_learned})
        self.learned_w, self.learned_b = self._initialize_params(
            "learned_w", "learned_b", w_init=weight_init_learned, b_init=bias_init_learned,
            w_optim=weight_optim, b_optim=bias_optim)

    def add_ops(self, net):
        learned = net.FC(self.input_record_full.field_blobs() + [self.learned_w, self.learned_b],
                         net.NextScopedBlob("learned_features"))
        random = net.FC(self.input_record_random.field_blobs() + [self.random_w, self.random_b],
                        net.NextScopedBlob("random_features"))
        random_output = self._heaviside_with_power(net, random, self.output_schema.random.field_blobs(), self.s)
        net.Mul([random_output, learned], self.output_schema.full.field_blobs())
