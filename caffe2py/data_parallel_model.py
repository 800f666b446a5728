"""caffe2.python.data_parallel_model: synchronous data-parallel training on one host
and across processes and hosts (rendezvous=, caffe2py/data_parallel_shards.py).

`Parallelize(model, input_builder_fun, forward_pass_builder_fun, optimizer_builder_fun=...,
devices=[0, 1], cpu_device=True)` builds one copy of the model per device, each under
the name scope `cpu_{i}/` (or `gpu_{i}/`) and that device's DeviceScope, with the loss
scaled by 1/len(devices). After the backward pass every gradient is summed across the
devices onto the first one and copied back to the others (sparse gradients: their
indices and values are concatenated across devices), so each device applies the same
update; param_init_net ends by copying device 0's parameters to the other devices.

With rendezvous=dict(kv_handler=..., shard_id=..., num_shards=..., engine="GLOO", ...)
the losses are scaled by 1 / (devices * shards), each dense gradient summed on device 0
is all-reduced over the shards (Gloo) before the local copy-back, sparse gradients are
gathered from every shard (AllgatherRows), param_init_net broadcasts shard 0's
parameters, optimizer state and iteration counters, and Synchronize is a barrier over
the shards. combine_spatial_bn normalises with the statistics of every device's (and
shard's) batch. BMUF, iDeep and more than one CUDA device raise a Caffe2Error saying
so. shared_model=True (CPU devices) keeps one copy of the parameters, device 0's, that
every device reads. The memory options (optimize_gradient_memory,
dynamic_memory_management, blobs_to_keep) and use_nccl change only how Caffe2
allocates or communicates, never the numbers: they are accepted and the nets are
built the plain way.
"""
import copy
import logging
import numbers
import os
from collections import OrderedDict

from . import core, model_helper, scope, workspace
from . import data_parallel_shards as shards
from .errors import Caffe2Error
from .gradients import GradientSlice
from .proto import caffe2_pb2

log = logging.getLogger("caffe2py")

_DEFAULT_TIMEOUT_SEC = 30
_DEFAULT_BARRIER_NET_TIMEOUT_SEC = 300


def Parallelize_GPU(*args, **kwargs):
    kwargs["cpu_device"] = False
    Parallelize(*args, **kwargs)


def Parallelize_CPU(*args, **kwargs):
    kwargs["cpu_device"] = True
    Parallelize(*args, **kwargs)


def Parallelize_iDeep(*args, **kwargs):  # noqa: ARG001
    raise Caffe2Error("data_parallel_model.Parallelize_iDeep: caffe2py has no IDEEP device; "
                      "use Parallelize_CPU (cpu_device=True)")


def Parallelize_BMUF(*args, **kwargs):  # noqa: ARG001
    raise Caffe2Error("data_parallel_model.Parallelize_BMUF (block-wise model-update filtering) is not "
                      "provided by caffe2py; use Parallelize for synchronous SGD")


Parallelize_GPU_BMUF = Parallelize_CPU_BMUF = Parallelize_BMUF


