"""Runtime ops: counters, atomics, mutexes, Print, Assert, NanCheck, Summarize,
timers, stat registries, string ops, Free, GetAllBlobNames, FeedBlob, maps,
LastNWindowCollector and ReservoirSampling. The objects they keep in blobs are
in caffe2py/runtime_objects.py."""
import os
import sys

import numpy as np

from caffe2py import runtime_objects as R
from caffe2py.blob_scopes import local_names, write_through
from caffe2py.kernels.cpu.tensor import strings as S
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import (Arg, OpSchema, TensorType, commits_outputs, leave_out, register_kernel,
                               register_schema)

DT = caffe2_pb2.TensorProto
_SCALAR = ()


def _schema(name, n_in, n_out, doc, args=(), inference=None, **kwargs):
    register_schema(OpSchema(name, num_inputs=n_in, num_outputs=n_out, args=args, doc=doc,
                             inference=inference, **kwargs))


def _object(ctx, value, index, kind, what):
    if not isinstance(value, kind):
        raise ctx.input_error(index, "expected %s, got %s" % (what, type(value).__name__))
    return value


def _scalar_type(dtype):
    return lambda ctx, ins: [TensorType(_SCALAR, dtype)]


# --------------------------------------------------------------------------- counters

def _init_count(ctx):
    count = ctx.int("init_count")
    if count < 0:
        raise ctx.error("negative init_count is not permitted, got %d" % count)
    return count


_COUNT_ARG = (Arg("init_count", "int", 0, doc="initial count, >= 0"),)
_schema("CreateCounter", 0, 1, "A count-down counter starting at init_count.", _COUNT_ARG)
_schema("ResetCounter", 1, (0, 1), "Sets the counter to init_count; outputs the previous value (int64 scalar).",
        _COUNT_ARG)
_schema("CountDown", 1, 1, "If the count is > 0, decrements it and outputs false; else outputs true.",
        inference=_scalar_type(DT.BOOL))
_schema("CheckCounterDone", 1, 1, "Outputs whether the count is <= 0.", inference=_scalar_type(DT.BOOL))
_schema("CountUp", 1, 1, "Increments the count; outputs the value before (int64 scalar).",
        inference=_scalar_type(DT.INT64))
_schema("RetrieveCount", 1, 1, "Outputs the current count (int64 scalar).", inference=_scalar_type(DT.INT64))


@register_kernel("CreateCounter")
def create_counter(ctx):
    count = _init_count(ctx)
    return lambda: R.Counter(count)


@register_kernel("ResetCounter")
def reset_counter(ctx):
    count = _init_count(ctx)

    def run(counter):
        previous = _object(ctx, counter, 0, R.Counter, "a counter (CreateCounter)").reset(count)
        return np.array(previous, np.int64) if ctx.n_outputs else None
    return run


def _counter_op(method, dtype):
    def factory(ctx):
        def run(counter):
            value = getattr(_object(ctx, counter, 0, R.Counter, "a counter (CreateCounter)"), method)()
            return np.array(value, dtype)
        return run
    return factory


register_kernel("CountDown")(_counter_op("count_down", np.bool_))
register_kernel("CheckCounterDone")(_counter_op("check_if_done", np.bool_))
register_kernel("CountUp")(_counter_op("count_up", np.int64))
register_kernel("RetrieveCount")(_counter_op("retrieve", np.int64))


# --------------------------------------------------------------------------- atomics and mutexes

_schema("CreateMutex", 0, 1, "Outputs an unlocked mutex.")
_schema("AtomicFetchAdd", 3, 2, "Under the mutex (input 0): outputs a + b and a, for int32 scalars a, b.",
        allow_inplace={(1, 0)}, inference=lambda ctx, ins: [TensorType(_SCALAR, DT.INT32)] * 2)
_schema("AtomicFetchAdd64", 3, 2, "AtomicFetchAdd for int64 scalars.", allow_inplace={(1, 0)},
        inference=lambda ctx, ins: [TensorType(_SCALAR, DT.INT64)] * 2)
