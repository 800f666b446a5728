"""data_parallel_model across processes (Caffe2's `rendezvous=`): the pieces of
Parallelize that talk to the other shards, and combine_spatial_bn.

A rendezvous is Caffe2's dict: kv_handler (the name of a store-handler blob made by
FileStoreHandlerCreate or RedisStoreHandlerCreate), shard_id, num_shards, engine
("GLOO"), transport ("tcp"), interface (e.g. "eth0"; "" for the host's default),
exit_nets (nets that should close the common worlds: DestroyCommonWorld is appended
to them) and caffe2py's own optional timeout_sec (rendezvous and collective timeout,
default 30 s).

Every shard builds the same nets, so the collective ops run in the same order on
each (the executor runs a net's ops one after the other). One common world, made
by param_init_net, carries the model's collectives; Synchronize and the checkpoint
net make their own.
"""
import numbers

from . import core
from .errors import Caffe2Error
from .proto import caffe2_pb2

DEFAULT_TIMEOUT_SEC = 30
_ENGINES = ("GLOO",)
_TRANSPORTS = ("tcp",)


def check_rendezvous(rendezvous):
    """The rendezvous dict checked, or None when it names one shard (one host)."""
    if rendezvous is None:
        return None
    if not isinstance(rendezvous, dict):
        raise Caffe2Error("Parallelize: rendezvous must be a dict (kv_handler, shard_id, num_shards, engine, "
                          "...), got %s" % type(rendezvous).__name__)
    missing = [k for k in ("kv_handler", "shard_id", "num_shards") if k not in rendezvous]
    if missing:
        raise Caffe2Error("Parallelize: rendezvous lacks %s (Caffe2's keys: kv_handler, shard_id, num_shards, "
                          "engine, transport, interface, exit_nets)" % ", ".join(missing))
    num_shards, shard_id = rendezvous["num_shards"], rendezvous["shard_id"]
    for key, value in (("num_shards", num_shards), ("shard_id", shard_id)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise Caffe2Error("Parallelize: rendezvous['%s'] must be an int, got %r" % (key, value))
    if num_shards < 1:
        raise Caffe2Error("Parallelize: rendezvous['num_shards'] must be >= 1, got %d" % num_shards)
    if not 0 <= shard_id < num_shards:
        raise Caffe2Error("Parallelize: rendezvous['shard_id'] %d is outside [0, %d)" % (shard_id, num_shards))
    engine = rendezvous.get("engine", "GLOO")
    if engine not in _ENGINES:
        raise Caffe2Error("Parallelize: rendezvous engine '%s' is not provided by caffe2py (its collectives run "
                          "on Gloo: engine='GLOO')" % engine)
    transport = rendezvous.get("transport", "tcp") or "tcp"
    if transport not in _TRANSPORTS:
        raise Caffe2Error("Parallelize: rendezvous transport '%s' is not provided by caffe2py (Gloo over TCP: "
                          "transport='tcp')" % transport)
    if rendezvous.get("mpi_rendezvous"):
        raise Caffe2Error("Parallelize: mpi_rendezvous is not provided by caffe2py; meet through a store "
                          "handler (FileStoreHandlerCreate or RedisStoreHandlerCreate)")
    if num_shards == 1:
        return None
    checked = dict(rendezvous, engine=engine, transport=transport, interface=rendezvous.get("interface") or "")
    checked["timeout_sec"] = float(rendezvous.get("timeout_sec", DEFAULT_TIMEOUT_SEC))
    return checked


def create_common_world(net, rendezvous, name, timeout_sec=None):
    """A CreateCommonWorld op on the CPU in `net`; returns the world blob."""
    timeout = rendezvous["timeout_sec"] if timeout_sec is None else timeout_sec
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
        world = net.CreateCommonWorld(
            [rendezvous["kv_handler"]], name, name=name + "_op", size=rendezvous["num_shards"],
            rank=rendezvous["shard_id"], engine=rendezvous["engine"], transport=rendezvous["transport"],
            interface=rendezvous["interface"], timeout_ms=int(timeout * 1000))
    for exit_net in rendezvous.get("exit_nets") or ():
        with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
            exit_net.DestroyCommonWorld(world, world, engine=rendezvous["engine"])
    return world


def model_world(model):
    """The common world of the model's collectives, made by param_init_net once."""
    if getattr(model, "_shard_world", None) is None:
        model._shard_world = create_common_world(model.param_init_net, model._rendezvous,
                                                 "{}_dpm_common_world".format(model.net.Proto().name))
    return model._shard_world


def allreduce(model, net, blob):
    """Sum `blob` over the shards, in place."""
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
        net.Allreduce([model_world(model), blob], [blob], engine=model._rendezvous["engine"])


def allgather_rows(model, net, blob, out):
    """Every shard's rows of `blob`, in shard order, into `out`."""
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
        return net.AllgatherRows([model_world(model), blob], [out], engine=model._rendezvous["engine"])


def broadcast(model, net, blobs, world=None):
    """Shard 0's values of `blobs`, in place on every shard."""
    world = world or model_world(model)
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
        for blob in blobs:
            net.Broadcast([world, blob], [blob], root=0, engine=model._rendezvous["engine"])


def iteration_counters(model):
    """The iteration counters (Iter / AtomicIter outputs without a device prefix)."""
    prefix = model._device_prefix + "_"
    return sorted({op.output[0] for op in model.net.Proto().op
                   if op.type in ("Iter", "AtomicIter") and not op.output[0].startswith(prefix)})


# ----------------------------------------------------------------- combine_spatial_bn

def interleave_ops(model):
    """Reorder model.net so that the i-th op of every device are neighbours (Caffe2's
    _InterleaveOps): each device's ops keep their order, and the SpatialBN ops of all
    devices end up side by side, where their statistics can be combined."""
    ops = list(model.net.Proto().op)
    by_device = {d: [] for d in model._devices}
    for op in ops:
        device = op.device_option.device_id
        if device not in by_device:
            raise Caffe2Error("combine_spatial_bn: op %s (%s) runs on device %d, not one of the model's %s"
                              % (op.type, op.name or (op.output[0] if op.output else ""), device, model._devices))
        by_device[device].append(op)
    counts = {d: len(v) for d, v in by_device.items()}
    if len(set(counts.values())) != 1:
        raise Caffe2Error("combine_spatial_bn: the devices have different numbers of ops %s (every device must "
                          "build the same net)" % counts)
    interleaved = []
    for j in range(counts[model._devices[0]]):
        kinds = {by_device[d][j].type for d in model._devices}
        if len(kinds) != 1:
            raise Caffe2Error("combine_spatial_bn: op %d differs between devices (%s)" % (j, sorted(kinds)))
        interleaved.extend(by_device[d][j] for d in model._devices)
    del model.net.Proto().op[:]
    model.net.Proto().op.extend(interleaved)


def _arg(op, name, default):
    for a in op.arg:
        if a.name == name:
            return a.s.decode() if a.HasField("s") else a.i if a.HasField("i") else a.f
    return default


def _set_num_batches(op, num_batches):
    for a in op.arg:
        if a.name == "num_batches":
            a.i = num_batches
            return
    arg = op.arg.add()
    arg.name, arg.i = "num_batches", num_batches


def combine_spatial_bn(model):
    """Caffe2's _InterDeviceBatchNormalization, extended across shards: each group of
    side-by-side training SpatialBN ops (one per device) is normalised with the
    statistics of every device's (and every shard's) batch: ChannelStats per device,
    summed (and all-reduced over the shards), fed to SpatialBN with num_batches =
    devices * shards; the same for SpatialBNGradient with ChannelBackpropStats."""
    num_devices = len(model._devices)
    num_batches = num_devices * (model._rendezvous["num_shards"] if model._rendezvous else 1)
    ops = list(model.net.Proto().op)
    rebuilt = []
    i = 0
    while i < len(ops):
        op = ops[i]
        training = op.type == "SpatialBN" and len(op.output) == 5 and not _arg(op, "is_test", 0)
        backward = op.type == "SpatialBNGradient" and not _arg(op, "is_test", 0)
        if not (training or backward):
            rebuilt.append(op)
            i += 1
            continue
        group = ops[i:i + num_devices]
        if len(group) != num_devices or any(g.type != op.type for g in group):
            raise Caffe2Error("combine_spatial_bn: expected %d %s ops side by side (one per device) at op %d"
                              % (num_devices, op.type, i))
        rebuilt.extend(_combined(model, group, training, num_batches))
        i += num_devices
    del model.net.Proto().op[:]
    model.net.Proto().op.extend(rebuilt)


def _combined(model, group, training, num_batches):
    first_x = group[0].input[0]
    suffixes = ("_sums", "_sumsq") if training else ("_scale_grad", "_bias_grad")
    parts = [[], []]
    out = []
    for op in group:
        x = op.input[0]
        with core.DeviceScope(op.device_option):
            if training:
                stats = core.CreateOperator("ChannelStats", [x], [x + suffixes[0], x + suffixes[1]],
                                            order=_arg(op, "order", "NCHW"))
            else:   # X, saved mean, saved inverse std, dY
                stats = core.CreateOperator("ChannelBackpropStats", [x, op.input[3], op.input[4], op.input[2]],
                                            [x + suffixes[0], x + suffixes[1]])
        out.append(stats)
        parts[0].append(x + suffixes[0])
        parts[1].append(x + suffixes[1])
    combined = [first_x + s + "_combined" for s in suffixes]
    with core.DeviceScope(group[0].device_option):
        for names, total in zip(parts, combined):
            out.append(core.CreateOperator("Sum", names, [total]))
    if model._rendezvous is not None:
        staging = core.Net("combine_spatial_bn_staging")
        for total in combined:
            allreduce(model, staging, total)
        out.extend(staging.Proto().op)
    for op in group:
        if training and len(op.input) == 7:
            op.input[5:7] = combined
        else:
            op.input.extend(combined)
        _set_num_batches(op, num_batches)
        out.append(op)
    return out
