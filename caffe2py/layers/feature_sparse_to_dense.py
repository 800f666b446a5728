"""caffe2.python.layers.feature_sparse_to_dense: FeatureSparseToDense, sparse
feature maps made dense by a list of feature ids.

input_specs: [(field, FeatureSpec(feature_type, feature_names, feature_ids))]. The
input's `field` is a Map from feature id to the feature's value; per feature_type
the output's `field` is:
- FLOAT (Map id -> float): a float32 (len(ids),) vector per example, 0 where the
  example lacks the feature;
- ID_LIST (Map id -> List of int64), EMBEDDING (Map id -> List of float):
  Struct(ranges: (len(ids), 2) [offset, length] into values per example, values);
- ID_SCORE_LIST (Map id -> Map int64 -> float): Struct(ranges, ids, scores).
Each output scalar carries the FeatureSpec as metadata. GENERIC_FEATURE needs
Caffe2's ParseGeneric op, which caffe2py does not have.
"""
from collections import defaultdict

import numpy as np

from .. import schema
from .layers import AccessedFeatures, ModelLayer


class FeatureSparseToDense(ModelLayer):

    def __init__(self, model, input_record, input_specs, name="feature_sparse_to_dense", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.input_specs = input_specs
        outputs = []
        for field, specs in input_specs:
            assert len(specs.feature_names) == len(specs.feature_ids), \
                "feature %s: %d names for %d ids" % (field, len(specs.feature_names), len(specs.feature_ids))
            outputs.append((field, self._output_for(field, specs)))
        self.output_schema = schema.Struct(*outputs)
        for field, specs in input_specs:
            schema.attach_metadata_to_scalars(self.output_schema[field], schema.Metadata(feature_specs=specs))
        self.zero = model.global_constants["ZERO"]
        self.zero_range = model.global_constants["ZERO_RANGE"]

    def _output_for(self, field, specs):
        count = len(specs.feature_ids)

        def blob(suffix):
            return self.get_next_blob_reference(field + suffix)

        ranges = ("ranges", schema.Scalar((np.int32, (count, 2)), blob("_ranges")))
        kind = specs.feature_type
        if kind == "FLOAT":
            return schema.Scalar((np.float32, (count,)), blob("_output"))
        if kind == "ID_LIST":
            return schema.Struct(ranges, ("values", schema.Scalar(np.int64, blob("_values"))))
        if kind == "ID_SCORE_LIST":
            return schema.Struct(ranges, ("ids", schema.Scalar(np.int64, blob("_ids"))),
                                 ("scores", schema.Scalar(np.float32, blob("_scores"))))
        if kind == "EMBEDDING":
            return schema.Struct(ranges, ("values", schema.Scalar(np.float32, blob("_values"))))
        raise TypeError("FeatureSparseToDense: unsupported feature type %s of %s" % (kind, field))

    def _dense_ranges(self, net, feature, specs, output, name):
        """Per example, each listed feature's [offset, length] in the values (zeros
        where it is missing)."""
        ranges = net.LengthsToRanges(feature.values.lengths(), net.NextScopedBlob(name))
        net.SparseToDenseMask([feature.keys(), ranges, self.zero_range, feature.lengths()], output.ranges(),
                              mask=specs.feature_ids)

    def add_ops(self, net):
        for field, specs in self.input_specs:
            feature, output = self.input_record[field], self.output_schema[field]
            kind = specs.feature_type
            if kind == "FLOAT":
                net.SparseToDenseMask([feature.keys(), feature.values(), self.zero, feature.lengths()],
                                      [output()], mask=specs.feature_ids)
            elif kind in ("ID_LIST", "EMBEDDING"):
                self._dense_ranges(net, feature, specs, output, field + "_value_ranges")
                # a new blob per output, as every SparseToDense output is
                net.Alias(feature.values.items(), output.values())
            elif kind == "ID_SCORE_LIST":
                self._dense_ranges(net, feature, specs, output, field + "_value_ranges")
                net.Alias(feature.values.keys(), output.ids())
                net.Alias(feature.values.values(), output.scores())

    def get_metadata(self):
        metadata = []
        for field, specs in self.input_specs:
            info = {"type": specs.feature_type, "names": specs.feature_names, "ids": specs.feature_ids}
            if specs.feature_type == "FLOAT":
                info["cardinality"] = 1
            output = self.output_schema[field]
            metadata.append((info, output.field_blobs(), output.field_types()))
        return metadata

    def get_accessed_features(self):
        accessed = defaultdict(list)
        for field, specs in self.input_specs:
            accessed[field].append(AccessedFeatures(specs.feature_type, set(specs.feature_ids)))
        return accessed


