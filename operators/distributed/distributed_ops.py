"""Caffe2's distributed ops on torch.distributed (engine GLOO), and the store ops.

Collective ops (CreateCommonWorld, CloneCommonWorld, DestroyCommonWorld,
Allreduce, Allgather, Broadcast, Reduce, ReduceScatter, Barrier, SendTensor,
ReceiveTensor) have, as in Caffe2, no default engine: they run with
engine="GLOO", which maps them onto a ProcessGroupGloo (caffe2py/distributed.py).
Reductions are sums. Outputs are new arrays (the inputs are never written),
with the in-place naming Caffe2 enforces.

Store ops (FileStoreHandlerCreate, RedisStoreHandlerCreate, StoreSet, StoreGet,
StoreAdd, StoreWait) work without torch (Redis needs the `redis` client). When a
collective or the rendezvous fails, the error names the ranks whose heartbeat
stopped (caffe2py/distributed.py). AllgatherRows is caffe2py's own (Caffe2 has
none): Allgather for tensors whose first dimension differs between ranks, which
data_parallel_model uses to gather sparse gradients across shards. See
docs/control_flow.md ("Distributed ops").
"""
import itertools

import numpy as np

from caffe2py.distributed import (DEFAULT_TIMEOUT_S, CommonWorld, FileStoreHandler, RedisStoreHandler,
                                  missing_ranks, store_dir_problem)
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import FileName
from caffe2py.tensors import numpy_to_tensor, tensor_to_numpy

GLOO = "GLOO"


def _one_less(i, o):
    return i >= 2 and o == i - 1


_COMM = {
    "CreateCommonWorld": dict(num_inputs=(0, 1), num_outputs=1, args=(
        Arg("size", "int", 0, doc="number of processes"), Arg("rank", "int", 0, doc="this process's rank"),
        Arg("timeout_ms", "int", -1, doc="rendezvous and operation timeout (-1: 30 s)"),
        Arg("transport", "string", "tcp", doc="accepted: gloo over TCP"),
        Arg("interface", "string", "", doc="network interface (e.g. lo); default: the host's")),
        doc="A common world of `size` processes meeting through the store handler (input 0)."),
    "CloneCommonWorld": dict(num_inputs=1, num_outputs=1, doc="A new common world with the same members."),
    "DestroyCommonWorld": dict(num_inputs=1, num_outputs=1, enforce_inplace={(0, 0)},
                               doc="Closes the common world."),
    "Broadcast": dict(inputs_outputs_check=_one_less, num_inputs=(2, None), num_outputs=(1, None),
                      enforce_inplace=lambda i, o: i - 1 == o, args=(Arg("root", "int", 0, doc="sending rank"),),
                      doc="Every rank gets the root's tensors."),
    "Reduce": dict(num_inputs=2, num_outputs=1, args=(Arg("root", "int", 0, doc="receiving rank"),),
                   doc="The sum over ranks on the root (other ranks: their own input)."),
    "Allreduce": dict(inputs_outputs_check=_one_less, num_inputs=(2, None), num_outputs=(1, None),
                      enforce_inplace=lambda i, o: i - 1 == o, doc="The sum over ranks, on every rank."),
    "ReduceScatter": dict(inputs_outputs_check=_one_less, num_inputs=(2, None), num_outputs=(1, None),
                          enforce_inplace=lambda i, o: i - 1 == o,
                          doc="The sum over ranks of this rank's chunk of each tensor (chunks of "
                              "numel / size, the first numel % size one longer); the rest keeps the input."),
    "Allgather": dict(num_inputs=(2, None), num_outputs=1,
                      doc="1-D: for each rank in order, its inputs flattened and concatenated."),
    "AllgatherRows": dict(inputs_outputs_check=_one_less, num_inputs=(2, None), num_outputs=(1, None),
                          allow_inplace=lambda i, o: i - 1 == o,
                          doc="caffe2py's own: for each input, the inputs of every rank concatenated along "
                              "axis 0 in rank order (the first dimension may differ between ranks, the "
                              "others must agree)."),
    "Barrier": dict(num_inputs=1, num_outputs=0, doc="Waits for every rank."),
    "SendTensor": dict(num_inputs={2, 4}, num_outputs=0, args=(
        Arg("dst", "int", -1, doc="receiving rank (input 2 overrides)"),
        Arg("tag", "int", 0, doc="message tag (input 3 overrides)"),
        Arg("raw_buffer", "bool", False, doc="send the values only; the receiver knows shape and type")),
        doc="Sends X (input 1) to another rank."),
    "ReceiveTensor": dict(num_inputs={2, 4}, num_outputs=3, enforce_inplace={(1, 0)},
                          allow_inplace={(2, 1), (3, 2)}, args=(
        Arg("src", "int", -1, doc="sending rank (input 2 overrides)"),
        Arg("tag", "int", 0, doc="message tag (input 3 overrides)"),
        Arg("raw_buffer", "bool", False, doc="receive values only into Y's shape and type")),
        doc="Receives a tensor into Y; also outputs the source rank and tag (int32 [1])."),
}

