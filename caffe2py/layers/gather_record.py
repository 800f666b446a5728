"""caffe2.python.layers.gather_record: GatherRecord, the examples `indices` of a
record (Scalars, Structs and Lists, nested to any depth).

input: Struct(indices, record). output: a record of record's schema.
"""
from .. import core, schema
from .layers import ModelLayer


class GatherRecord(ModelLayer):

    def __init__(self, model, input_record, name="gather_record", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert "indices" in input_record, "GatherRecord needs an indices field"
        assert "record" in input_record, "GatherRecord needs a record field"
        self.output_schema = schema.NewRecord(model.net, input_record.record.clone_schema())
        self._indices = self.input_record.indices()

    def _gather_scalar(self, net, record, lengths_blob, output_record):
        if lengths_blob is None:
            net.Gather([record(), self._indices], output_record())
        else:
            net.LengthsGather([record(), lengths_blob, self._indices], output_record())

    def _gather_struct(self, net, record, lengths_blob, output_record):
        for name, field in record.get_children():
            self._dispatch(net, field, lengths_blob, output_record[name])

    def _gather_list(self, net, record, lengths_blob, output_record):
        self._gather_scalar(net, record.lengths, lengths_blob, output_record.lengths)
        if lengths_blob is None:
            lengths_blob = record.lengths()
        else:
            # the lengths of a nested list's items, per example: sum its lengths by
            # the outer lengths (LengthsSum takes floats)
            lengths_float = net.Cast(record.lengths(), net.NextScopedBlob("lengths_float"), to=core.DataType.FLOAT)
            summed = net.LengthsSum([lengths_float, lengths_blob], net.NextScopedBlob("lengths_blob_float"))
            lengths_blob = net.Cast(summed, net.NextScopedBlob("lengths_blob"), to=core.DataType.INT32)
        self._dispatch(net, record._items, lengths_blob, output_record._items)

    def _dispatch(self, net, record, lengths_blob, output_record):
        if isinstance(record, schema.Scalar):
            self._gather_scalar(net, record, lengths_blob, output_record)
        elif isinstance(record, schema.Struct):
            self._gather_struct(net, record, lengths_blob, output_record)
        elif isinstance(record, schema.List):
            self._gather_list(net, record, lengths_blob, output_record)
        else:
            raise NotImplementedError("GatherRecord: unsupported field %r" % (record,))

    def add_ops(self, net):
        self._dispatch(net, self.input_record.record, None, self.output_schema)