_schema("CreateAtomicBool", 0, 1, "Outputs an atomic bool set to false.")
_schema("ConditionalSetAtomicBool", 2, 0, "Sets the atomic bool (input 0) to true if the bool input 1 is true.")
_schema("CheckAtomicBool", 1, 1, "Outputs the atomic bool's value as a bool [1].",
        inference=lambda ctx, ins: [TensorType((1,), DT.BOOL)])
_schema("AtomicAppend", (3, None), (1, None),
        "Under the mutex (input 0), appends B_i to A_i along the first axis: inputs "
        "(mutex, A_1..A_n, B_1..B_n), outputs A_1..A_n (in place).",
        allow_inplace=lambda i, o: i == o + 1)


@register_kernel("CreateMutex")
def create_mutex(ctx):
    return lambda: R.Mutex()


def _fetch_add(dtype):
    def factory(ctx):
        def run(mutex, a, b):
            _object(ctx, mutex, 0, R.Mutex, "a mutex (CreateMutex)")
            for k, v in ((1, a), (2, b)):
                if not isinstance(v, np.ndarray) or v.dtype != dtype or v.size != 1:
                    raise ctx.input_error(k, "must be a %s scalar, got %s %s"
                                          % (np.dtype(dtype).name, getattr(v, "dtype", type(v).__name__),
                                             list(np.shape(v))))
            with mutex:
                fetched = dtype(a.reshape(-1)[0])
                return np.array(fetched + dtype(b.reshape(-1)[0]), dtype), np.array(fetched, dtype)
        return run
    return factory


register_kernel("AtomicFetchAdd")(_fetch_add(np.int32))
register_kernel("AtomicFetchAdd64")(_fetch_add(np.int64))


@register_kernel("CreateAtomicBool")
def create_atomic_bool(ctx):
    return lambda: R.AtomicBool(False)


@register_kernel("ConditionalSetAtomicBool")
def conditional_set_atomic_bool(ctx):
    def run(flag, condition):
        _object(ctx, flag, 0, R.AtomicBool, "an atomic bool (CreateAtomicBool)")
        if not isinstance(condition, np.ndarray) or condition.dtype != np.bool_ or condition.size < 1:
            raise ctx.input_error(1, "must be a bool tensor")
        if condition.reshape(-1)[0]:
            flag.value = True
    return run


@register_kernel("CheckAtomicBool")
def check_atomic_bool(ctx):
    return lambda flag: np.array([_object(ctx, flag, 0, R.AtomicBool, "an atomic bool").value])


@register_kernel("AtomicAppend")
def atomic_append(ctx):
    fields = (ctx.n_inputs - 1) // 2
    if ctx.n_inputs != 1 + 2 * fields or ctx.n_outputs != fields:
        raise ctx.error("takes a mutex and n pairs of inputs with n outputs; got %d inputs, %d outputs"
                        % (ctx.n_inputs, ctx.n_outputs))
    for i in range(fields):
        if ctx.outputs[i] != ctx.inputs[1 + i]:
            raise ctx.error("appended-to arguments must be in-place: output %d is '%s', input %d is '%s'"
                            % (i, ctx.outputs[i], 1 + i, ctx.inputs[1 + i]))

    # Nets appending concurrently (dataset writers on several threads): the value
    # to append to is read inside the mutex from the run's view (this run's own
    # earlier writes, else the workspace), and the result written to the workspace
    # itself at once; a value loaded when the net started may be out of date.
    @commits_outputs
    def run(blobs, mutex, *tensors):
        _object(ctx, mutex, 0, R.Mutex, "a mutex (CreateMutex)")
        with mutex:
            out = []
            for i in range(fields):
                name = ctx.outputs[i]
                a = blobs[name] if name in blobs else tensors[i]
                b = tensors[fields + i]
                if b.ndim < 1:
                    raise ctx.input_error(1 + fields + i, "must have at least one dimension")
                if a.size == 0:
                    out.append(np.array(b, copy=True))
                    continue
                if a.ndim != b.ndim or a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
                    raise ctx.input_error(1 + fields + i, "%s %s cannot be appended to %s %s"
                                          % (b.dtype, list(b.shape), a.dtype, list(a.shape)))
                out.append(np.concatenate([a, b]))
            for i, value in enumerate(out):    # all fields or none
                write_through(blobs, ctx.outputs[i], value)
        return out[0] if fields == 1 else tuple(out)
    return run