for _name, _spec in _COMM.items():
    register_schema(OpSchema(_name, inputs_can_cross_devices=True, **_spec))

    def _no_default(ctx):
        raise ctx.error("The operator %s does not have a default engine implementation. Please specify an "
                        "engine explicitly (caffe2py provides engine='GLOO', through torch.distributed)."
                        % ctx.type)
    register_kernel(_name)(_no_default)


def _world(ctx, value, index=0):
    if not isinstance(value, CommonWorld):
        raise ctx.input_error(index, "expected a common world (CreateCommonWorld), got %s" % type(value).__name__)
    return value.check()


def _torch():
    import torch
    return torch


def _as_torch(ctx, x, index):
    if not isinstance(x, np.ndarray) or x.dtype == object:
        raise ctx.input_error(index, "must be a numeric tensor")
    return _torch().from_numpy(np.array(x, copy=True, order="C"))


def _timeout(ctx):
    ms = ctx.int("timeout_ms", -1) if ctx.has("timeout_ms") else -1
    return ms / 1000.0 if ms > 0 else DEFAULT_TIMEOUT_S


def _prefixes(ctx):
    base = ctx.name or ctx.outputs[0]
    counter = itertools.count()
    return lambda: "%s/%d" % (base, next(counter))


@register_kernel("CreateCommonWorld", engine=GLOO)
def create_common_world(ctx):
    size, rank = ctx.int("size"), ctx.int("rank")
    if size <= 0:
        raise ctx.error("argument 'size' must be > 0, got %d" % size)
    if not 0 <= rank < size:
        raise ctx.error("argument 'rank' %d is outside [0, %d)" % (rank, size))
    next_prefix, timeout, interface = _prefixes(ctx), _timeout(ctx), ctx.string("interface")

    def run(*inputs):
        if not inputs or not hasattr(inputs[0], "torch_store"):
            raise ctx.error("needs a store handler (FileStoreHandlerCreate, RedisStoreHandlerCreate) as input 0")
        try:
            return CommonWorld(inputs[0], next_prefix(), rank, size, timeout, interface)
        except Caffe2Error:
            raise
        except Exception as exc:  # noqa: BLE001 - rendezvous failures from torch/gloo
            gone = _missing(inputs[0], size, rank)
            raise ctx.error("cannot create the common world (rank %d of %d, timeout %g s)%s: %s"
                            % (rank, size, timeout, gone, exc)) from exc
    return run


def _missing(handler, size, rank):
    try:
        gone = missing_ranks(handler, size, rank)
    except Exception:  # noqa: BLE001 - the store itself failed: nothing more to say
        return ""
    return "; shard(s) %s of %d never arrived or went missing" % (", ".join(map(str, gone)), size) if gone else ""


@register_kernel("CloneCommonWorld", engine=GLOO)
def clone_common_world(ctx):
    next_prefix = _prefixes(ctx)

    def run(world):
        _world(ctx, world)
        return CommonWorld(world.store_handler, next_prefix(), world.rank, world.size, world.timeout_s,
                           world.interface)
    return run


@register_kernel("DestroyCommonWorld", engine=GLOO)
def destroy_common_world(ctx):
    def run(world):
        _world(ctx, world)
        world.destroy()
        return world
    return run


