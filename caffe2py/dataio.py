"""caffe2.python.dataio: the Reader and Writer interfaces datasets implement, and
the readers built on other readers.

A Reader adds ops to a net that read the next batch (`read(net)` returns the
should_stop blob and the field blobs); a Writer adds ops that append a batch
(`write(net, fields)`) and, at the end, ops that signal that no more data comes
(`commit(net)`). The `_ex` forms (setup_ex, read_ex, write_ex) are what
pipeline.pipe uses: nets run once per task (setup) and per thread (local init
and finish nets) around the read and write nets.

Readers over readers: ReaderWithLimit (stop after num_iter batches),
ReaderWithTimeLimit (after `duration` seconds), both with a data_finished()
blob telling whether the data ran out; CounterReader and CountUntil (0, 1, 2,
...); ReaderWithDelay (sleeps before each batch); CompositeReader (several
readers side by side, stopping with the first that stops). ReaderBuilder,
PipedReaderBuilder and CompositeReaderBuilder make readers on demand; a Pipe is
a stream with readers and writers (queue_util.Queue is one).
"""
import time

import numpy as np

from . import core
from .schema import Field, Struct, from_blob_list


class Reader:
    def __init__(self, schema=None):
        if schema is not None:
            assert isinstance(schema, Field)
        self._schema = schema

    def schema(self):
        assert self._schema is not None, "Schema not provided for this reader."
        return self._schema

    def _set_schema(self, schema):
        self._schema = schema

    def setup_ex(self, init_net, finish_net):
        """Nets to run once before and after reading (none by default)."""

    def read_ex(self, local_init_net, local_finish_net):
        read_net = core.Net("reader_body")
        return ([read_net],) + self.read(read_net)

    def read_record_ex(self, local_init_net, local_finish_net):
        nets, should_stop, fields = self.read_ex(local_init_net, local_finish_net)
        if self._schema:
            fields = from_blob_list(self._schema, fields)
        return nets, should_stop, fields

    def read(self, read_net):
        """Add ops to read_net that read a batch: returns (should_stop blob, field blobs)."""
        raise NotImplementedError("Readers must implement `read`.")

    def reset(self, net):
        """Add ops to net that rewind the reader."""
        raise NotImplementedError("This reader cannot be resetted.")

    def read_record(self, read_net):
        should_stop, fields = self.read(read_net)
        if self._schema:
            fields = from_blob_list(self._schema, fields)
        return should_stop, fields

    def execution_step(self, reader_net_name=None, external_should_stop=None):
        """(step running a read net until should_stop, the fields it reads)."""
        reader_net = core.Net(reader_net_name or "reader")
        should_stop, fields = self.read_record(reader_net)
        if external_should_stop is not None:
            should_stop = reader_net.Or([external_should_stop, should_stop])
        read_step = core.execution_step("{}_step".format(reader_net_name), reader_net,
                                        should_stop_blob=should_stop)
        return read_step, fields


class Writer:
    _schema = None

    def schema(self):
        return self._schema

    def write(self, writer_net, fields):
        """Add ops to writer_net that write the batch in `fields`."""
        raise NotImplementedError("Writers must implement write.")

    def write_record(self, writer_net, fields):
        if isinstance(fields, Field):
            self._schema = fields
            fields = fields.field_blobs()
        self.write(writer_net, fields)

    def setup_ex(self, init_net, finish_net):
        self.commit(finish_net)

    def write_ex(self, fields, local_init_net, local_finish_net, stop_blob):
        write_net = core.Net("write_net")
        self.write(write_net, fields)
        return [write_net]

    def write_record_ex(self, fields, local_init_net, local_finish_net, stop_blob=None):
        if isinstance(fields, Field):
            self._schema = fields
            fields = fields.field_blobs()
        if stop_blob is None:
            stop_blob = local_init_net.NextName("dequeue_status")
        return self.write_ex(fields, local_init_net, local_finish_net, stop_blob), stop_blob

    def commit(self, finish_net):
        """Add ops to finish_net that signal the end of the data (none by default)."""


class ReaderBuilder:
    """Makes readers on demand (one per trainer in distributed reading)."""

    def schema(self):
        raise NotImplementedError()

    def setup(self, **kwargs):
        """One-time setup before new_reader(); subclasses make sure it runs once."""
        raise NotImplementedError()

    def new_reader(self, **kwargs):
        raise NotImplementedError()