# --------------------------------------------------------------------------- Print, Assert, NanCheck, Summarize

_TYPE_NAMES = {np.float32: "float", np.float64: "double", np.int32: "int", np.int64: "long", np.bool_: "bool",
               np.uint8: "unsigned char", np.int8: "signed char", np.int16: "short",
               np.uint16: "unsigned short", np.float16: "c10::Half", np.object_: "std::string"}
_DEFAULT_PRINT_LIMIT = 1000


def tensor_text(name, value, limit=_DEFAULT_PRINT_LIMIT):
    """Caffe2's TensorPrinter line: 'Tensor <name> of type <t>. Dims: (d,...,): v,v,...'."""
    if not isinstance(value, np.ndarray):
        return "Blob of type: %s" % type(value).__name__
    type_name = _TYPE_NAMES.get(value.dtype.type, value.dtype.name)
    dims = "".join("%d," % d for d in value.shape)
    values = ",".join(S.format_value(v) for v in value.reshape(-1)[:limit])
    return "Tensor %s of type %s. Dims: (%s): %s" % (name, type_name, dims, values)


_schema("Print", 1, 0, "Prints input 0 (to <input>.log with to_file); every_n prints every n-th run.",
        (Arg("to_file", "int", 0, doc="write to <blob name>.log in the current directory"),
         Arg("limit", "int", 0, doc="values printed (0: 1000)"),
         Arg("every_n", "int", 1, doc="print on runs 1, n + 1, 2n + 1, ...")))


@register_kernel("Print")
def print_op(ctx):
    limit = ctx.int("limit") or _DEFAULT_PRINT_LIMIT
    every_n = ctx.int("every_n")
    if every_n < 1:
        raise ctx.error("every_n must be >= 1, got %d" % every_n)
    name = ctx.inputs[0]
    path = os.path.join(os.getcwd(), name.replace("/", "_") + ".log") if ctx.int("to_file") else None
    if path is not None:
        open(path, "w").close()         # truncated when the op is created, as Caffe2 does
    state = {"runs": 0}

    def run(value):
        state["runs"] += 1
        if (state["runs"] - 1) % every_n:
            return
        text = tensor_text(name, value, limit)
        if path is None:
            sys.stderr.write(text + "\n")
        else:
            with open(path, "a") as f:
                f.write(text + "\n")
    return run


_schema("Assert", 1, 0, "Fails unless every element of the int32/int64/bool input is nonzero.",
        (Arg("error_msg", "string", "", doc="added to the failure message"),))


@register_kernel("Assert")
def assert_op(ctx):
    message = ctx.string("error_msg")

    def run(value):
        if not isinstance(value, np.ndarray) or value.dtype.type not in (np.int32, np.int64, np.bool_):
            raise ctx.input_error(0, "must be an int32, int64 or bool tensor, got %s"
                                  % getattr(value, "dtype", type(value).__name__))
        flat = value.reshape(-1)
        bad = np.flatnonzero(flat == 0)
        if bad.size:
            text = "Assert failed for element %d in tensor, value: %s" % (bad[0], S.format_value(flat[bad[0]]))
            raise ctx.error(text + ("\nError message: " + message if message else ""))
    return run


_schema("NanCheck", (1, None), 1, "Copies input 0 to the output; fails if input 0 holds NaN or inf.",
        allow_inplace={(0, 0)}, inference=lambda ctx, ins: [ins[0]])


@register_kernel("NanCheck")
def nan_check(ctx):
    def run(x, *others):
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
            raise ctx.input_error(0, "must be a float tensor")
        bad = np.flatnonzero(~np.isfinite(x.reshape(-1)))
        if bad.size:
            lines = ["Tensor contained NaN or inf: [%s]" % ctx.inputs[0]]
            for name, value in zip(ctx.inputs, (x,) + others):
                lines.append(tensor_text(name, value))
                if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                    idx = np.flatnonzero(~np.isfinite(value.reshape(-1)))
                    lines.append("NaN idxs: " + " ".join(str(i) for i in idx[:100]))
            raise ctx.error("\n".join(lines))
        return x
    return run