def _collective(ctx, body):
    def run(world, *tensors):
        group = _world(ctx, world)
        ts = [_as_torch(ctx, x, k + 1) for k, x in enumerate(tensors)]
        try:
            result = body(group, world, ts)
        except Caffe2Error:
            raise
        except Exception as exc:  # noqa: BLE001 - gloo errors (peer gone, timeout)
            raise ctx.error("%s failed (rank %d of %d)%s: %s" % (ctx.type, world.rank, world.size,
                                                                 world.explain_failure(), exc)) from exc
        values = [r.numpy() if hasattr(r, "numpy") else r for r in result]
        return values[0] if len(values) == 1 else tuple(values)
    return run


@register_kernel("Allreduce", engine=GLOO)
def allreduce(ctx):
    def body(group, world, ts):
        group.allreduce(ts).wait()
        return ts
    return _collective(ctx, body)


@register_kernel("Broadcast", engine=GLOO)
def broadcast(ctx):
    root = ctx.int("root")

    def body(group, world, ts):
        if not 0 <= root < world.size:
            raise ctx.error("root %d is outside [0, %d)" % (root, world.size))
        opts = _dist().BroadcastOptions()
        opts.rootRank = root
        group.broadcast(ts, opts).wait()
        return ts
    return _collective(ctx, body)


@register_kernel("Reduce", engine=GLOO)
def reduce(ctx):
    root = ctx.int("root")

    def body(group, world, ts):
        if not 0 <= root < world.size:
            raise ctx.error("root %d is outside [0, %d)" % (root, world.size))
        kept = ts[0].clone()
        opts = _dist().ReduceOptions()
        opts.rootRank = root
        group.reduce(ts, opts).wait()
        return [ts[0] if world.rank == root else kept]
    return _collective(ctx, body)


@register_kernel("ReduceScatter", engine=GLOO)
def reduce_scatter(ctx):
    def body(group, world, ts):
        out = []
        summed = [t.clone() for t in ts]
        group.allreduce(summed).wait()
        for t, s in zip(ts, summed):
            flat, total = t.reshape(-1), t.numel()
            base, extra = divmod(total, world.size)
            start = world.rank * base + min(world.rank, extra)
            stop = start + base + (1 if world.rank < extra else 0)
            flat[start:stop] = s.reshape(-1)[start:stop]
            out.append(t)
        return out
    return _collective(ctx, body)


@register_kernel("Allgather", engine=GLOO)
def allgather(ctx):
    torch = None

    def body(group, world, ts):
        nonlocal torch
        torch = torch or _torch()
        mine = torch.cat([t.reshape(-1) for t in ts])
        gathered = [[torch.empty_like(mine) for _ in range(world.size)]]
        group.allgather(gathered, [mine]).wait()
        return [torch.cat(gathered[0])]
    return _collective(ctx, body)


@register_kernel("Barrier", engine=GLOO)
def barrier(ctx):
    def run(world):
        try:
            _world(ctx, world).barrier().wait()
        except Caffe2Error:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ctx.error("Barrier failed (rank %d of %d)%s: %s" % (world.rank, world.size,
                                                                      world.explain_failure(), exc)) from exc
    return run


@register_kernel("AllgatherRows", engine=GLOO)
def allgather_rows(ctx):
    def body(group, world, ts):
        torch = _torch()
        out = []
        for k, t in enumerate(ts):
            if t.dim() == 0:
                raise ctx.input_error(k + 1, "needs at least one dimension")
            if t.dim() > _MAX_DIMS:
                raise ctx.input_error(k + 1, "has more than %d dimensions" % _MAX_DIMS)
            # every rank's row count and trailing shape, then rows padded to the longest
            header = torch.tensor([t.shape[0]] + list(t.shape[1:]) + [0] * (_MAX_DIMS - t.dim()),
                                  dtype=torch.int64)
            headers = [torch.empty_like(header) for _ in range(world.size)]
            group.allgather([headers], [header]).wait()
            rows = [int(h[0]) for h in headers]
            for r, h in enumerate(headers):
                if list(h[1:]) != list(header[1:]):
                    raise ctx.input_error(k + 1, "has trailing shape %s here but %s on rank %d"
                                          % (list(t.shape[1:]), [int(d) for d in h[1:t.dim()]], r))
            padded = torch.zeros((max(rows),) + tuple(t.shape[1:]), dtype=t.dtype)
            padded[:t.shape[0]] = t
            gathered = [torch.empty_like(padded) for _ in range(world.size)]
            group.allgather([gathered], [padded]).wait()
            out.append(torch.cat([g[:n] for g, n in zip(gathered, rows)]))
        return out
    return _collective(ctx, body)


