"""core.Net input records, record-keeping Clone and core.clone_and_bind_net
(Caffe2's rules: blobs a net writes get the prefix, blobs it only reads keep
their names, the input record binds to the given record's blobs)."""
import numpy as np
import pytest

from caffe2py import core, schema, workspace
from caffe2py.errors import Caffe2Error


def _net_with_records():
    net = core.Net("affine")
    inp = net.set_input_record(schema.Struct(("x", schema.Scalar(np.float32))))
    scaled = net.Scale(inp.x(), net.NextScopedBlob("scaled"), scale=3.0)
    shifted = net.Add([scaled, "bias"], net.NextScopedBlob("shifted"))
    net.set_output_record(schema.Struct(("y", schema.Scalar(np.float32, blob=shifted))))
    return net, inp


def test_set_input_record_makes_blobs_for_a_bare_schema():
    net, inp = _net_with_records()
    assert inp.has_blobs() and str(inp.x()).startswith("affine/")
    assert net.input_record() is inp and net.is_external_input(inp.x())
    with pytest.raises(Caffe2Error, match="cannot be reset"):
        net.set_input_record(schema.Struct(("z", schema.Scalar(np.float32))))


def test_clone_and_bind_net_renames_written_blobs_and_binds_inputs():
    net, inp = _net_with_records()
    data = schema.Struct(("x", schema.Scalar(np.float32, blob=core.BlobReference("data"))),
                         ("extra", schema.Scalar(np.float32, blob=core.BlobReference("unused"))))
    clone, remap = core.clone_and_bind_net(net, "affine_t0", "t0/", inputs=data)
    assert remap[str(inp.x())] == "data"
    assert remap["bias"] == "bias"                                   # only read: kept
    written = [b for op in net.Proto().op for b in op.output]
    assert all(remap[b] == "t0/" + b for b in written)
    assert [str(b) for b in clone.output_record().field_blobs()] == ["t0/" + written[-1]]
    assert [str(b) for b in clone.input_record().field_blobs()] == ["data"]
    workspace.ResetWorkspace()
    workspace.FeedBlob("data", np.array([1.0, 2.0], np.float32))
    workspace.FeedBlob("bias", np.array([0.5, 0.5], np.float32))
    workspace.RunNetOnce(clone)
    np.testing.assert_allclose(workspace.FetchBlob(str(clone.output_record().y())), [3.5, 6.5])
    workspace.ResetWorkspace()


def test_inputs_must_cover_the_input_record():
    net, _ = _net_with_records()
    with pytest.raises(Caffe2Error, match="extra fields"):
        core.clone_and_bind_net(net, "bad", "p/", inputs=schema.Struct(
            ("other", schema.Scalar(np.float32, blob=core.BlobReference("o")))))