def _check_options(model, devices, rendezvous, cpu_device, ideep, shared_model, combine_spatial_bn,
                   param_update_builder_fun, optimizer_builder_fun):
    """The Caffe2Error for what caffe2py cannot do or what Caffe2 refuses, before
    anything is added to the model."""
    if not isinstance(model, model_helper.ModelHelper):
        raise Caffe2Error("Parallelize: the model must be a ModelHelper (or CNNModelHelper), got %s"
                          % type(model).__name__)
    current = scope.CurrentDeviceScope()
    if current is not None and current.device_type != caffe2_pb2.CPU:
        raise Caffe2Error("Parallelize must be called without a device scope, device scope was: %s"
                          % str(current).replace("\n", " "))
    if ideep:
        Parallelize_iDeep()
    if shared_model and not cpu_device:
        raise Caffe2Error("Parallelize: shared_model=True is only supported on CPU devices (as in Caffe2)")
    if param_update_builder_fun is not None and optimizer_builder_fun is not None:
        raise Caffe2Error("Parallelize: give only one of param_update_builder_fun, optimizer_builder_fun")
    if not list(devices):
        raise Caffe2Error("Parallelize: the device list is empty%s" % (
            "" if cpu_device else " (no CUDA device was found; pass cpu_device=True to train on CPU devices)"))
    if len(set(devices)) != len(list(devices)):
        raise Caffe2Error("Parallelize: devices must be distinct, got %s" % (list(devices),))
    if any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 0 for d in devices):
        raise Caffe2Error("Parallelize: devices must be non-negative ints, got %s" % (list(devices),))
    if not cpu_device:
        available = workspace.NumCudaDevices()
        if available == 0:
            raise Caffe2Error("Parallelize: GPU devices %s were asked for but caffe2py has no CUDA device "
                              "(PyCUDA missing or no GPU found; see docs/cuda.md); pass cpu_device=True "
                              "(or call Parallelize_CPU) to train on CPU devices" % (list(devices),))
        if max(devices) >= available:
            raise Caffe2Error("Parallelize: GPU devices %s were asked for but only %d CUDA device(s) exist"
                              % (list(devices), available))
        if len(devices) > 1:
            raise Caffe2Error("Parallelize: more than one CUDA device is not provided by caffe2py (its "
                              "executor does not read blobs on a peer GPU); use one GPU or CPU devices")