def _dist():
    from torch import distributed
    return distributed


_DTYPE_CODES = {np.dtype(t): i for i, t in enumerate(
    (np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8, np.int16, np.bool_))}
_CODE_DTYPES = {i: d for d, i in _DTYPE_CODES.items()}
_MAX_DIMS = 8


def _peer(ctx, inputs, index, arg):
    value = int(np.asarray(inputs[index]).reshape(-1)[0]) if len(inputs) > index else ctx.int(arg)
    return value


@register_kernel("SendTensor", engine=GLOO)
def send_tensor(ctx):
    raw = ctx.bool("raw_buffer")

    def run(world, x, *rest):
        group = _world(ctx, world)
        inputs = (world, x) + rest
        dst, tag = _peer(ctx, inputs, 2, "dst"), _peer(ctx, inputs, 3, "tag")
        if not 0 <= dst < world.size or dst == world.rank:
            raise ctx.error("dst %d is not another rank of [0, %d)" % (dst, world.size))
        t = _as_torch(ctx, x, 1)
        if not raw:
            if x.dtype not in _DTYPE_CODES or x.ndim > _MAX_DIMS:
                raise ctx.input_error(1, "cannot send %s %s with its header" % (x.dtype, list(x.shape)))
            header = np.zeros(_MAX_DIMS + 2, np.int64)
            header[0], header[1] = _DTYPE_CODES[x.dtype], x.ndim
            header[2:2 + x.ndim] = x.shape
            group.send([_torch().from_numpy(header)], dst, tag).wait()
        group.send([t.reshape(-1)], dst, tag).wait()
    return run


@register_kernel("ReceiveTensor", engine=GLOO)
def receive_tensor(ctx):
    raw = ctx.bool("raw_buffer")

    def run(world, y, *rest):
        group = _world(ctx, world)
        inputs = (world, y) + rest
        src, tag = _peer(ctx, inputs, 2, "src"), _peer(ctx, inputs, 3, "tag")
        if not 0 <= src < world.size or src == world.rank:
            raise ctx.error("src %d is not another rank of [0, %d)" % (src, world.size))
        torch = _torch()
        if raw:
            if not isinstance(y, np.ndarray):
                raise ctx.input_error(1, "raw_buffer needs Y pre-allocated with its shape and type")
            out = torch.from_numpy(np.empty_like(y).reshape(-1))
            shape = y.shape
        else:
            header = torch.zeros(_MAX_DIMS + 2, dtype=torch.int64)
            group.recv([header], src, tag).wait()
            code, ndim = int(header[0]), int(header[1])
            shape = tuple(int(d) for d in header[2:2 + ndim])
            out = torch.from_numpy(np.empty(int(np.prod(shape, dtype=np.int64)), _CODE_DTYPES[code]))
        group.recv([out], src, tag).wait()
        return out.numpy().reshape(shape), np.array([src], np.int32), np.array([tag], np.int32)
    return run


# --------------------------------------------------------------------------- store ops

register_schema(OpSchema("FileStoreHandlerCreate", num_inputs=0, num_outputs=1,
                         args=(Arg("path", "string", "", check=FileName(),
                                   doc="directory shared by the processes"),
                               Arg("prefix", "string", "", doc="namespace inside it")),
                         doc="A store handler over files in `path` (see caffe2py/distributed.py)."))
register_schema(OpSchema("RedisStoreHandlerCreate", num_inputs=0, num_outputs=1,
                         args=(Arg("host", "string", "", doc="Redis server host (required)"),
                               Arg("port", "int", 0, doc="Redis server port (required)"),
                               Arg("prefix", "string", "", doc="key prefix (e.g. the run id)"),
                               Arg("timeout_ms", "int", -1,
                                   doc="caffe2py's: connect and wait timeout (-1: 30 s, Caffe2's)")),
                         doc="A store handler over keys on a Redis server (needs pip install caffe2py[redis])."))
register_schema(OpSchema("StoreSet", num_inputs=2, num_outputs=0,
                         args=(Arg("blob_name", "string", "", doc="key (default: the data blob's name)"),),
                         doc="Stores the serialized tensor of input 1 under its blob name."))
