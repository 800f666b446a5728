"""caffe2.python.layers.split: Split, a Scalar cut along `axis` (1: the first dim
after the batch) into num_splits equal parts, or into parts of the sizes `split`.
output: a Tuple of the parts."""
from .. import schema
from .layers import ModelLayer


class Split(ModelLayer):

    def __init__(self, model, input_record, num_splits=1, axis=1, name="split", split=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.axis = axis
        inner_axis = axis - 1            # the batch dim is not in the field's shape
        assert inner_axis >= 0, "Split cannot cut the batch axis"
        assert isinstance(input_record, schema.Scalar), "Split takes a Scalar"
        input_shape = input_record.field_type().shape
        assert len(input_shape) > inner_axis, "Split along axis %d of inner shape %s" % (axis, input_shape)
        if split is None:
            assert input_shape[inner_axis] % num_splits == 0, \
                "%d does not split into %d equal parts" % (input_shape[inner_axis], num_splits)
            sizes = [input_shape[inner_axis] // num_splits] * num_splits
        else:
            sizes = list(split)
            assert input_shape[inner_axis] == sum(sizes), "split %s does not add up to %d" % (
                sizes, input_shape[inner_axis])
        self.split = split
        base = input_record.field_type().base
        parts = []
        for index, size in enumerate(sizes):
            shape = list(input_shape)
            shape[inner_axis] = size
            parts.append(schema.Scalar((base, shape), self.get_next_blob_reference("output_%d" % index)))
        self.output_schema = schema.Tuple(*parts)

    def add_ops(self, net):
        kwargs = {"axis": self.axis}
        if self.split is not None:
            kwargs["split"] = list(self.split)
        net.Split(self.input_record.field_blobs(), self.output_schema.field_blobs(), **kwargs)
