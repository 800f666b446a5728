"""caffe2.python.layers.concat: Concat, the Scalars of a Struct joined along `axis`
(1: the first dim after the batch). add_axis=1 stacks them along a new axis."""
import numpy as np

from .. import schema
from .layers import ModelLayer


class Concat(ModelLayer):

    def __init__(self, model, input_record, axis=1, add_axis=0, name="concat", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.axis = axis
        self.add_axis = add_axis
        assert not (axis == 0 and add_axis == 1), "concat along the batch axis cannot add an axis"
        assert isinstance(input_record, schema.Struct), "Concat takes a Struct"
        shapes = []
        for field_name, field in input_record.fields.items():
            assert isinstance(field, schema.Scalar), "Concat: field %s is not a Scalar" % field_name
            shape = list(field.field_type().shape)
            if add_axis:
                shape.insert(axis - 1, 1)
            assert len(shape) >= axis, "Concat along axis %d: field %s has shape %s" % (axis, field_name, shape)
            shapes.append(shape)
        if axis == 0:
            self.output_schema = schema.from_blob_list(input_record[0], [self.get_next_blob_reference("output")])
            return
        total = 0
        for shape in shapes:
            total += shape[axis - 1]
            shape[axis - 1] = 0
            assert shape == shapes[0], "Concat: the fields' shapes differ off axis %d: %s" % (axis, shapes)
        output_dims = shapes[0]
        output_dims[axis - 1] = total
        self.output_schema = schema.Scalar((np.float32, output_dims), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        output = self.output_schema.field_blobs()[0]
        net.Concat(self.input_record.field_blobs(), [output, str(output) + "_concat_dims"], axis=self.axis,
                   add_axis=self.add_axis)