register_schema(OpSchema("StoreGet", num_inputs=1, num_outputs=1,
                         args=(Arg("blob_name", "string", "", doc="key (default: the output blob's name)"),),
                         doc="Waits for the key, then outputs the stored tensor."))
register_schema(OpSchema("StoreAdd", num_inputs=1, num_outputs=1,
                         args=(Arg("blob_name", "string", required=True, doc="counter key"),
                               Arg("add_value", "int", 1, doc="amount added")),
                         doc="Adds to a counter in the store (0 when new); outputs the new value (int64 [1])."))
register_schema(OpSchema("StoreWait", num_inputs=(1, 2), num_outputs=0,
                         args=(Arg("blob_names", "strings", [], doc="keys to wait for"),),
                         doc="Waits until every key (argument, or the strings of input 1) is set."))


def _handler(ctx, value):
    if not all(hasattr(value, m) for m in ("set", "get", "wait")):
        raise ctx.input_error(0, "expected a store handler (FileStoreHandlerCreate, RedisStoreHandlerCreate), "
                                 "got %s" % type(value).__name__)
    return value


@register_kernel("FileStoreHandlerCreate")
def file_store_handler_create(ctx):
    path, prefix = ctx.string("path"), ctx.string("prefix")
    if not path:
        raise ctx.error("argument 'path' must be given")

    def run():
        problem = store_dir_problem(path)      # checked when it runs: files come and go
        if problem:
            raise ctx.error("argument 'path' = '%s': %s" % (path, problem))
        return FileStoreHandler(path, prefix)
    return run


@register_kernel("RedisStoreHandlerCreate")
def redis_store_handler_create(ctx):
    host, port, prefix = ctx.string("host"), ctx.int("port"), ctx.string("prefix")
    if not host:
        raise ctx.error("host is a required argument")
    if port == 0:
        raise ctx.error("port is a required argument")
    if not 0 < port < 65536:
        raise ctx.error("argument 'port' %d is outside (0, 65536)" % port)
    timeout = _timeout(ctx)

    def run():
        return RedisStoreHandler(host, port, prefix, timeout)
    return run


@register_kernel("StoreSet")
def store_set(ctx):
    name = ctx.string("blob_name") or ctx.inputs[1]

    def run(handler, data):
        if not isinstance(data, np.ndarray):
            raise ctx.input_error(1, "only tensors can be stored, got %s" % type(data).__name__)
        blob = caffe2_pb2.BlobProto(name=name, type="Tensor")
        blob.tensor.CopyFrom(numpy_to_tensor(data, name=name))
        _handler(ctx, handler).set(name, blob.SerializeToString())
    return run


@register_kernel("StoreGet")
def store_get(ctx):
    name = ctx.string("blob_name") or ctx.outputs[0]

    def run(handler):
        raw = _handler(ctx, handler).get(name)
        try:
            blob = caffe2_pb2.BlobProto.FromString(raw)
        except Exception as exc:  # noqa: BLE001
            raise ctx.error("the value stored under '%s' is not a serialized blob: %s" % (name, exc)) from None
        return tensor_to_numpy(blob.tensor)
    return run


@register_kernel("StoreAdd")
def store_add(ctx):
    name, amount = ctx.string("blob_name"), ctx.int("add_value")

    def run(handler):
        return np.array([_handler(ctx, handler).add(name, amount)], np.int64)
    return run


@register_kernel("StoreWait")
def store_wait(ctx):
    # Caffe2's op reads the repeated argument 'blob_name'; its doc says 'blob_names': take either
    names = ctx.strings("blob_names") if ctx.has("blob_names") else ctx.strings("blob_name", [])

    def run(handler, *rest):
        wanted = names
        if rest:
            if names:
                raise ctx.error("cannot specify both argument and input blob")
            wanted = [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(rest[0]).reshape(-1)]
        try:
            _handler(ctx, handler).wait(list(wanted))
        except Caffe2Error as exc:
            raise ctx.error(str(exc)) from None
    return run


try:
    from caffe2py.gradients import should_not_do_gradient
except ImportError:          # a build without the gradient registry
    should_not_do_gradient = None

if should_not_do_gradient is not None:
    should_not_do_gradient(*_COMM, "FileStoreHandlerCreate", "RedisStoreHandlerCreate", "StoreSet", "StoreGet",
                           "StoreAdd", "StoreWait")