def Parallelize(model_helper_obj, input_builder_fun, forward_pass_builder_fun, param_update_builder_fun=None,
                optimizer_builder_fun=None, post_sync_builder_fun=None, pre_grad_net_transformer_fun=None,
                net_transformer_fun=None, devices=None, rendezvous=None, net_type="dag",
                broadcast_computed_params=True, optimize_gradient_memory=False, dynamic_memory_management=False,
                blobs_to_keep=None, use_nccl=False, max_concurrent_distributed_ops=16,  # noqa: ARG001
                cpu_device=False, ideep=False, num_threads_per_device=4, shared_model=False,
                combine_spatial_bn=False, barrier_net_timeout_sec=_DEFAULT_BARRIER_NET_TIMEOUT_SEC):  # noqa: ARG001
    """Make model_helper_obj data parallel over `devices` (see the module docstring).

    input_builder_fun(model) adds the input ops of one device; forward_pass_builder_fun(model,
    loss_scale) its forward pass, returning the list of its loss blobs (already scaled);
    then either optimizer_builder_fun(model), called once (e.g. optimizer.build_sgd), or
    param_update_builder_fun(model), called per device in its scopes. With neither, only
    the forward nets are built (a test or validation model)."""
    if devices is None:
        devices = list(range(os.cpu_count() or 1)) if cpu_device else list(range(workspace.NumCudaDevices()))
    devices = [int(d) if isinstance(d, numbers.Integral) and not isinstance(d, bool) else d for d in devices]
    rendezvous = shards.check_rendezvous(rendezvous)
    _check_options(model_helper_obj, devices, rendezvous, cpu_device, ideep, shared_model, combine_spatial_bn,
                   param_update_builder_fun, optimizer_builder_fun)
    if optimize_gradient_memory and dynamic_memory_management:
        raise Caffe2Error("Parallelize: optimize_gradient_memory and dynamic_memory_management do not go together")
    model = model_helper_obj
    model._device_type = caffe2_pb2.CPU if cpu_device else caffe2_pb2.CUDA
    model._device_prefix = "cpu" if cpu_device else "gpu"
    model._shared_model = bool(shared_model)
    model._devices = devices
    model._rendezvous = rendezvous
    model._shard_world = None
    model._sync_barrier_net = None
    model._broadcast_context = None
    model._grad_names = []
    model._optimizer = None
    log.info("Parallelizing model for devices: %s", devices)
    model.net.Proto().num_workers = len(devices) * num_threads_per_device
    model.net.Proto().type = net_type

    non_datapar_params = copy.copy(model.params)
    num_shards = rendezvous["num_shards"] if rendezvous else 1
    loss_scale = 1.0 / (len(devices) * num_shards)
    has_parameter_updates = param_update_builder_fun is not None or optimizer_builder_fun is not None
    if not has_parameter_updates and model.init_params:
        log.warning("Model %s is used for testing/validation but has init_params=True: running its "
                    "param_init_net overwrites the trained parameters (use ModelHelper(init_params=False))",
                    model.name)

    losses_by_device = {}
    for device in devices:
        with _device_scopes(model, device):
            input_builder_fun(model)
            losses = forward_pass_builder_fun(model, loss_scale)
            if has_parameter_updates:
                if not isinstance(losses, list) or not all(isinstance(x, core.BlobReference) for x in losses):
                    raise Caffe2Error("Parallelize: forward_pass_builder_fun must return a list of loss "
                                      "BlobReferences, got %r" % (losses,))
            losses_by_device[device] = losses
    _ValidateParams(model.params)

    model._device_grouped_blobs = _GroupByDevice(model, devices, model.params, non_datapar_params)
    computed = _GroupByDevice(model, devices, model.GetComputedParams(""), [])
    model._device_grouped_blobs.update(computed)
    model._param_names = list(model._device_grouped_blobs)
    model._computed_param_names = list(computed)

    if pre_grad_net_transformer_fun:
        pre_grad_net_transformer_fun(model)
    if has_parameter_updates:
        _AddGradientOperators(devices, model, losses_by_device)
    if combine_spatial_bn:
        shards.interleave_ops(model)
        shards.combine_spatial_bn(model)
    if net_transformer_fun:
        net_transformer_fun(model, len(devices), model._device_prefix, model._device_type)
    model._losses_by_gpu = losses_by_device
    if not has_parameter_updates:
        _InferBlobDevice(model)
        model._data_parallel_model_init_nets = [model.param_init_net]
        model._data_parallel_model_nets = [model.net]
        return

    _ValidateParams(model.params)
    grads = [model.param_to_grad[p] for p in model.params if p in model.param_to_grad]
    non_datapar_grads = [model.param_to_grad[p] for p in non_datapar_params if p in model.param_to_grad]
    grads_grouped = _GroupByDevice(model, devices, grads, non_datapar_grads)
    model._device_grouped_blobs.update(grads_grouped)
    model._grad_names = list(grads_grouped)
    _InferBlobDevice(model)

    if broadcast_computed_params:
        _BroadcastComputedParams(devices, model)
    if model._grad_names:
        _AllReduceBlobs(list(reversed(model._grad_names)), devices, model, model.net)
    else:
        log.info("Parallelize: the forward pass created no parameters with gradients")

    all_params = set(model.GetParams(""))
    if model._shared_model:
        _PruneParametersForSharing(model)
    if param_update_builder_fun is not None:
        for device in devices:
            with _device_scopes(model, device):
                param_update_builder_fun(model)
    else:
        model._optimizer = optimizer_builder_fun(model)

    sync_blobs, sync_names = _ComputeBlobsToSync(model)
    model._device_grouped_blobs.update(_GroupByDevice(model, devices, sync_blobs, []))
    _InferBlobDevice(model)
    _AnalyzeOperators(model)

    arg = model.Proto().arg.add()      # Caffe2's DAG net: the first iteration on one worker
    arg.name = "first_iter_only_one_worker"
    arg.i = 1

    if rendezvous is not None:      # every shard starts from shard 0's values
        _BroadcastAcrossShards(model, model.param_init_net, set(sync_names) | set(model._param_names),
                               shards.iteration_counters(model))
    _SyncAllParams(devices, model, model.param_init_net, sync_names)
    if post_sync_builder_fun is not None:
        for device in devices:
            with _device_scopes(model, device):
                post_sync_builder_fun(model)
    model._data_parallel_model_init_nets = [model.param_init_net]
    model._data_parallel_model_nets = [model.net]
    if model._shared_model:
        _RemapParameterBlobsForSharedModel(model, all_params)