_schema("Summarize", 1, (0, 1), "min, max, mean and sample standard deviation of a float tensor, as a "
        "float [4]; with to_file also appended to <input>.summary.",
        (Arg("to_file", "int", 0, doc="append the four values to <blob name>.summary"),),
        inference=lambda ctx, ins: [TensorType((4,), DT.FLOAT)])


@register_kernel("Summarize")
def summarize(ctx):
    path = (os.path.join(os.getcwd(), ctx.inputs[0].replace("/", "_") + ".summary")
            if ctx.int("to_file") else None)
    if path is not None:
        open(path, "w").close()

    def run(x):
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.size == 0:
            raise ctx.input_error(0, "must be a non-empty float tensor")
        flat = x.reshape(-1).astype(np.float64)
        std = 0.0 if flat.size == 1 else float(np.std(flat, ddof=1))
        stats = np.array([flat.min(), flat.max(), flat.mean(), std], np.float32)
        if path is not None:
            with open(path, "a") as f:
                f.write("%g %g %g %g\n" % tuple(stats))
        return stats if ctx.n_outputs else None
    return run


# --------------------------------------------------------------------------- timers and stats

_schema("TimerBegin", 0, 1, "Starts a wall-clock timer (kept by this op) and outputs it.",
        (Arg("counter_name", "string", None, doc="timer name (default: the output name)"),))
_schema("TimerEnd", 1, 0, "Stops the timer, adding its time to the global stat '<name>/time_ns'.")
_schema("TimerGetAndEnd", 1, 1, "Outputs the timer's nanoseconds (int64 [1]) and stops it.",
        inference=lambda ctx, ins: [TensorType((1,), DT.INT64)])
_schema("TimerGet", 1, 1, "Outputs the running timer's nanoseconds (int64 scalar).",
        inference=_scalar_type(DT.INT64))
_schema("WallClockTime", 0, 1, "Outputs nanoseconds since the epoch (int64 scalar).",
        inference=_scalar_type(DT.INT64))
_schema("CpuUtilizationReport", 1, 0, "Adds 100 x the float input to the global stat "
        "'<stats_name>/cpu_utilization'.",
        (Arg("stats_name", "string", "utilization", doc="stat group name"),))


@register_kernel("TimerBegin")
def timer_begin(ctx):
    timer = R.TimerInstance(ctx.string("counter_name") or ctx.outputs[0])

    def run():
        timer.begin()
        return timer
    return run


def _timer(ctx, value):
    timer = _object(ctx, value, 0, R.TimerInstance, "a timer (TimerBegin)")
    if not timer.running:
        raise ctx.input_error(0, "the timer '%s' is not running" % timer.name)
    return timer


@register_kernel("TimerEnd")
def timer_end(ctx):
    def run(timer):
        _timer(ctx, timer).end()
    return run


@register_kernel("TimerGetAndEnd")
def timer_get_and_end(ctx):
    return lambda timer: np.array([_timer(ctx, timer).end()], np.int64)


@register_kernel("TimerGet")
def timer_get(ctx):
    return lambda timer: np.array(_timer(ctx, timer).get_ns(), np.int64)


@register_kernel("WallClockTime")
def wall_clock_time(ctx):
    import time
    return lambda: np.array(time.time_ns(), np.int64)


@register_kernel("CpuUtilizationReport")
def cpu_utilization_report(ctx):
    key = ctx.string("stats_name") + "/cpu_utilization"

    def run(utilization):
        if not isinstance(utilization, np.ndarray) or utilization.size < 1:
            raise ctx.input_error(0, "must be a float tensor with the utilization")
        value = float(utilization.reshape(-1)[0])
        if not np.isfinite(value):
            raise ctx.input_error(0, "the utilization must be finite, got %r" % value)
        R.global_stat_registry().update(key, int(value * 100))
    return run


_schema("StatRegistryCreate", 0, 1, "Outputs a new, empty stat registry.")
_schema("StatRegistryUpdate", (2, 3), 0, "Adds int64 values (input 1) to the counters named by the "
        "strings of input 0, in the registry of input 2 or the global one.")
