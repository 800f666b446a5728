"""Caffe2's caffe2.python.text_file_reader: a Reader over a tab-separated text
file, one row per line, through the CreateTextFileReader / TextFileReaderRead ops.

    reader = TextFileReader(init_net, filename, schema, num_passes=1, batch_size=1)

schema is a Struct of Scalars (strings and numbers, as the ops parse them); each
read yields up to batch_size rows, one blob per field, and should_stop is true
once a read comes back empty (after num_passes passes over the file).
"""
from . import core
from .dataio import Reader
from .schema import Scalar, Struct, data_type_for_dtype


class TextFileReader(Reader):
    def __init__(self, init_net, filename, schema, num_passes=1, batch_size=1):
        if not isinstance(schema, Struct):
            raise TypeError("Schema must be a schema.Struct")
        for name, child in schema.get_children():
            if not isinstance(child, Scalar):
                raise TypeError("Only scalar fields are supported in TextFileReader (field '%s')." % name)
        super().__init__(schema)
        self._reader = init_net.CreateTextFileReader(
            [], filename=filename, num_passes=num_passes,
            field_types=[data_type_for_dtype(dtype) for dtype in schema.field_types()])
        self._batch_size = batch_size

    def read(self, net):
        blobs = net.TextFileReaderRead([self._reader], len(self.schema().field_names()),
                                       batch_size=self._batch_size)
        if isinstance(blobs, core.BlobReference):
            blobs = [blobs]
        should_stop = net.IsEmpty([blobs[0]], core.ScopedBlobReference(net.NextName("should_stop")))
        return should_stop, list(blobs)
