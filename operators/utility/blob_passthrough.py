"""Caffe2's ops that pass blobs through unchanged: AliasWithName (Y is X, named for
graph tools), DataCouple (ties its first inputs to its outputs in place so the extra
inputs become dependencies) and EnforceFinite (fails the net on NaN or infinity)."""
import numpy as np

from caffe2py.registry import Arg, Cost, OpSchema, register_kernel, register_schema

from .._common import same_as_input

_NO_COST = lambda ctx, ins: Cost()  # noqa: E731


register_schema(OpSchema(
    "AliasWithName", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, inputs=("input",),
    outputs=("output",), args=(Arg("name", "string", ""), Arg("is_backward", "bool", False)),
    inference=same_as_input(0), cost=_NO_COST,
    doc="output is input (the same data); name and is_backward only label the alias."))


@register_kernel("AliasWithName")
def alias_with_name(ctx):
    def run(x):
        return x
    return run


register_schema(OpSchema(
    "DataCouple", num_inputs=(1, None), num_outputs=(1, None), enforce_inplace=True,
    inputs_outputs_check=lambda n_in, n_out: n_out <= n_in,
    inference=lambda ctx, ins: list(ins[:len(ctx.outputs)]), cost=_NO_COST,
    doc="Outputs i are inputs i, in place and unchanged; inputs past the outputs are only "
        "dependencies, so the op runs after whatever writes them."))


@register_kernel("DataCouple")
def data_couple(ctx):
    n_out = len(ctx.outputs)

    def run(*inputs):
        return tuple(inputs[:n_out])
    return run


register_schema(OpSchema(
    "EnforceFinite", num_inputs=1, num_outputs=0, inputs=("input",), cost=_NO_COST,
    doc="Fails (naming the blob) when the input holds a NaN or an infinity."))


@register_kernel("EnforceFinite")
def enforce_finite(ctx):
    def run(x):
        if x.dtype.kind in "fc" and x.size and not np.isfinite(x).all():
            first = int(np.flatnonzero(~np.isfinite(x))[0])
            raise ctx.input_error(0, "holds a non-finite value (%r at flat index %d)"
                                  % (x.reshape(-1)[first].item(), first))
    return run


register_schema(OpSchema(
    "AsyncNetBarrier", num_inputs=(1, None), num_outputs=(1, None), allow_inplace=True,
    inputs_outputs_check=lambda n_in, n_out: n_in == n_out,
    args=(Arg("cross_device", "bool", False),), inference=lambda ctx, ins: list(ins), cost=_NO_COST,
    doc="Outputs i are inputs i unchanged: a synchronisation point of an async net (the "
        "executor here already orders ops by their blobs)."))


@register_kernel("AsyncNetBarrier")
def async_net_barrier(ctx):
    def run(*inputs):
        return inputs[0] if len(inputs) == 1 else tuple(inputs)
    return run