_schema("StatRegistryExport", (0, 1), 3, "Outputs keys (strings), values (int64) and timestamps (int64 ns) "
        "of every counter of the registry (input 0, or the global one); reset zeroes them.",
        (Arg("reset", "bool", True, doc="zero the counters after reading them"),))


@register_kernel("StatRegistryCreate")
def stat_registry_create(ctx):
    return lambda: R.StatRegistry()


def _registry(ctx, args, index):
    if len(args) > index:
        return _object(ctx, args[index], index, R.StatRegistry, "a stat registry (StatRegistryCreate)")
    return R.global_stat_registry()


@register_kernel("StatRegistryUpdate")
def stat_registry_update(ctx):
    def run(keys, values, *rest):
        registry = _registry(ctx, (keys, values) + rest, 2)
        if np.size(keys) != np.size(values):
            raise ctx.input_error(1, "has %d values for %d keys" % (np.size(values), np.size(keys)))
        if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu":
            raise ctx.input_error(1, "must be an integer tensor")
        for key, value in zip(np.asarray(keys).reshape(-1), values.reshape(-1)):
            registry.update(key.decode() if isinstance(key, bytes) else str(key), int(value))
    return run


@register_kernel("StatRegistryExport")
def stat_registry_export(ctx):
    reset = ctx.bool("reset")

    def run(*args):
        data = _registry(ctx, args, 0).publish(reset)
        keys = np.empty(len(data), dtype=object)
        keys[:] = [key for key, _, _ in data]
        return (keys, np.array([v for _, v, _ in data], np.int64).reshape(-1),
                np.array([ts for _, _, ts in data], np.int64).reshape(-1))
    return run


# --------------------------------------------------------------------------- strings

def _strings(ctx, value):
    if not isinstance(value, np.ndarray) or value.dtype != object:
        raise ctx.input_error(0, "must be a string tensor, got %s" % getattr(value, "dtype", type(value).__name__))
    return value


_schema("StringPrefix", 1, 1, "The first `length` bytes of each string.",
        (Arg("length", "int", 3, doc="maximum prefix size in bytes"),), inference=lambda ctx, ins: [ins[0]])
_schema("StringSuffix", 1, 1, "The last `length` bytes of each string.",
        (Arg("length", "int", 3, doc="maximum suffix size in bytes"),), inference=lambda ctx, ins: [ins[0]])
_schema("StringStartsWith", 1, 1, "Whether each string starts with `prefix` (bool, same shape).",
        (Arg("prefix", "string", "", doc="the prefix"),),
        inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.BOOL)])
_schema("StringEndsWith", 1, 1, "Whether each string ends with `suffix` (bool, same shape).",
        (Arg("suffix", "string", "", doc="the suffix"),),
        inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.BOOL)])
_schema("StringJoin", 1, 1, "Joins each row (axis 0) or column (axis 1) of a 1-D/2-D tensor into a string, "
        "every element followed by the delimiter.",
        (Arg("delimiter", "string", ",", doc="written after every element"),
         Arg("axis", "int", 0, doc="0: one string per row; 1: one per column")))


def _length(ctx):
    length = ctx.int("length")
    if length < 0:
        raise ctx.error("length must be >= 0, got %d" % length)
    return length


@register_kernel("StringPrefix")
def string_prefix(ctx):
    length = _length(ctx)
    return lambda x: S.prefix(_strings(ctx, x), length)


@register_kernel("StringSuffix")
def string_suffix(ctx):
    length = _length(ctx)
    return lambda x: S.suffix(_strings(ctx, x), length)


@register_kernel("StringStartsWith")
def string_starts_with(ctx):
    text = ctx.op_def.arg[[a.name for a in ctx.op_def.arg].index("prefix")].s if ctx.has("prefix") else b""
    return lambda x: S.starts_with(_strings(ctx, x), text)


@register_kernel("StringEndsWith")
def string_ends_with(ctx):
    text = ctx.op_def.arg[[a.name for a in ctx.op_def.arg].index("suffix")].s if ctx.has("suffix") else b""
    return lambda x: S.ends_with(_strings(ctx, x), text)