class _device_scopes:
    """DeviceScope and NameScope (`cpu_3/`) of one device of a parallelized model."""

    def __init__(self, model, device):
        self._device = core.DeviceScope(core.DeviceOption(model._device_type, device))
        self._name = core.NameScope("{}_{}".format(model._device_prefix, device))

    def __enter__(self):
        self._device.__enter__()
        self._name.__enter__()
        return self

    def __exit__(self, *exc):
        self._name.__exit__(*exc)
        return self._device.__exit__(*exc)


# ----------------------------------------------------------------- running

def RunInitNet(model):
    for init_net in model._data_parallel_model_init_nets:
        workspace.RunNetOnce(init_net)
    CreateNet(model)


def RunWarmup(model):
    RunNet(model, 1)


def CreateNet(model, overwrite=False):
    for net in model._data_parallel_model_nets:
        workspace.CreateNet(net, overwrite=overwrite)


def RunNet(model, num_iterations):
    for net in model._data_parallel_model_nets:
        workspace.RunNet(net.Proto().name, num_iterations)


def Synchronize(model, timeout_sec=_DEFAULT_BARRIER_NET_TIMEOUT_SEC):
    """A barrier over the shards (its own common world, made on the first call with
    `timeout_sec`); one shard has nothing to wait for, as in Caffe2."""
    _check_parallelized(model, "Synchronize")
    if model._rendezvous is None:
        return
    if model._sync_barrier_net is None:
        init = core.Net("sync_barrier_init_net")
        world = shards.create_common_world(init, model._rendezvous, "sync_barrier_cw", timeout_sec)
        model._sync_barrier_net = core.Net("sync_barrier_net")
        with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
            model._sync_barrier_net.Barrier([world], [], engine=model._rendezvous["engine"])
        workspace.RunNetOnce(init)
        workspace.CreateNet(model._sync_barrier_net)
        model._sync_barrier_net_timeout = timeout_sec
    if model._sync_barrier_net_timeout != timeout_sec:
        raise Caffe2Error("Synchronize: the barrier was made with timeout_sec=%s; it cannot change to %s"
                          % (model._sync_barrier_net_timeout, timeout_sec))
    workspace.RunNet(model._sync_barrier_net.Proto().name)


def _check_parallelized(model, what):
    if not hasattr(model, "_devices"):
        raise Caffe2Error("data_parallel_model.%s: model '%s' was not made data parallel (call Parallelize "
                          "first)" % (what, getattr(model, "name", model)))


def GetDevices(model):
    if not isinstance(model, model_helper.ModelHelper):
        raise Caffe2Error("GetDevices: expected a ModelHelper, got %s" % type(model).__name__)
    _check_parallelized(model, "GetDevices")
    return model._devices


def GetLearningRateBlobNames(model):
    """The learning-rate blobs: the optimizer's (one shared blob on CPU devices, one per
    GPU), or with param_update_builder_fun the outputs of the LearningRate ops."""
    _check_parallelized(model, "GetLearningRateBlobNames")
    if model._optimizer is not None:
        if model._device_type == caffe2_pb2.CPU:
            return [model._optimizer.get_cpu_blob_name("lr")]
        return [model._optimizer.get_gpu_blob_name("lr", d, "") for d in model._devices]
    return [op.output[0] for op in model.net.Proto().op if op.type == "LearningRate"]


