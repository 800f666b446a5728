"""caffe2py.crf (Caffe2's caffe2.python.crf): the CRF loss against a NumPy
reference that enumerates every tag path, its gradients against finite
differences of that reference, and Viterbi decoding against brute force."""
import itertools

import numpy as np
import pytest

from caffe2py import crf, gradients, workspace
from caffe2py.model_helper import ModelHelper

# The recurrent op's backward step differentiates Tile and ExpandDims; their
# gradient makers come with the tensor family's gradients.
needs_tile_gradient = pytest.mark.skipif(
    not {"Tile", "ExpandDims"} <= set(gradients.registered_gradient_types()),
    reason="needs the gradients of Tile and ExpandDims (tensor family gradients)")


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _path_score(unary, transitions, tags):
    """Score of a path over the padded tag set: begin tag C, the words' tags, end tag C + 1."""
    c = unary.shape[1]
    padded = [c] + list(tags) + [c + 1]
    score = sum(unary[t, tag] for t, tag in enumerate(tags))
    return score + sum(transitions[a, b] for a, b in zip(padded[:-1], padded[1:]))


def reference_loss(unary, transitions, labels):
    """log sum_paths exp(score) - score(labels), every path enumerated, in float64."""
    unary, transitions = unary.astype(np.float64), transitions.astype(np.float64)
    t, c = unary.shape
    scores = np.array([_path_score(unary, transitions, p) for p in itertools.product(range(c), repeat=t)])
    log_z = scores.max() + np.log(np.exp(scores - scores.max()).sum())
    return log_z - _path_score(unary, transitions, labels)


def _build(num_tags, num_words, seed, with_gradients):
    rng = np.random.default_rng(seed)
    unary = rng.standard_normal((num_words, num_tags)).astype(np.float32)
    transitions = rng.uniform(-1, 1, (num_tags + 2, num_tags + 2)).astype(np.float32)
    labels = rng.integers(0, num_tags, num_words).astype(np.int64)
    model = ModelHelper(name="crf_model")
    preds, label_blob, trans_blob = model.net.AddExternalInputs("preds", "labels", "trans")
    workspace.FeedBlob("preds", unary)
    workspace.FeedBlob("labels", labels)
    workspace.FeedBlob("trans", transitions)
    layer = crf.CRFWithLoss(model, num_tags, trans_blob)
    loss = layer.crf_loss(preds, label_blob)
    grads = model.net.AddGradientOperators([loss]) if with_gradients else None
    return model, loss, grads, (unary, transitions, labels)


@needs_tile_gradient
@pytest.mark.parametrize("num_tags,num_words,seed", [(1, 2, 0), (2, 3, 1), (3, 4, 2), (4, 3, 3)])
def test_loss_is_log_partition_minus_label_path_score(num_tags, num_words, seed):
    model, loss, _, (unary, transitions, labels) = _build(num_tags, num_words, seed, False)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    got = workspace.FetchBlob(str(loss))
    assert got.shape == ()
    np.testing.assert_allclose(got, reference_loss(unary, transitions, labels), rtol=1e-4, atol=1e-4)


@needs_tile_gradient
def test_gradients_match_finite_differences_of_the_reference():
    model, loss, grads, (unary, transitions, labels) = _build(3, 3, 7, True)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    d_unary = workspace.FetchBlob(str(grads["preds"]))
    d_trans = workspace.FetchBlob(str(grads["trans"]))

    def numeric(array, which):
        out = np.zeros(array.shape)
        for index in np.ndindex(array.shape):
            up, down = array.astype(np.float64), array.astype(np.float64)
            up[index] += 1e-4
            down[index] -= 1e-4
            args = (up, transitions) if which == 0 else (unary, up)
            args_down = (down, transitions) if which == 0 else (unary, down)
            out[index] = (reference_loss(*args, labels) - reference_loss(*args_down, labels)) / 2e-4
        return out

    np.testing.assert_allclose(d_unary, numeric(unary, 0), atol=2e-3)
    np.testing.assert_allclose(d_trans, numeric(transitions, 1), atol=2e-3)


@needs_tile_gradient
def test_default_transitions_are_a_uniform_parameter_of_the_model():
    model = ModelHelper(name="crf_default")
    layer = crf.CRFWithLoss(model, 3)
    assert layer.transitions in model.params
    workspace.RunNetOnce(model.param_init_net)
    value = workspace.FetchBlob(str(layer.transitions))
    assert value.shape == (5, 5) and value.min() >= -1.0 and value.max() <= 1.0


def test_viterbi_path_is_the_best_path_by_brute_force():
    rng = np.random.default_rng(4)
    for _ in range(5):
        scores = rng.standard_normal((4, 3))
        transitions = rng.standard_normal((3, 3))
        best = max(itertools.product(range(3), repeat=4),
                   key=lambda p: sum(scores[t, k] for t, k in enumerate(p))
                   + sum(transitions[a, b] for a, b in zip(p[:-1], p[1:])))
        assert crf.viterbi_path(scores, transitions) == list(best)


def test_update_predictions_swaps_the_viterbi_tag_to_the_top():
    num_tags, num_words = 3, 4
    rng = np.random.default_rng(5)
    unary = rng.standard_normal((num_words, num_tags)).astype(np.float32)
    transitions = rng.uniform(-1, 1, (num_tags + 2, num_tags + 2)).astype(np.float32)
    model = ModelHelper(name="crf_decode")
    preds, trans = model.net.AddExternalInputs("preds", "trans")
    workspace.FeedBlob("preds", unary)
    workspace.FeedBlob("trans", transitions)
    out = crf.CRFWithLoss(model, num_tags, trans).update_predictions(preds)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    got = workspace.FetchBlob(str(out))

    # the best full path (begin and end tags fixed) by brute force over the words' tags
    best = max(itertools.product(range(num_tags), repeat=num_words),
               key=lambda p: _path_score(unary.astype(np.float64), transitions.astype(np.float64), p))
    assert got.shape == (num_words, num_tags)
    assert list(np.argmax(got, axis=1)) == list(best)
    # each row keeps its scores, only two of them trade places
    np.testing.assert_allclose(np.sort(got, axis=1), np.sort(unary, axis=1), rtol=1e-6)