@register_kernel("StringJoin")
def string_join(ctx):
    delimiter, axis = ctx.string("delimiter"), ctx.int("axis")
    if axis not in (0, 1):
        raise ctx.error("axis must be 0 or 1, got %d" % axis)

    def run(x):
        if not isinstance(x, np.ndarray) or x.size == 0 or x.ndim > 2 or x.ndim < 1:
            raise ctx.input_error(0, "must be a non-empty 1-D or 2-D tensor, got shape %s" % list(np.shape(x)))
        if axis == 1 and x.ndim != 2:
            raise ctx.input_error(0, "axis 1 needs a 2-D tensor, got shape %s" % list(x.shape))
        return S.join(x, delimiter, axis)
    return run


# --------------------------------------------------------------------------- workspace blobs

_schema("Free", (0, None), (1, None), "Empties the output blobs (inputs only order the op after their producers).",
        allow_inplace=lambda i, o: True)
_schema("GetAllBlobNames", 0, 1, "The names of all blobs of the workspace (1-D strings).",
        (Arg("include_shared", "bool", True, doc="include the blobs of parent workspaces"),))
_schema("FeedBlob", 0, 1, "Sets the output blob to the bytes of the `value` argument.",
        (Arg("value", "string", required=True, doc="the value"),))


@register_kernel("Free")
def free(ctx):
    n = ctx.n_outputs
    return lambda *inputs: None if n == 1 else (None,) * n


@register_kernel("GetAllBlobNames")
def get_all_blob_names(ctx):
    ctx.use_workspace()
    include_shared = ctx.bool("include_shared")

    def run(blobs):
        names = set(blobs) if include_shared else local_names(blobs)
        out = np.empty(len(names), dtype=object)
        out[:] = sorted(names)
        return out
    return run


@register_kernel("FeedBlob")
def feed_blob(ctx):
    arg = next(a for a in ctx.op_def.arg if a.name == "value")
    if not arg.HasField("s"):
        raise ctx.error("argument 'value' must be a string")
    value = arg.s
    return lambda: value


# --------------------------------------------------------------------------- maps

_MAP_TYPES = {DT.INT32: np.int32, DT.INT64: np.int64}
_schema("CreateMap", 0, 1, "Outputs an empty map with int32/int64 keys and values.",
        (Arg("key_dtype", "int", DT.INT32, doc="TensorProto data type of the keys"),
         Arg("value_dtype", "int", DT.INT32, doc="TensorProto data type of the values (Caffe2's default INT32)")))
_schema("KeyValueToMap", 2, 1, "A map from 1-D keys and values of the same length.")
_schema("MapToKeyValue", 1, 2, "The keys and values of a map, as two 1-D tensors.")


def _map_dtype(ctx, name):
    dtype = _MAP_TYPES.get(ctx.int(name))
    if dtype is None:
        raise ctx.error("%s must be INT32 or INT64, got %d" % (name, ctx.int(name)))
    return dtype


@register_kernel("CreateMap")
def create_map(ctx):
    key_dtype, value_dtype = _map_dtype(ctx, "key_dtype"), _map_dtype(ctx, "value_dtype")
    return lambda: R.TypedMap(key_dtype, value_dtype)


@register_kernel("KeyValueToMap")
def key_value_to_map(ctx):
    def run(keys, values):
        for k, v in ((0, keys), (1, values)):
            if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.type not in (np.int32, np.int64):
                raise ctx.input_error(k, "must be a 1-D int32 or int64 tensor")
        if keys.size != values.size:
            raise ctx.input_error(1, "has %d values for %d keys" % (values.size, keys.size))
        return R.TypedMap(keys.dtype.type, values.dtype.type, zip(keys.tolist(), values.tolist()))
    return run


@register_kernel("MapToKeyValue")
def map_to_key_value(ctx):
    def run(mapping):
        _object(ctx, mapping, 0, R.TypedMap, "a map (CreateMap / KeyValueToMap)")
        return (np.array(list(mapping.keys()), mapping.key_dtype).reshape(-1),
                np.array(list(mapping.values()), mapping.value_dtype).reshape(-1))
    return run


# --------------------------------------------------------------------------- LastNWindowCollector