def GetCheckpointParams(model):
    """The blobs a checkpoint needs: device 0's copies of what param_init_net makes,
    and the iteration counters (which have no device prefix)."""
    _check_parallelized(model, "GetCheckpointParams")
    all_blobs, _ = _ComputeBlobsToSync(model)
    first = "{}_{}/".format(model._device_prefix, model._devices[0])
    blobs = {b for b in all_blobs if str(b).startswith(first)}
    if model._shared_model:     # Caffe2 leaves the shared parameters out here; a checkpoint needs them
        blobs |= {core.BlobReference(str(p)) for p in model.GetParams(first)}
    for op in model.net.Proto().op:
        if op.type in ("Iter", "AtomicIter") and not op.output[0].startswith(model._device_prefix + "_"):
            blobs.add(core.BlobReference(op.output[0]))
    return blobs


def FinalizeAfterCheckpoint(model, blobs=None, cpu_mode=False):
    """After loading device 0's blobs from a checkpoint, copy them to the other devices
    (a `checkpoint_sync_net`, built on the first call and rerun on later ones); with
    shards, shard 0's values first go to every shard (so only shard 0 need load)."""
    _check_parallelized(model, "FinalizeAfterCheckpoint")
    if not hasattr(model, "_checkpoint_net"):
        names = _ComputeBlobsToSync(model)[1] if blobs is None else [stripBlobName(b) for b in blobs]
        for name in names:
            if name not in model._device_grouped_blobs:
                model._device_grouped_blobs[name] = {
                    d: core.BlobReference("{}_{}/{}".format(model._device_prefix, d, name)) for d in model._devices}
        model._checkpoint_net = core.Net("checkpoint_sync_net")
        if not cpu_mode and model._device_type == caffe2_pb2.CUDA:
            model._checkpoint_net.RunAllOnGPU()
        if model._rendezvous is not None:
            init = core.Net("checkpoint_init_net")
            world = shards.create_common_world(init, model._rendezvous, "checkpoint_cw")
            workspace.RunNetOnce(init)
            _BroadcastAcrossShards(model, model._checkpoint_net, names, shards.iteration_counters(model), world)
        _SyncAllParams(model._devices, model, model._checkpoint_net, names)
        workspace.CreateNet(model._checkpoint_net)
    workspace.RunNet(model._checkpoint_net.Proto().name)


def OptimizeGradientMemory(model, input_shapes, excluded_blobs, recycle_activations):  # noqa: ARG001
    """Caffe2 shared the gradient blobs of each device through memonger to save GPU
    memory. caffe2py keeps every blob: the call checks the model and changes nothing
    (training results are the same either way; only peak memory differs)."""
    _check_parallelized(model, "OptimizeGradientMemory")


def ConvertNetForDevice(net, device=None):
    """A copy of `net` with every blob under the device's name scope (`gpu_1/x`) and
    every op on that device (default: the current device scope)."""
    converted = copy.deepcopy(net)
    if device is None:
        device = scope.CurrentDeviceScope()
    if device is None:
        raise Caffe2Error("ConvertNetForDevice: no device given and no device scope is active")
    prefix = "gpu" if device.device_type == caffe2_pb2.CUDA else "cpu"
    namescope = "{}_{}/".format(prefix, device.device_id)
    proto = converted.Proto()
    for op in proto.op:
        if "RecurrentNetwork" in op.type:
            raise Caffe2Error("ConvertNetForDevice: RecurrentNetwork ops (op '%s') cannot be converted"
                              % (op.name or op.type))
        for field in (op.input, op.output, op.control_input):
            field[:] = [namescope + b for b in field]
        op.device_option.CopyFrom(device)
    proto.external_input[:] = [namescope + b for b in proto.external_input]
    proto.external_output[:] = [namescope + b for b in proto.external_output]
    return converted


