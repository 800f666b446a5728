"""CUDA kernels (device=CUDA) of the layout and copy ops: Concat, Transpose, Copy, and the
device copies CopyCPUToGPU, CopyGPUToCPU and EnsureCPUOutput (with their schemas)."""
import numpy as np

from caffe2py.registry import CPU, CUDA, OpSchema, register_kernel, register_schema, schema_for

from .. import _cuda_runtime
from .._cuda_runtime import _bits, _elementwise_launch, _padded, _prod, _ptr
from .._common import same_as_input


# --------------------------------------------------------------------------- layout ops

@register_kernel("Concat", device=CUDA)
def concat(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
    add_axis = ctx.bool("add_axis", False)
    axis_arg = (1 if ctx.string("order") == "NCHW" else 3) if ctx.has("order") and not ctx.has("axis") \
        else ctx.int("axis", 1)
    two = ctx.n_outputs == 2

    def run(*xs):
        first = xs[0]
        for k, x in enumerate(xs):
            rt.expect(k, x, (first.dtype,) if k else None)
        rank = first.ndim + (1 if add_axis else 0)
        if not -rank <= axis_arg < rank:
            raise ctx.input_error(0, "axis %d is out of range for %d-D output" % (axis_arg, rank))
        axis = axis_arg % rank
        for k, x in enumerate(xs[1:], 1):
            a, b = list(first.shape), list(x.shape)
            if not add_axis and len(a) == len(b):
                a.pop(axis)
                b.pop(axis)
            if a != b:
                raise ctx.input_error(k, "shape %s does not match input 0's %s for concatenation on axis %d"
                                      % (list(x.shape), list(first.shape), axis))
        sizes = [1 if add_axis else x.shape[axis] for x in xs]
        if add_axis:
            out_shape = tuple(first.shape[:axis]) + (len(xs),) + tuple(first.shape[axis:])
            inner = _prod(first.shape[axis:])
        else:
            out_shape = tuple(first.shape[:axis]) + (sum(sizes),) + tuple(first.shape[axis + 1:])
            inner = _prod(first.shape[axis + 1:])
        outer = _prod(first.shape[:axis])
        cols = [s * inner for s in sizes]
        out = rt.empty(out_shape, first.dtype)
        out_cols = sum(cols)
        fn = rt.fn("tensor_ops", "concat_" + _bits(rt, ctx, first), "Pqqqqq" + "P" * 8 + "q" * 8)
        begin = 0
        for lo in range(0, len(xs), 8):  # eight inputs per launch
            chunk = list(range(lo, min(lo + 8, len(xs))))
            chunk_cols = sum(cols[k] for k in chunk)
            if outer * chunk_cols:
                fn(_elementwise_launch(rt, outer * chunk_cols), _ptr(out), outer, out_cols, begin, chunk_cols,
                   len(chunk), *(_padded([_ptr(xs[k]) for k in chunk], 8) + _padded([cols[k] for k in chunk], 8)))
            begin += chunk_cols
        if not two:
            return out
        split = rt.adapter.tag(rt.allocator.to_device(np.asarray(sizes, np.int32), rt.device_id), rt.device_id)
        return out, split
    return run


@register_kernel("Transpose", device=CUDA)
def transpose(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake
    axes_arg = ctx.ints("axes", None) if ctx.has("axes") else None

    def run(x):
        rt.expect(0, x)
        rank = x.ndim
        axes = list(range(rank))[::-1] if not axes_arg else [a % rank if rank else a for a in axes_arg]
        if sorted(axes) != list(range(rank)):
            raise ctx.error("axes %s are not a permutation of %d dims" % (list(axes_arg), rank))
        out = rt.empty(tuple(x.shape[a] for a in axes), x.dtype)
        if x.size == 0:
            return out
        try:
            dims, strides = rt.launch.permuted_strides(list(x.shape), axes)
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        fn = rt.fn("tensor_ops", "transpose_" + _bits(rt, ctx, x), "PPq" + "q" * 13)
        fn(_elementwise_launch(rt, x.size), _ptr(x), _ptr(out), x.size,
           len(dims), *(_padded(dims, fill=1) + _padded(strides)))
        return out
    return run


# --------------------------------------------------------------------------- copies

def _copy_schema(name, outputs_device, doc, inputs_device=None):
    if schema_for(name) is None:
        register_schema(OpSchema(name, num_inputs=1, num_outputs=1, inference=same_as_input(0),
                                 inputs_can_cross_devices=True, outputs_device=outputs_device,
                                 inputs_device=inputs_device, doc=doc))


_copy_schema("CopyCPUToGPU", None, "Copy a CPU tensor to the op's CUDA device.", inputs_device=CPU)
_copy_schema("CopyGPUToCPU", CPU, "Copy a CUDA tensor to the host (the output lives on the CPU).")
_copy_schema("EnsureCPUOutput", CPU, "The input as a CPU tensor: copied from the GPU when it lives there.")


@register_kernel("CopyCPUToGPU", device=CUDA)
def copy_cpu_to_gpu(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

    def run(x):
        if not isinstance(x, np.ndarray):
            raise ctx.input_error(0, "expected a CPU tensor, got %s" % type(x).__name__)
        return rt.adapter.tag(rt.allocator.to_device(x, rt.device_id), rt.device_id)
    return run


@register_kernel("CopyGPUToCPU", device=CUDA)
def copy_gpu_to_cpu(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

    def run(x):
        rt.expect(0, x)
        return rt.allocator.to_host(x, rt.device_id)
    return run


def _ensure_cpu(ctx):
    def run(x):
        if isinstance(x, np.ndarray):
            return x.copy()
        from caffe2py import devices  # noqa: PLC0415
        return devices.to_host(x)
    return run


register_kernel("EnsureCPUOutput")(_ensure_cpu)
register_kernel("EnsureCPUOutput", device=CUDA)(_ensure_cpu)


@register_kernel("Copy", device=CUDA)
def copy_on_device(ctx):
    rt = _cuda_runtime._runtime(ctx)  # looked up on the module: tests swap it for a fake

    def run(x):
        rt.expect(0, x)
        return rt.allocator.copy(rt.empty(x.shape, x.dtype), x, rt.device_id)
    return run
