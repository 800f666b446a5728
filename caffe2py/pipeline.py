"""Caffe2's caffe2.python.pipeline: pipe records from a reader into a writer on
several threads, processing them on the way.

    with TaskGroup() as tg:
        queue = pipe(dataset.reader(), processor=my_processor, num_threads=4)
        pipe(queue, other_dataset.writer())
    LocalSession().run(tg)

pipe(input, output=None, num_threads=1, processor=None, name=None, capacity=None,
group=None) adds a Task to the current TaskGroup (or `group`) that reads
`input` (a Reader, or anything with .reader(): a Queue, a Dataset's stream) on
num_threads threads, passes each record through `processor` and writes it to
`output` (a Writer, or anything with .writer()); without an output a Queue of
`capacity` records (100 by default) is made and returned, to be piped on.
num_runtime_threads=N (the default way) builds the read and write nets once and
runs N instances of them; num_threads=N > 1 (Caffe2's older way, for readers
and processors that must be called once per thread) builds them N times.
A thread count of 0 makes no task and returns the processing reader itself.

A processor is called once per thread with the record read (its blobs) and
returns the processed record: a schema record, (record, stop blob), (nets,
record, stop blob), an Output, or nets only (nothing written). It may build its
ops with net_builder.ops (the NetBuilder is active while it runs). A core.Net
with input and output records set is a processor too (NetProcessor: the net is
cloned, renamed per thread, with its input record bound to the record read).
"""
from . import core, queue_util
from .dataio import Reader, Writer
from .net_builder import NetBuilder, ops
from .schema import Field, as_record
from .task import Task, TaskGroup

DEFAULT_QUEUE_CAPACITY = 100


class Output:
    """What a processor returns: nets to run, the record they make, an optional
    stop blob. Without nets, the ops built through net_builder.ops count."""

    def __init__(self, nets=None, record=None, should_stop=None):
        built = NetBuilder.current().get()
        assert nets is None or len(built) == 0, "Cannot both use `ops` syntax and return a list of nets."
        if nets is None:
            nets = built
        if isinstance(nets, core.Net):
            nets = [nets]
        self.nets = [] if nets is None else list(nets)
        self.record = None if record is None else as_record(record)
        self.should_stop = should_stop


def _init_output(output, capacity, global_init_net, global_exit_net):
    if isinstance(output, Writer):
        assert capacity is None, "capacity would not be used."
        out_queue, writer = None, output
    elif hasattr(output, "writer"):
        assert capacity is None, "capacity would not be used."
        out_queue, writer = output, output.writer()
    elif output is None:
        out_queue = queue_util.Queue(capacity=capacity if capacity is not None else DEFAULT_QUEUE_CAPACITY)
        writer = out_queue.writer()
    else:
        raise ValueError("output must be a reader, queue or stream.")
    writer.setup_ex(global_init_net, global_exit_net)
    return out_queue, writer


def make_processor(processor):
    if processor is None:
        return lambda rec: rec
    if isinstance(processor, core.Net):
        return NetProcessor(processor)
    return processor


def normalize_processor_output(output):
    """An Output from any of the forms a processor may return (module doc)."""
    if isinstance(output, Output):
        return output
    if isinstance(output, Field):
        return Output(record=output)
    if isinstance(output, tuple):
        if len(output) == 2 and isinstance(output[0], Field) and isinstance(output[1], core.BlobReference):
            return Output(None, *output)             # (record, stop blob)
        return Output(*output)                       # (nets, record, stop blob)
    return Output(output)                            # nets only


def pipe(input, output=None, num_threads=1, processor=None, name=None, capacity=None, group=None,  # noqa: A002
         num_runtime_threads=1):
    """See the module doc; returns the output queue (or None), or the reader
    when num_threads (or num_runtime_threads) is 0."""
    result, _ = _pipe_step(input, output, num_threads, processor, name, capacity, group, num_runtime_threads)
    return result


