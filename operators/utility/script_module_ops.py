"""ScriptModule and ScriptModuleLoad: TorchScript modules in blobs (caffe2py/script_module.py)."""
import numpy as np

from caffe2py import script_module as S
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, register_kernel, register_schema
from caffe2py.serialization import register_deserializer, register_serializer

register_schema(OpSchema(
    "ScriptModule", num_inputs=(1, None), num_outputs=(0, None), inputs=("script_module",),
    args=(Arg("method", "string", "forward", doc="the module's method to call"),
          Arg("pass_inputs_as_tensor_list", "bool", False,
              doc="call the method with one list of the input tensors instead of one argument each")),
    inference=lambda ctx, ins: [UNKNOWN] * ctx.n_outputs,
    doc="Calls a method of the TorchScript module in input 0 on the other inputs (as torch tensors); "
        "a tuple or list result fills the outputs in order, a single tensor the one output."))
register_schema(OpSchema(
    "ScriptModuleLoad", num_inputs=0, num_outputs=1, outputs=("script_module",),
    args=(Arg("serialized_binary", "string", None, doc="the bytes torch.jit.save wrote"),),
    inference=lambda ctx, ins: [UNKNOWN],
    doc="A TorchScript module from torch.jit.save's bytes."))


def _as_array(ctx, index, value):
    torch = S.torch_module()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    if isinstance(value, (bool, int, float)):
        return np.asarray(value)
    raise ctx.error("method '%s' returned a %s as output %d; outputs must be tensors"
                    % (ctx.string("method", "forward"), type(value).__name__, index))


@register_kernel("ScriptModule")
def script_module(ctx):
    method_name = ctx.string("method", "forward")
    as_list = ctx.bool("pass_inputs_as_tensor_list")

    def run(module, *inputs):
        if not S.is_script_module(module):
            raise ctx.input_error(0, "must hold a TorchScript module (FeedBlob of a torch.jit.ScriptModule "
                                  "or ScriptModuleLoad), got %s" % type(module).__name__)
        torch = S.torch_module()
        method = getattr(module, method_name, None)
        if method is None:
            raise ctx.input_error(0, "the module has no method '%s'" % method_name)
        tensors = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        try:
            with torch.no_grad():
                result = method(tensors) if as_list else method(*tensors)
        except Exception as exc:
            raise ctx.error("method '%s' failed: %s" % (method_name, str(exc).splitlines()[0] if str(exc)
                                                        else type(exc).__name__)) from None
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != ctx.n_outputs:
            raise ctx.error("method '%s' returned %d value(s) for %d output(s)"
                            % (method_name, len(results), ctx.n_outputs))
        outputs = tuple(_as_array(ctx, k, v) for k, v in enumerate(results))
        return outputs[0] if len(outputs) == 1 else outputs
    return run


@register_kernel("ScriptModuleLoad")
def script_module_load(ctx):
    # the raw bytes (a TorchScript archive is binary; string arguments are decoded as text)
    data = next((arg.s for arg in ctx.op_def.arg if arg.name == "serialized_binary"), b"")

    def run():
        if not data:
            raise ctx.error("argument 'serialized_binary' (the bytes torch.jit.save wrote) is required")
        return S.from_bytes(data, "argument 'serialized_binary'")
    return run


def _serialize(module, name):
    return caffe2_pb2.BlobProto(name=name, type=S.BLOB_TYPE, content=S.to_bytes(module))


def _deserialize(proto):
    from caffe2py import model_trust
    if model_trust.active() is not None:
        raise model_trust.ModelTrustError(
            "blob '%s' holds a TorchScript module, which is code, and a model file may not carry code; %s"
            % (proto.name, model_trust.HOW_TO_TRUST))
    return S.from_bytes(proto.content, "blob '%s'" % proto.name)


register_serializer(S.ScriptModuleBlob, _serialize)
register_deserializer(S.BLOB_TYPE, _deserialize)