class PipedReaderBuilder(ReaderBuilder):
    """A ReaderBuilder whose readers are passed through piper(reader=..., **kwargs)
    (for example a pipe with a processor); a Pipe it returns is read from."""

    def __init__(self, builder, piper):
        self._builder = builder
        self._piper = piper

    def schema(self):
        return self._builder.schema()

    def setup(self, **kwargs):
        return self._builder.setup(**kwargs)

    def new_reader(self, **kwargs):
        output = self._piper(reader=self._builder.new_reader(**kwargs), **kwargs)
        return output if isinstance(output, Reader) else output.reader()


class Pipe:
    """A stream with readers and writers. With obj_key, each new reader's or
    writer's init net gets the pipe as an attribute under that key, so the task
    framework calls its setup()."""

    def __init__(self, schema=None, obj_key=None):
        self._num_writers = 0
        self._num_readers = 0
        self._schema = schema
        self._obj_key = obj_key

    def schema(self):
        return self._schema

    def setup(self, global_init_net):
        pass

    def reader(self):
        raise NotImplementedError()

    def writer(self):
        raise NotImplementedError()

    def num_readers(self):
        return self._num_readers

    def num_writers(self):
        return self._num_writers

    def _new_writer(self, writer_schema, writer_init_net):
        if writer_schema is not None and self._schema is None:
            self._schema = writer_schema
        self._num_writers += 1
        if self._obj_key is not None:
            writer_init_net.add_attribute(self._obj_key, self)

    def _new_reader(self, reader_init_net):
        self._num_readers += 1
        if self._obj_key is not None:
            reader_init_net.add_attribute(self._obj_key, self)


def _false_scalar(net, output=None):
    return net.ConstantFill([], None if output is None else [output], shape=[], value=False,
                            dtype=core.DataType.BOOL)


class CounterReader(Reader):
    """Reads 0, 1, 2, ... (field `iter`, int64) and never stops by itself."""

    def __init__(self):
        super().__init__(schema=Struct(("iter", np.int64)))
        self.counter = None
        self.should_stop = None

    def setup_ex(self, global_init_net, global_finish_net):
        if self.counter is None:
            self.counter = global_init_net.CreateCounter([], init_count=0)
            self.should_stop = _false_scalar(global_init_net)

    def read_ex(self, local_init_net, local_finish_net):
        count_net = core.Net("limited_reader_counter")
        value = count_net.CountUp([self.counter], 1)
        return [count_net], self.should_stop, [value]


class ReaderWithLimitBase(Reader):
    """A reader that may stop before its underlying reader does (subclasses say
    when: setup_limiter, check_limiter_condition). data_finished() is a bool
    blob, true once the underlying reader ran out of data."""

    def __init__(self, reader):
        super().__init__(schema=reader._schema)
        self.reader = reader
        self.net = core.Net("reader_with_limit")
        self._data_finished = self.net.AddExternalInput(self.net.NextName("data_finished"))
        self.should_stop = None

    def setup_ex(self, global_init_net, global_finish_net):
        _false_scalar(global_init_net, self._data_finished)
        self.reader.setup_ex(global_init_net, global_finish_net)
        self.setup_limiter(global_init_net, global_finish_net)

    def read_ex(self, local_init_net, local_finish_net):
        condition_net = core.Net("limited_reader_condition")
        should_stop = self.check_limiter_condition(condition_net)
        nets, data_ended, fields = self.reader.read_ex(local_init_net, local_finish_net)
        self._set_schema(self.reader._schema)
        # The step checks its stop blob after every net, so the limit was already
        # looked at this round: overwriting the blob with the reader's own stop
        # signal is safe.
        done_net = core.Net("limited_reader_post")
        done_net.Copy(data_ended, should_stop)
        done_net.Or([self._data_finished, data_ended], [self._data_finished])
        return [condition_net] + nets + [done_net], should_stop, fields

    def setup_limiter(self, global_init_net, global_finish_net):
        raise NotImplementedError("Subclass must implement `setup_limiter`")

    def check_limiter_condition(self, stop_condition_net):
        raise NotImplementedError("Subclass must implement `check_limiter_condition`")

    def data_finished(self):
        return self._data_finished