def ExtractPredictorNet(model, inputs, outputs, device):
    """(predict net, blobs to export) of device 0's copy of the model, with the
    inputs and outputs renamed to their unprefixed names (the parameters keep theirs);
    see model_helper.ExtractPredictorNet."""
    _check_parallelized(model, "ExtractPredictorNet")
    prefix = "{}_{}/".format(model._device_prefix, model._devices[0])
    prefixed_inputs = [prefix + str(b) for b in inputs]
    prefixed_outputs = [prefix + str(b) for b in outputs]
    return model_helper.ExtractPredictorNet(
        net_proto=model.net.Proto(), input_blobs=prefixed_inputs, output_blobs=prefixed_outputs, device=device,
        renames=dict(zip(prefixed_inputs + prefixed_outputs, [str(b) for b in list(inputs) + list(outputs)])))


# ----------------------------------------------------------------- building blocks

def stripBlobName(param):
    """'gpu_0/conv1_w' -> 'conv1_w'; a GradientSlice -> 'indices:values' so stripped."""
    if isinstance(param, GradientSlice):
        return stripBlobName(param.indices) + ":" + stripBlobName(param.values)
    name = str(param)
    if scope._NAMESCOPE_SEPARATOR not in name:
        raise Caffe2Error("data_parallel_model: blob '%s' has no device name scope" % name)
    return name[name.index(scope._NAMESCOPE_SEPARATOR) + 1:]


def _ValidateParams(params):
    seen, dupes = set(), []
    for p in map(str, params):
        if p in seen:
            dupes.append(p)
        seen.add(p)
    if dupes:
        raise Caffe2Error("Parallelize: duplicate entries in params: %s" % sorted(set(dupes)))


def _device_of(model, blob):
    """The device id in a blob's `cpu_3/` prefix, checked against the model's prefix."""
    name = str(blob)
    head = name.split(scope._NAMESCOPE_SEPARATOR, 1)[0]
    prefix = model._device_prefix + "_"
    if scope._NAMESCOPE_SEPARATOR not in name or not head.startswith(prefix) or not head[len(prefix):].isdigit():
        raise Caffe2Error("Parallelize: blob '%s' was expected under a '%s<device>/' name scope (create "
                          "parameters inside the builder functions)" % (name, prefix))
    return int(head[len(prefix):])


def _GroupByDevice(model, devices, params, non_data_params):
    """{stripped name: {device id: blob or GradientSlice}} in the params' order, leaving
    out the first len(non_data_params) (created before Parallelize)."""
    grouped = OrderedDict()
    for p in params[len(non_data_params):]:
        if isinstance(p, GradientSlice):
            device = _device_of(model, p.indices)
            if _device_of(model, p.values) != device:
                raise Caffe2Error("Parallelize: gradient slice %s has indices and values on different devices"
                                  % (p,))
        elif isinstance(p, core.BlobReference):
            device = _device_of(model, p)
        else:
            raise Caffe2Error("Parallelize: %r is not a BlobReference or GradientSlice" % (p,))
        if device not in devices:
            raise Caffe2Error("Parallelize: blob %s is on device %d, not one of %s" % (p, device, devices))
        grouped.setdefault(stripBlobName(p), {})[device] = p
    return grouped


def _InferBlobDevice(model):
    """model._blob_to_device: each blob's DeviceOption, from the first op (in the init net,
    then the net) that writes it, else reads it."""
    mapping = {}
    for net in (model.param_init_net, model.net):
        for op in net.Proto().op:
            for blob in list(op.output) + list(op.input):
                mapping.setdefault(blob, op.device_option)
    model._blob_to_device = mapping


def _IsGPUBlob(model, blob_name):
    option = model._blob_to_device.get(blob_name)
    if option is None:
        option = model._blob_to_device.get("{}_{}/{}".format(model._device_prefix, model._devices[0], blob_name))
    if option is None:
        return model._device_type == caffe2_pb2.CUDA
    return option.device_type == caffe2_pb2.CUDA


def _AddGradientOperators(devices, model, losses_by_device):
    """Seed each device's losses with 1.0 (on its device) and add the backward pass."""
    loss_grad = {}
    for device in devices:
        with core.DeviceScope(core.DeviceOption(model._device_type, device)):
            for loss in losses_by_device[device]:
                loss_grad[str(loss)] = str(model.net.ConstantFill(loss, str(loss) + "_grad", value=1.0))
    model.AddGradientOperators(loss_grad)


