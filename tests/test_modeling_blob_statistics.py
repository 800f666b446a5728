"""The monitoring NetModifiers (ComputeNormForBlobs, ComputeStatisticsForBlobs,
ComputeHistogramForBlobs, GetEntryFromBlobs): the blob each writes equals the
statistic written out in NumPy here; bad arguments and unknown blobs raise
Caffe2Error."""
import numpy as np
import pytest

from caffe2py import brew, core, model_helper, schema, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.modeling.compute_histogram_for_blobs import ComputeHistogramForBlobs
from caffe2py.modeling.compute_norm_for_blobs import ComputeNormForBlobs
from caffe2py.modeling.compute_statistics_for_blobs import ComputeStatisticsForBlobs
from caffe2py.modeling.get_entry_from_blobs import GetEntryFromBlobs

RNG = np.random.default_rng(2602)


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()


def fc_model():
    """fc(5 -> 4) on a fed X; the modifiers watch fc_w and the activation fc."""
    model = model_helper.ModelHelper(name="monitor")
    workspace.FeedBlob("X", RNG.standard_normal((3, 5)).astype(np.float32))
    brew.fc(model, "X", "fc", 5, 4, weight_init=("GaussianFill", {"std": 1.0}))
    return model


def run(model):
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)


def output_blob(model, field):
    """The value of output-record field `field` (Caffe2 names it <blob><suffix>)."""
    record = model.net.output_record()
    assert record is not None
    fields = dict(zip(record.field_names(), map(str, record.field_blobs())))
    assert field in fields, sorted(fields)
    return workspace.FetchBlob(fields[field])


def written(model, name):
    """A blob the modifier wrote; Caffe2 names it <blob><suffix> (NextScopedBlob)."""
    assert name in model.net.UsedBlobNames(), name
    return workspace.FetchBlob(name)


@pytest.mark.parametrize("p,averaged", [(1, False), (2, False), (2, True), (1, True)])
def test_norm(p, averaged):
    model = fc_model()
    modifier = ComputeNormForBlobs(["fc_w", "fc"], logging_frequency=0, p=p, compute_averaged_norm=averaged)
    modifier(model.net, modify_output_record=True)
    run(model)
    suffix = modifier.field_name_suffix()
    assert suffix == ("_averaged" if averaged else "") + "_l%d_norm" % p
    for blob in ("fc_w", "fc"):
        x = workspace.FetchBlob(blob).astype(np.float64)
        expected = np.abs(x).sum() if p == 1 else np.square(x).sum()   # Caffe2: L2 as sum of squares
        if averaged:
            expected /= x.size
        np.testing.assert_allclose(written(model, blob + suffix), [expected], rtol=1e-5)
        np.testing.assert_allclose(output_blob(model, blob + suffix), [expected], rtol=1e-5)


def test_norm_of_one_row():
    model = fc_model()
    ComputeNormForBlobs(["fc_w"], logging_frequency=0, p=1, row_index=2)(model.net)
    run(model)
    row = workspace.FetchBlob("fc_w")[2].astype(np.float64)
    np.testing.assert_allclose(written(model, "fc_w_row_2_l1_norm"), [np.abs(row).sum()], rtol=1e-5)


@pytest.mark.parametrize("logging_frequency", [0, 2])
def test_statistics(logging_frequency):
    model = fc_model()
    modifier = ComputeStatisticsForBlobs(["fc_w", "fc"], logging_frequency=logging_frequency)
    modifier(model.net)
    prints = [op for op in model.net.Proto().op if op.type == "Print"]
    assert len(prints) == (2 if logging_frequency else 0)
    run(model)
    assert modifier.field_name_suffix() == "_summary"
    for blob in ("fc_w", "fc"):
        x = workspace.FetchBlob(blob).reshape(-1).astype(np.float64)
        expected = [x.min(), x.max(), x.mean(), x.std(ddof=1)]
        np.testing.assert_allclose(written(model, blob + "_summary"), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("accumulate", [False, True])
def test_histogram(accumulate):
    model = model_helper.ModelHelper(name="hist")
    model.net.AddExternalInput("x")
    modifier = ComputeHistogramForBlobs(["x"], logging_frequency=0, num_buckets=5, lower_bound=-1.0,
                                        upper_bound=1.5, accumulate=accumulate)
    modifier(model.net)
    workspace.CreateBlob("x")       # Caffe2's CreateNet refuses an input that does not exist yet
    workspace.CreateNet(model.net)
    batches = [RNG.standard_normal(40).astype(np.float32) * 1.5 for _ in range(3)]
    edges = np.concatenate([[-np.inf], np.linspace(-1.0, 1.5, 6), [np.inf]])
    total = np.zeros(7)
    for batch in batches:
        workspace.FeedBlob("x", batch)
        workspace.RunNet(model.net)
        counts = np.histogram(batch, bins=edges)[0].astype(np.float64)
        # np.histogram closes the last bin; here values >= upper_bound go to the overflow bin
        total += counts
        expected = (total if accumulate else counts) / (total if accumulate else counts).sum()
        np.testing.assert_allclose(output_blob(model, "x" + modifier.field_name_suffix()), expected, rtol=1e-5)
    assert modifier.field_name_suffix() == ("_acc" if accumulate else "_curr") + "_normalized_hist"
    assert isinstance(model.net.output_record(), schema.Struct)


@pytest.mark.parametrize("i1,i2", [(1, 2), (0, -1)])
def test_get_entry(i1, i2):
    model = fc_model()
    modifier = GetEntryFromBlobs(["fc_w"], logging_frequency=0, i1=i1, i2=i2)
    modifier(model.net, modify_output_record=True)
    run(model)
    w = workspace.FetchBlob("fc_w")
    expected = w[i1:i1 + 1, i2:i2 + 1] if i2 >= 0 else w[i1:i1 + 1]
    np.testing.assert_array_equal(output_blob(model, "fc_w" + modifier.field_name_suffix()), expected)


def test_named_errors():
    net = core.Net("errors")
    net.AddExternalInput("x")
    for modifier in (ComputeNormForBlobs(["nope"], 0), ComputeStatisticsForBlobs(["nope"], 1),
                     ComputeHistogramForBlobs(["nope"], 0), GetEntryFromBlobs(["nope"], 0)):
        with pytest.raises(Caffe2Error, match="blob 'nope' is not defined in net"):
            modifier(net)
    with pytest.raises(Caffe2Error, match="row index"):
        ComputeNormForBlobs(["x"], 0, row_index=-1)
    with pytest.raises(Caffe2Error, match="p must be 1 or 2"):
        ComputeNormForBlobs(["x"], 0, p=3)
    with pytest.raises(Caffe2Error, match="out of range"):
        GetEntryFromBlobs(["x"], 0, i1=-1)
    with pytest.raises(Caffe2Error, match="num_buckets"):
        ComputeHistogramForBlobs(["x"], 0, num_buckets=0)