_schema("LastNWindowCollector", {3, 4, 5}, (2, 3),
        "Keeps the last num_to_collect rows seen in a ring buffer: inputs (buffer, next cursor, data"
        "[, mutex][, num_visited]), outputs (buffer, next cursor[, num_visited]), in place.",
        (Arg("num_to_collect", "int", -1, doc="rows to keep, > 0"),),
        enforce_inplace={(0, 0), (1, 1), (4, 2)})


@register_kernel("LastNWindowCollector")
def last_n_window_collector(ctx):
    n = ctx.int("num_to_collect")
    if n <= 0:
        raise ctx.error("num_to_collect must be > 0, got %d" % n)
    with_visited = ctx.n_outputs > 2
    if with_visited and ctx.n_inputs < 5:
        raise ctx.error("the num_visited output needs the num_visited input (input 4)")

    def collect(buffer, cursor, data, visited):
        if not isinstance(data, np.ndarray) or data.ndim < 1:
            raise ctx.input_error(2, "must be a tensor with at least one dimension")
        initialized = isinstance(buffer, np.ndarray) and buffer.size > 0
        if initialized and (buffer.ndim != data.ndim or buffer.shape[1:] != data.shape[1:]):
            raise ctx.input_error(0, "buffer %s does not hold rows of data %s" % (list(buffer.shape), list(data.shape)))
        count = data.shape[0]
        outs = []
        if with_visited:
            seen = 0 if not initialized else int(np.asarray(visited).reshape(-1)[0])
            outs = [np.array([seen + count], np.int64)]
        if count == 0:
            kept = buffer if initialized else data.copy()
            return (kept, np.array(cursor if initialized else 0, np.int32)) + tuple(outs)
        if count >= n:
            return (np.ascontiguousarray(data[count - n:]), np.array(0, np.int32)) + tuple(outs)
        start = int(np.asarray(cursor).reshape(-1)[0]) if initialized else 0
        rows = buffer.shape[0] if initialized else 0
        size = min(n, rows + count)
        if not 0 <= start < size:
            raise ctx.input_error(1, "cursor %d is outside the buffer's %d rows" % (start, size))
        out = np.empty((size,) + data.shape[1:], data.dtype)
        if rows:
            out[:rows] = buffer
        first = min(count + start, n) - start
        out[start:start + first] = data[:first]
        out[:count - first] = data[first:count]
        return (out, np.array((start + count) % n, np.int32)) + tuple(outs)

    def run(buffer, cursor, data, *rest):
        mutex = _object(ctx, rest[0], 3, R.Mutex, "a mutex (CreateMutex)") if rest else None
        visited = rest[1] if len(rest) > 1 else None
        if mutex is None:
            result = collect(buffer, cursor, data, visited)
        else:
            with mutex:
                result = collect(buffer, cursor, data, visited)
        return result
    return run


# --------------------------------------------------------------------------- ReservoirSampling

