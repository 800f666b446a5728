"""caffe2py.text_file_reader (Caffe2's caffe2.python.text_file_reader): batches of
rows of a tab-separated file, repeated num_passes times; expected columns are the
rows written into the file, parsed here with Python. Fields are strings and
float32, the types Caffe2 documents for this reader."""
import numpy as np
import pytest

from caffe2py import core, schema, workspace
from caffe2py.text_file_reader import TextFileReader

ROWS = [("alpha", "3", 0.5), ("beta", "-1", 2.25), ("gamma", "7", -4.0), ("delta", "0", 1e3), ("eps", "5", 0.125)]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_text("".join("%s\t%s\t%r\n" % row for row in ROWS))
    return str(path)


def _read_all(reader):
    net = core.Net("read")
    should_stop, record = reader.read_record(net)
    columns, batches = None, []
    while True:
        workspace.RunNetOnce(net)
        arrays = schema.FetchRecord(record).field_blobs()
        batches.append(len(arrays[0]))
        columns = [list(a) for a in arrays] if columns is None else [c + list(a) for c, a in zip(columns, arrays)]
        if workspace.FetchBlob(should_stop):
            return columns, batches


@pytest.mark.parametrize("batch_size,num_passes", [(1, 1), (2, 1), (3, 2), (10, 1)])
def test_reads_every_row_in_batches_for_each_pass(text_file, batch_size, num_passes):
    fields = schema.Struct(("word", schema.Scalar(str)), ("count", schema.Scalar(str)),
                           ("score", schema.Scalar(np.float32)))
    init = core.Net("init")
    reader = TextFileReader(init, text_file, fields, num_passes=num_passes, batch_size=batch_size)
    workspace.RunNetOnce(init)
    (words, counts, scores), batches = _read_all(reader)
    rows = ROWS * num_passes
    assert [w.decode() if isinstance(w, bytes) else w for w in words] == [r[0] for r in rows]
    assert [c.decode() if isinstance(c, bytes) else c for c in counts] == [r[1] for r in rows]
    np.testing.assert_allclose(scores, [r[2] for r in rows], rtol=1e-6)
    # full batches, then the rest, then the empty read that stops
    total = len(rows)
    expected = [batch_size] * (total // batch_size) + ([total % batch_size] if total % batch_size else []) + [0]
    assert batches == expected


def test_only_structs_of_scalars_are_accepted(text_file):
    with pytest.raises(TypeError, match="Struct"):
        TextFileReader(core.Net("i"), text_file, schema.Scalar(str))
    with pytest.raises(TypeError, match="scalar"):
        TextFileReader(core.Net("i"), text_file, schema.Struct(("l", schema.List(np.float32))))