def pipe_and_output(input, output=None, num_threads=1, processor=None, name=None, capacity=None,  # noqa: A002
                    group=None, num_runtime_threads=1, final_outputs=None):
    """pipe, and the task also returns final_outputs: (queue, TaskOutput(s))."""
    assert num_threads > 0
    result, task = _pipe_step(input, output, num_threads, processor, name, capacity, group,
                              num_runtime_threads, final_outputs)
    outputs = None
    if final_outputs is not None:
        outputs = task.outputs()
        if type(final_outputs) not in (list, tuple):
            outputs = outputs[0]
    return result, outputs


def processor_name(processor):
    if hasattr(processor, "name"):
        return processor.name
    function_name = getattr(processor, "__name__", None)
    if function_name is not None and callable(processor):
        if function_name == "<lambda>":
            return processor.__module__
        if hasattr(processor, "__self__"):              # a bound method
            return "%s.%s" % (type(processor.__self__).__name__, function_name)
        return function_name
    return processor.__class__.__name__


def _pipe_step(input, output=None, num_threads=1, processor=None, name=None, capacity=None,  # noqa: A002
               group=None, num_runtime_threads=1, final_outputs=None):
    num_runtime_threads = 1 if num_runtime_threads is None else num_runtime_threads
    assert num_threads <= 1 or num_runtime_threads <= 1, \
        "Only one of num_threads or num_runtime_threads must be set."
    if isinstance(input, Reader):
        reader = input
    elif hasattr(input, "reader"):
        reader = input.reader()
    else:
        raise ValueError("in must be a reader, queue or stream.")
    if processor is not None:
        reader = ProcessingReader(reader, processor)
    if num_threads == 0 or num_runtime_threads == 0:
        assert output is None, "with no threads the reader is returned: there is nothing to write to"
        return reader, None

    if name is None and processor is not None:
        name = processor_name(processor)
    if name is None and output is not None:
        name = "pipe_into:%s" % processor_name(output)
    if name is None:
        name = "pipe_from:%s" % processor_name(input)
    if num_threads > 1:
        return _static_threads_task(name, group, final_outputs, reader, num_threads, output, capacity)
    return _runtime_threads_task(name, group, final_outputs, reader, num_runtime_threads, output, capacity)


def _runtime_threads_task(name, group, final_outputs, reader, num_threads, output, capacity):
    """One set of read/write nets; the task runs num_threads instances of it
    (each in a workspace of its own, the pipe's setup once for all)."""
    with Task(name=name, group=group, outputs=final_outputs, num_instances=num_threads) as task:
        global_exit_net = core.Net("pipe:exit")
        global_init_net = core.Net("pipe:init")
        reader.setup_ex(global_init_net, global_exit_net)
        init_net = core.Net("pipe:instance:init")
        exit_net = core.Net("pipe:instance:exit")
        read_nets, status, record = reader.read_record_ex(init_net, exit_net)
        init_net.ConstantFill([], [status], shape=[], value=False, dtype=core.DataType.BOOL)
        out_queue, write_nets = None, []
        if record is not None:
            out_queue, writer = _init_output(output, capacity, global_init_net, global_exit_net)
            write_nets, _ = writer.write_record_ex(record, init_net, exit_net, status)
        with ops.task_init():
            ops.net(global_init_net)
        with ops.task_instance_init():
            ops.net(init_net)
        ops.net(core.execution_step("body", list(read_nets) + list(write_nets), should_stop_blob=status))
        with ops.task_instance_exit():
            ops.net(exit_net)
        with ops.task_exit():
            ops.net(global_exit_net)
    return out_queue, task