def _blob_device_option(model, name, device):
    if _IsGPUBlob(model, name):
        return core.DeviceOption(caffe2_pb2.CUDA, device)
    return core.DeviceOption(caffe2_pb2.CPU, 0)


def _Broadcast(devices, model, net, param):
    """Copy device 0's copy of `param` to the other devices."""
    group = model._device_grouped_blobs[param]
    missing = [d for d in devices if d not in group]
    if missing:
        raise Caffe2Error("data_parallel_model: '%s' has no copy on device(s) %s (every device's builder must "
                          "create it)" % (param, missing))
    master = group[devices[0]]
    for device in devices[1:]:
        with core.DeviceScope(_blob_device_option(model, param, device)):
            net.Copy(master, group[device])


def _BroadcastComputedParams(devices, model):
    """Computed params (batch-norm running statistics) follow device 0, as in Caffe2."""
    for name in model._computed_param_names:
        if model._rendezvous is not None:
            shards.broadcast(model, model.net, [model._device_grouped_blobs[name][devices[0]]])
        if len(devices) > 1:
            _Broadcast(devices, model, model.net, name)


def _BroadcastAcrossShards(model, net, names, extra_blobs, world=None):
    """Shard 0's device-0 copies of `names` (and the blobs `extra_blobs`) to every shard."""
    first = model._devices[0]
    blobs = [model._device_grouped_blobs[n][first] if n in model._device_grouped_blobs
             else core.BlobReference("{}_{}/{}".format(model._device_prefix, first, n)) for n in sorted(names)]
    shards.broadcast(model, net, blobs + [core.BlobReference(b) for b in extra_blobs], world)


def _AllReduceBlobs(blob_names, devices, model, net):
    """Sum each dense gradient onto device 0, all-reduce it over the shards, and copy
    it back (Caffe2's all-reduce); concatenate each sparse gradient's indices and
    values across devices, then across shards (in shard order), and give every device
    the concatenation."""
    distributed = model._rendezvous is not None
    if len(devices) == 1 and not distributed:
        return
    master = core.DeviceOption(model._device_type, devices[0])
    master_ns = "{}_{}".format(model._device_prefix, devices[0])
    concatenated_indices = set()
    for name in blob_names:
        group = [model._device_grouped_blobs[name][d] for d in devices if d in model._device_grouped_blobs[name]]
        if len(group) == 1 and not distributed:
            continue
        if len(group) != len(devices):
            raise Caffe2Error("Parallelize: each device of %s should have a copy of '%s'" % (devices, name))
        with core.DeviceScope(master if _IsGPUBlob(model, name) else core.DeviceOption(caffe2_pb2.CPU, 0)):
            if not isinstance(group[0], GradientSlice):
                if len(group) > 1:
                    net.Sum(group, [group[0]], name="dpm")
                if distributed:
                    shards.allreduce(model, net, group[0])
                if not model._shared_model and len(group) > 1:     # a shared model updates device 0's copy only
                    _Broadcast(devices, model, net, name)
                continue
            # gradients sharing one indices blob (two tables read with the same ids) gather it once
            if not any(str(g.indices) in concatenated_indices for g in group):
                indices = _GatherRows(model, net, [g.indices for g in group], master_ns, name, "index")
                for device, g in zip(devices, group):
                    with core.DeviceScope(core.DeviceOption(model._device_type, device)):
                        net.Copy(indices, g.indices)
                    concatenated_indices.add(str(g.indices))
            values = _GatherRows(model, net, [g.values for g in group], master_ns, name, "val")
            for device, g in zip(devices, group):
                with core.DeviceScope(core.DeviceOption(model._device_type, device)):
                    net.Copy(values, g.values)


