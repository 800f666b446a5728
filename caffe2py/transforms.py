"""Caffe2's net transforms (caffe2/transforms), as workspace.ApplyTransform and
ApplyTransformIfFaster use them: a registry of named NetDef -> NetDef rewrites.

caffe2py registers the engine rewrites Caffe2's CPU build has:
- ConvToNNPack: every Conv op placed on the CPU runs with engine NNPACK (caffe2py
  runs an engine it has no kernel for with the default kernel, as Caffe2 falls back).
An unknown name raises a RuntimeError (Caffe2's CAFFE_ENFORCE on the registry)."""
import time

from .proto import caffe2_pb2

_TRANSFORMS = {}


def register_transform(name):
    def wrap(rewrite):
        _TRANSFORMS[name] = rewrite
        return rewrite
    return wrap


def transform_exists(name):
    return name in _TRANSFORMS


def apply_transform(name, net_def):
    """A rewritten copy of net_def (the input is left as it is)."""
    if name not in _TRANSFORMS:
        raise RuntimeError("Transform '%s' is not registered (known: %s)" % (name, sorted(_TRANSFORMS)))
    copy = caffe2_pb2.NetDef()
    copy.CopyFrom(net_def)
    _TRANSFORMS[name](copy)
    return copy


def _on_cpu(op):
    return not op.HasField("device_option") or op.device_option.device_type == caffe2_pb2.CPU


@register_transform("ConvToNNPack")
def _conv_to_nnpack(net_def):
    for op in net_def.op:
        if op.type == "Conv" and _on_cpu(op):
            op.engine = "NNPACK"


def _mean_run_seconds(workspace, net_def, warmup_runs, main_runs):
    name = "_transform_timing_" + (net_def.name or "net")
    timed = caffe2_pb2.NetDef()
    timed.CopyFrom(net_def)
    timed.name = name
    workspace.create_net(timed, overwrite=True)
    net = workspace.get_net(name)
    for _ in range(warmup_runs):
        net.run()
    start = time.perf_counter()
    for _ in range(main_runs):
        net.run()
    seconds = (time.perf_counter() - start) / max(main_runs, 1)
    workspace.nets.pop(name, None)
    return seconds


def apply_transform_if_faster(workspace, name, net_def, init_def, warmup_runs, main_runs, improvement_threshold):
    """The transformed net when it runs at least improvement_threshold times faster
    than net_def (both timed in a scratch child of `workspace` after init_def ran
    there), else net_def itself."""
    transformed = apply_transform(name, net_def)
    scratch = workspace.child("transform_timing")
    scratch.run_net_once(init_def)
    before = _mean_run_seconds(scratch, net_def, warmup_runs, main_runs)
    after = _mean_run_seconds(scratch, transformed, warmup_runs, main_runs)
    return transformed if after * improvement_threshold <= before else net_def