def _static_threads_task(name, group, final_outputs, reader, num_threads, output, capacity):
    """The read/write nets built once per thread (for readers and processors that
    must be called once per thread), run as concurrent substeps."""
    with Task(name=name, group=group, outputs=final_outputs) as task:
        global_exit_net = core.Net("exit")
        global_init_net = core.Net("init")
        reader.setup_ex(global_init_net, global_exit_net)
        out_queue, writer = None, None
        threads = []
        for thread_id in range(num_threads):
            with NetBuilder(name="t:%d" % thread_id) as thread:
                init_net = core.Net("init")
                exit_net = core.Net("exit")
                read_nets, status, record = reader.read_record_ex(init_net, exit_net)
                init_net.ConstantFill([], [status], shape=[], value=False, dtype=core.DataType.BOOL)
                write_nets = []
                if record is not None:
                    if writer is None:
                        # the output queue is named after the task, not the thread
                        with NetBuilder(_fullname=task.name):
                            out_queue, writer = _init_output(output, capacity, global_init_net, global_exit_net)
                    write_nets, _ = writer.write_record_ex(record, init_net, exit_net, status)
                ops.net(init_net)
                ops.net(core.execution_step("body", list(read_nets) + list(write_nets), should_stop_blob=status))
                ops.net(exit_net)
            threads.append(core.to_execution_step(thread))
        ops.net(global_init_net)
        ops.net(core.execution_step("body", threads, concurrent_substeps=True))
        ops.net(global_exit_net)
    return out_queue, task


class ProcessingReader(Reader):
    """Reads from `reader` and returns what `processor` makes of each record.
    Reading stops when the reader stops, or when the processor's stop blob (or
    an ops.stop_if inside it) says so."""

    def __init__(self, reader, processor):
        super().__init__()
        self.reader = reader
        self.processor = make_processor(processor)

    def setup_ex(self, init_net, finish_net):
        self.reader.setup_ex(init_net, finish_net)

    def read_ex(self, init_net, exit_net):
        read_nets, status, record = self.reader.read_record_ex(init_net, exit_net)
        # the processor may build ops with net_builder.ops; Output collects them
        with NetBuilder() as builder:
            result = normalize_processor_output(self.processor(record))
        read_nets = list(read_nets) + result.nets
        if result.should_stop is not None or builder._stop_blob is not None:
            stop_net = core.Net("stop_net")
            for stop in (result.should_stop, builder._stop_blob):
                if stop is not None:
                    stop_net.Or([status, stop], [status])
            read_nets.append(stop_net)
        if hasattr(self.processor, "setup"):
            init_net.add_attribute(TaskGroup.LOCAL_SETUP, self.processor)
        self._set_schema(result.record)
        fields = result.record.field_blobs() if result.record else None
        return read_nets, status, fields


class NetProcessor:
    """A processor that runs a copy of `net` per thread (blobs renamed with the
    thread's prefix, the input record bound to the record read); the output is
    the net's output record. thread_init_nets are copied the same way and run by
    the group's local setup."""

    def __init__(self, net, stop_signal=None, thread_init_nets=None, name=None):
        assert isinstance(net, core.Net)
        assert stop_signal is None or isinstance(stop_signal, core.BlobReference)
        self.name = name or str(net)
        self.thread_init_nets = thread_init_nets or []
        self.net = net
        self._stop_signal = stop_signal
        self._blob_maps = []
        self._frozen = False
        self._cloned_init_nets = []

    def setup(self, init_net):
        self._frozen = True
        cloned, self._cloned_init_nets = self._cloned_init_nets, []
        return cloned

    def __call__(self, rec):
        assert not self._frozen, "NetProcessor used after its setup ran"
        prefix = NetBuilder.current().name + "/"
        blob_remap = {}
        for net in self.thread_init_nets:
            new_net, _ = core.clone_and_bind_net(net, str(net) + prefix, prefix, blob_remap)
            self._cloned_init_nets.append(new_net)
        new_net, remappings = core.clone_and_bind_net(self.net, str(self.net) + prefix, prefix, blob_remap, rec)
        if self._stop_signal is None:
            stop_signal = None
        elif str(self._stop_signal) in remappings:
            stop_signal = core.BlobReference(remappings[str(self._stop_signal)], net=new_net)
        else:
            stop_signal = self._stop_signal
        self._blob_maps.append(remappings)
        return Output([new_net], new_net.output_record(), stop_signal)

    def blob_maps(self):
        self._frozen = True
        return self._blob_maps
