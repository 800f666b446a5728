"""caffe2.python.layers.merge_id_lists: MergeIdLists, several IdLists merged into
one per example (MergeIdLists op); its categorical_limit is the largest of the
inputs'."""
import numpy as np

from .. import schema
from .layers import IdList, ModelLayer, get_categorical_limit


class MergeIdLists(ModelLayer):

    def __init__(self, model, input_record, name="merged"):
        super().__init__(model, name, input_record)
        records = [field for _, field in input_record.get_children()]
        assert all(schema.equal_schemas(r, IdList) for r in records), "inputs to MergeIdLists must all be IdLists"
        assert all(r.items.metadata is not None for r in records), "MergeIdLists needs the inputs' metadata"
        merge_dim = max(get_categorical_limit(r) for r in records)
        assert merge_dim is not None, "MergeIdLists needs the inputs' categorical_limit"
        self.output_schema = schema.NewRecord(model.net, schema.List(schema.Scalar(
            np.int64, blob=model.net.NextBlob(name), metadata=schema.Metadata(categorical_limit=merge_dim))))

    def add_ops(self, net):
        return net.MergeIdLists(self.input_record.field_blobs(), self.output_schema.field_blobs())
