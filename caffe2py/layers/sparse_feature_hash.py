"""caffe2.python.layers.sparse_feature_hash: SparseFeatureHash, the ids of an IdList
or IdScoreList hashed (IndexHash, `seed`) or taken modulo (use_hashing=False)
into [0, modulo). modulo defaults to the feature's desired_hash_size, else its
categorical_limit; the output ids' categorical_limit is modulo.
"""
from .. import schema, scope
from .layers import IdList, IdScoreList, ModelLayer
from .tags import Tags


class SparseFeatureHash(ModelLayer):

    def __init__(self, model, input_record, seed=0, modulo=None, use_hashing=True, name="sparse_feature_hash",
                 **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.seed = seed
        self.use_hashing = use_hashing
        if schema.equal_schemas(input_record, IdList):
            ids, template = input_record.items, IdList
        elif schema.equal_schemas(input_record, IdScoreList):
            ids, template = input_record.keys, IdScoreList
        else:
            raise AssertionError("SparseFeatureHash takes an IdList or IdScoreList, got %r" % (input_record,))
        self.modulo = modulo or self._hash_size(ids.metadata)
        assert self.modulo and self.modulo > 0, "SparseFeatureHash needs modulo > 0"
        metadata = schema.Metadata(categorical_limit=self.modulo,
                                   feature_specs=ids.metadata.feature_specs if ids.metadata else None,
                                   expected_value=ids.metadata.expected_value if ids.metadata else None)
        with scope.NameScope(name):
            self.output_schema = schema.NewRecord(model.net, template)
        hashed = self.output_schema.items if template is IdList else self.output_schema.keys
        hashed.set_metadata(metadata)
        # IndexHash has no CUDA kernel in Caffe2
        self.tags.update([Tags.CPU_ONLY])

    @staticmethod
    def _hash_size(metadata):
        assert metadata is not None, "SparseFeatureHash needs modulo or the ids' metadata"
        if metadata.feature_specs and metadata.feature_specs.desired_hash_size:
            return metadata.feature_specs.desired_hash_size
        assert metadata.categorical_limit is not None, "SparseFeatureHash needs modulo or a categorical_limit"
        return metadata.categorical_limit

    def add_ops(self, net):
        net.Copy(self.input_record.lengths(), self.output_schema.lengths())
        if schema.equal_schemas(self.output_schema, IdList):
            source, target = self.input_record.items(), self.output_schema.items()
        else:
            source, target = self.input_record.keys(), self.output_schema.keys()
            net.Copy(self.input_record.values(), self.output_schema.values())
        if self.use_hashing:
            net.IndexHash(source, target, seed=self.seed, modulo=self.modulo)
        else:
            net.Mod(source, target, divisor=self.modulo, sign_follow_divisor=True)

