"""caffe2.python.data_parallel_model_utils: helpers over a Parallelize'd model.

GetActivationBlobs(model): the blobs the first device's forward ops write that are
not parameters, in the order they are written (without the device prefix; the
gradient blobs, `*_grad`, left out). ShiftActivationDevices(model, activations,
shifts): model parallelism inside a device group; moves the forward ops that write
those activations, and the gradient ops that read their gradients, to device
shifts[device]."""
from . import core
from .errors import Caffe2Error


def _prefix(model, device):
    return "{}_{}/".format(model._device_prefix, device)


def GetActivationBlobs(model):
    if not getattr(model, "_devices", None):
        raise Caffe2Error("GetActivationBlobs: the model was not built by data_parallel_model.Parallelize")
    prefix = _prefix(model, model._devices[0])
    params = {str(p) for p in model.GetParams()}
    seen, activations = set(), []
    for op in model.net.Proto().op:
        if op.is_gradient_op:
            continue
        for out in op.output:
            if out.startswith(prefix) and out not in params and not out.endswith("_grad") and out not in seen:
                seen.add(out)
                activations.append(out[len(prefix):])
    return activations


def ShiftActivationDevices(model, activations, shifts):
    """shifts: {device: new device}; each op writing one of `activations` (forward) or
    reading its gradient (backward) on a device of `shifts` runs on the new device."""
    wanted = set(activations)
    for op in model.net.Proto().op:
        device = op.device_option.device_id
        if device not in shifts:
            continue
        prefix = _prefix(model, device)
        names = op.input if op.is_gradient_op else op.output
        for name in names:
            base = name[len(prefix):] if name.startswith(prefix) else None
            if base is not None and (base in wanted or (op.is_gradient_op and base.endswith("_grad")
                                                         and base[:-len("_grad")] in wanted)):
                op.device_option.CopyFrom(core.DeviceOption(op.device_option.device_type, shifts[device]))
                break
