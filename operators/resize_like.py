"""ResizeLike: data reshaped to the shape of a second tensor (equal element
counts); Flatten's gradient uses it."""
from caffe2py.registry import OpSchema, TensorType, register_kernel, register_schema

register_schema(OpSchema(
    "ResizeLike", num_inputs=2, num_outputs=1,
    inference=lambda ctx, ins: [TensorType(ins[1].dims, ins[0].dtype)],
    inputs=("data", "shape_like"), outputs=("output",),
    doc="data with the shape of shape_like (both must hold the same number of elements)."))


@register_kernel("ResizeLike")
def resize_like(ctx):
    def run(data, like):
        if data.size != like.size:
            raise ctx.input_error(1, "has %d elements, data '%s' has %d; ResizeLike cannot change the count"
                                  % (like.size, ctx.inputs[0], data.size))
        return data.reshape(like.shape)
    return run