def _GatherRows(model, net, blobs, master_ns, name, kind):
    """The rows of `blobs` (one per device) concatenated, then those of every shard."""
    rows = blobs[0]
    if len(blobs) > 1:
        rows, _ = net.Concat(blobs, ["{}/{}_{}_concat".format(master_ns, name, kind),
                                     "{}/{}_{}_splitinfo".format(master_ns, name, kind)],
                             axis=0, name="note:data_parallel_model")
    if model._rendezvous is not None:
        rows = shards.allgather_rows(model, net, rows, "{}/{}_{}_shards".format(master_ns, name, kind))
    return rows


def _ComputeBlobsToSync(model):
    """(blobs, stripped names) that param_init_net makes under a device prefix: the
    parameters and the optimizer's per-parameter state, sorted by device then name."""
    prefix = model._device_prefix + "_"
    names, blobs = set(), set()
    if model._shared_model:     # the parameters are shared: only computed ones have copies
        blobs = {str(p) for p in model.GetComputedParams("")}
        ordered = sorted(blobs, key=lambda b: (_device_of(model, b), b))
        return [core.BlobReference(b) for b in ordered], {stripBlobName(b) for b in blobs}
    for op in model.param_init_net.Proto().op:
        for out in op.output:
            if out.startswith(prefix) and scope._NAMESCOPE_SEPARATOR in out:
                names.add(stripBlobName(out))
                blobs.add(out)
    missing = set(model._param_names) - names
    if missing:
        raise Caffe2Error("Parallelize: some params are not instantiated in param_init_net: %s (a model with "
                          "init_params=False cannot be trained by data_parallel_model)" % sorted(missing))
    ordered = sorted(blobs, key=lambda b: (_device_of(model, b), b))
    return [core.BlobReference(b) for b in ordered], names


def _SyncAllParams(devices, model, net, unique_param_names):
    for name in sorted(unique_param_names):
        _Broadcast(devices, model, net, name)


def _AnalyzeOperators(model):
    """Caffe2's check that no GPU op reads or writes another device's blobs (the
    all-reduce's own Copy, Concat and Sum excepted)."""
    prefix = model._device_prefix + "_"
    for op in model.Proto().op:
        if "Copy" in op.type or "Concat" in op.type or (op.type == "Sum" and op.name == "dpm"):
            continue
        if op.device_option.device_type != caffe2_pb2.CUDA:
            continue
        namescope = "{}{}/".format(prefix, op.device_option.device_id)
        for blob in list(op.input) + list(op.output):
            if blob.startswith(prefix) and not blob.startswith(namescope):
                raise Caffe2Error("Parallelize: blob '%s' of op %s should have name scope %s"
                                  % (blob, op.type, namescope))


def _PruneParametersForSharing(model):
    """A shared model trains device 0's parameters only: the others leave params,
    param_to_grad, weights and biases (before the optimizer is built)."""
    master = "{}_{}/".format(model._device_prefix, model._devices[0])
    model.params = model.GetParams(master)
    kept = set(model.params)
    model.param_to_grad = {p: g for p, g in model.param_to_grad.items() if p in kept}
    model.weights = [w for w in model.weights if w in kept]
    model.biases = [b for b in model.biases if b in kept]


def _RemapParameterBlobsForSharedModel(model, all_params):
    """Drop the ops that make the other devices' parameter copies and point every
    reader of such a copy at device 0's."""
    master = "{}_{}/".format(model._device_prefix, model._devices[0])
    master_params = {str(p) for p in model.GetParams(master)}
    others = {str(p) for p in all_params} - master_params
    for net in (model.param_init_net, model.net):
        kept = []
        for op in net.Proto().op:
            if any(out in others for out in op.output):
                continue
            op.input[:] = [master + stripBlobName(b) if b in others else b for b in op.input]
            kept.append(op)
        del net.Proto().op[:]
        net.Proto().op.extend(kept)