_schema("ReservoirSampling", {4, 7}, {2, 4},
        "Keeps a uniform sample of num_to_collect rows of all data seen (reservoir sampling): inputs "
        "(reservoir, num_visited, data, mutex[, object_id, object_to_pos_map, pos_to_object]), "
        "outputs (reservoir, num_visited[, object_to_pos_map, pos_to_object]), in place.",
        (Arg("num_to_collect", "int", -1, doc="reservoir size, > 0"),),
        enforce_inplace={(0, 0), (1, 1), (5, 2), (6, 3)},
        inputs_outputs_check=lambda i, o: i // 3 == o // 2)


def _stack_rows(rows, data):
    """rows (rows of data) as one tensor of data's dtype. Filled element by element:
    np.array would unpack object rows (PackRecords' packed records) into more dims."""
    out = np.empty((len(rows),) + data.shape[1:], data.dtype)
    for index, row in enumerate(rows):
        out[index] = row
    return out


@register_kernel("ReservoirSampling")
def reservoir_sampling(ctx):
    n = ctx.int("num_to_collect")
    if n <= 0:
        raise ctx.error("num_to_collect must be > 0, got %d" % n)
    seed = ctx.op_def.device_option.random_seed if ctx.op_def.device_option.HasField("random_seed") else None
    rng = np.random.default_rng(seed)
    dedup = ctx.n_inputs == 7

    def run(reservoir, visited, data, mutex, *extra):
        _object(ctx, mutex, 3, R.Mutex, "a mutex (CreateMutex)")
        if not isinstance(data, np.ndarray) or data.ndim < 1:
            raise ctx.input_error(2, "must be a tensor with at least one dimension")
        with mutex:
            # a reservoir of packed records read back from a checkpoint holds nulls
            # (their data is not saved): it starts over, as in Caffe2
            initialized = isinstance(reservoir, np.ndarray) and reservoir.size > 0 and not (
                reservoir.dtype == object and any(r is None for r in reservoir.reshape(-1)))
            if initialized and (reservoir.ndim != data.ndim or reservoir.shape[1:] != data.shape[1:]):
                raise ctx.input_error(0, "reservoir %s does not hold rows of data %s"
                                      % (list(reservoir.shape), list(data.shape)))
            seen = int(np.asarray(visited).reshape(-1)[0]) if initialized else 0
            rows = list(reservoir) if initialized else []
            if dedup:
                ids, pos_map, pos_to_obj = extra
                if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.size != data.shape[0]:
                    raise ctx.input_error(4, "object_id must be 1-D with one id per data row")
                _object(ctx, pos_map, 5, R.TypedMap, "a map (CreateMap)")
                pos_map = R.TypedMap(pos_map.key_dtype, pos_map.value_dtype, pos_map.items() if initialized else ())
                pos_to_obj = list(np.asarray(pos_to_obj).reshape(-1)) if initialized else []
                eligible = {int(i) for i in ids if int(i) not in pos_map}
            for i in range(data.shape[0]):
                if dedup:
                    oid = int(ids[i])
                    if oid not in eligible:
                        continue
                    eligible.discard(oid)
                pos = seen if seen < n else int(rng.integers(0, seen + 1))
                if pos < n:
                    if pos == len(rows):
                        rows.append(data[i])
                        if dedup:
                            pos_to_obj.append(0)
                    else:
                        rows[pos] = data[i]
                    if dedup:
                        pos_map.pop(int(pos_to_obj[pos]), None)
                        pos_to_obj[pos] = oid
                        pos_map[oid] = pos
                seen += 1
            out = _stack_rows(rows, data)
            result = (out, np.array([seen], np.int64))
            if dedup:
                result += (pos_map, np.array(pos_to_obj, np.int64).reshape(-1))
            return result
    return run


# --------------------------------------------------------------------------- left out

_STYLIZER = ("image packing of Caffe2's mobile style-transfer demo (packed int8 BGRA <-> NCHW float "
             "with noise), built for its NEON/OpenGL path; not a general-purpose op")
leave_out("BRGNCHWCToPackedInt8BGRAStylizerDeprocess", _STYLIZER)
leave_out("PackedInt8BGRANHWCToNCHWCStylizerPreprocess", _STYLIZER)


try:
    from caffe2py.gradients import no_gradient, register_gradient, should_not_do_gradient
except ImportError:          # a build without the gradient registry
    register_gradient = None

if register_gradient is not None:
    @register_gradient("NanCheck")
    def _nan_check_gradient(g):
        return [g.op("NanCheck", [g.GO(0)], [g.GI(0)])]

    should_not_do_gradient(
        "CreateCounter", "ResetCounter", "CountDown", "CountUp", "RetrieveCount", "CheckCounterDone",
        "CreateMutex", "AtomicFetchAdd", "AtomicFetchAdd64", "CreateAtomicBool", "ConditionalSetAtomicBool",
        "CheckAtomicBool", "Summarize", "StringPrefix", "StringSuffix", "StringStartsWith",
        "StringEndsWith", "StringJoin", "LastNWindowCollector", "ReservoirSampling", "FeedBlob")
    no_gradient("Print", "Assert", "GetAllBlobNames", "TimerBegin", "TimerEnd", "TimerGet", "TimerGetAndEnd",
                "WallClockTime", "StatRegistryCreate", "StatRegistryUpdate", "StatRegistryExport",
                "CpuUtilizationReport", "Free", "CreateMap", "KeyValueToMap", "MapToKeyValue", "AtomicAppend")
