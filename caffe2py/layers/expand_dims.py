"""caffe2.python.layers.expand_dims: ExpandDims, size-1 dims inserted into a Scalar
at `dims` (positions counted with the batch as dim 0)."""
from .. import schema
from .layers import ModelLayer


class ExpandDims(ModelLayer):

    def __init__(self, model, input_record, dims, name="expand_dims", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.dims = list(dims)
        assert self.dims == sorted(set(self.dims)), "dims must be sorted and unique, got %s" % (dims,)
        assert self.dims and self.dims[0] > 0, "dims must be non-empty, after the batch dim (> 0), got %s" % (dims,)
        assert isinstance(input_record, schema.Scalar), "ExpandDims takes a Scalar"
        shape = list(input_record.field_type().shape)
        for dim in self.dims:
            assert dim - 1 <= len(shape), "dim %d is beyond the input's %d dims" % (dim, len(shape) + 1)
            shape.insert(dim - 1, 1)
        self.output_schema = schema.Scalar((input_record.field_type().base, shape),
                                           self.get_next_blob_reference("output"))

    def add_ops(self, net):
        net.ExpandDims(self.input_record(), self.output_schema(), dims=self.dims)