class ReaderWithLimit(ReaderWithLimitBase):
    """Stops after num_iter batches (a counter shared by every reading thread);
    num_iter None: no limit, only data_finished."""

    def __init__(self, reader, num_iter=1):
        super().__init__(reader)
        self.counter = None
        self.num_iter = num_iter
        if num_iter is not None:
            self.counter = self.net.AddExternalInput(self.net.NextName("counter"))

    def setup_limiter(self, global_init_net, global_finish_net):
        if self.counter:
            global_init_net.CreateCounter([], [self.counter], init_count=int(self.num_iter))

    def check_limiter_condition(self, stop_condition_net):
        if self.counter:
            return stop_condition_net.CountDown([self.counter], 1)
        return stop_condition_net.ConstantFill([], 1, shape=[], value=False, dtype=core.DataType.BOOL)


def CountUntil(num_iter):
    """A reader of 0, 1, ..., num_iter - 1."""
    return ReaderWithLimit(CounterReader(), num_iter)


class ReaderWithTimeLimit(ReaderWithLimitBase):
    """Stops once `duration` seconds have passed since the task started;
    duration None or <= 0: no limit, only data_finished."""

    def __init__(self, reader, duration=0):
        super().__init__(reader)
        self.timer = None
        self.duration = duration
        self.duration_ns_blob = None

    def setup_limiter(self, global_init_net, global_finish_net):
        if self.duration is not None and self.duration > 0:
            self.timer = global_init_net.TimerBegin([], counter_name="epoch_timer")
            start = global_init_net.TimerGet(self.timer)
            self.duration_ns_blob = global_init_net.ConstantFill([start], value=int(self.duration * 10 ** 9))
            global_finish_net.TimerEnd([self.timer], [])

    def check_limiter_condition(self, stop_condition_net):
        if self.duration is not None and self.duration > 0:
            elapsed = stop_condition_net.TimerGet(self.timer)
            return stop_condition_net.GE([elapsed, self.duration_ns_blob])
        return stop_condition_net.ConstantFill([], 1, shape=[], value=False, dtype=core.DataType.BOOL)


class ReaderWithDelay(Reader):
    """Sleeps `delay` seconds before each batch of the underlying reader (for tests)."""

    def __init__(self, reader, delay):
        super().__init__(schema=reader._schema)
        self.reader = reader
        self.delay = delay

    def setup_ex(self, global_init_net, global_finish_net):
        self.reader.setup_ex(global_init_net, global_finish_net)

    def read_ex(self, local_init_net, local_finish_net):
        read_net = core.Net("reader_body")
        delay = self.delay

        def sleep_op(*args, **kwargs):
            time.sleep(delay)

        read_net.Python(sleep_op)([], [])
        return ([read_net],) + self.reader.read(read_net)


class CompositeReader(Reader):
    """Readers side by side: the record is a Struct of their records under
    `names`; reading stops when any of them stops."""

    def __init__(self, names, readers):
        assert len(names) == len(readers), "one name per reader"
        super().__init__(schema=Struct(*[(name, reader.schema()) for name, reader in zip(names, readers)]))
        self._names = names
        self._readers = readers

    def setup_ex(self, init_net, finish_net):
        for reader in self._readers:
            reader.setup_ex(init_net, finish_net)

    def read_ex(self, local_init_net, local_finish_net):
        should_stop = local_init_net.ConstantFill([], shape=[], dtype=core.DataType.BOOL, value=False)
        read_nets, fields = [], []
        for name, reader in zip(self._names, self._readers):
            nets, reader_stop, record = reader.read_record_ex(local_init_net, local_finish_net)
            stop_net = core.Net("{}_stop".format(name))
            stop_net.Copy(reader_stop, should_stop)
            read_nets.extend(list(nets) + [stop_net])
            fields.extend(record.field_blobs())
        return read_nets, should_stop, fields

    def reset(self, net):
        for reader in self._readers:
            reader.reset(net)


class CompositeReaderBuilder(ReaderBuilder):
    """Makes CompositeReaders from one ReaderBuilder per name."""

    def __init__(self, names, reader_builders):
        self._names = names
        self._reader_builders = reader_builders
        self._schema = Struct(*[(name, builder.schema()) for name, builder in zip(names, reader_builders)])

    def schema(self):
        return self._schema

    def setup(self, **kwargs):
        for builder in self._reader_builders:
            builder.setup(**kwargs)

    def new_reader(self, **kwargs):
        readers = []
        for builder in self._reader_builders:
            reader = builder.new_reader(**kwargs)
            if not isinstance(reader, Reader):
                if not hasattr(reader, "reader"):
                    raise ValueError("reader must be an instance of Reader or Pipe")
                reader = reader.reader()
            readers.append(reader)
        composite = CompositeReader(self._names, readers)
        assert composite.schema() == self._schema
        return composite
