"""caffe2py.memonger: nets rewritten to share blobs compute the same thing with
fewer distinct blobs. The references are the original nets run side by side
(losses, gradients and parameter updates over several SGD steps; predict
outputs), not memonger's own bookkeeping."""
import numpy as np
import pytest

from caffe2py import brew, core, memonger, model_helper, optimizer, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2

RNG = np.random.default_rng(2604)
STEPS = 3


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()


def mlp_training_model(namescope="name_x", depth=4):
    """An MLP (fc + relu layers, softmax loss) with gradients and SGD, under namescope."""
    model = model_helper.ModelHelper(name="mlp_%s" % namescope)
    with core.NameScope(namescope):
        h = "data"
        dim = 6
        for i in range(depth):
            h = brew.fc(model, h, "fc%d" % i, dim, 8)
            h = model.net.Relu(h, "relu%d" % i)
            dim = 8
        h = brew.fc(model, h, "fc_out", dim, 4)
        softmax, loss = model.net.SoftmaxWithLoss([h, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, base_learning_rate=0.3)
    return model, str(loss)


def feed_batch(namescope):
    workspace.FeedBlob(namescope + "/data", RNG.standard_normal((5, 6)).astype(np.float32))
    workspace.FeedBlob(namescope + "/label", RNG.integers(0, 4, 5).astype(np.int32))


def run_steps(init_net, init_values, net_proto, fetch):
    """Run init_net (for the non-tensor blobs such as the iteration mutex), feed
    init_values over it, run net_proto STEPS times; the fetched blobs after each step."""
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init_net)
    for name, value in init_values.items():
        workspace.FeedBlob(name, value.copy())
    workspace.CreateNet(net_proto)
    out = []
    for _ in range(STEPS):
        workspace.RunNet(net_proto.name)
        out.append({b: workspace.FetchBlob(b).copy() for b in fetch})
    return out


@pytest.mark.parametrize("share_activations", [False, True])
def test_share_grad_blobs_keeps_training_identical(share_activations):
    model, loss = mlp_training_model()
    feed_batch("name_x")
    workspace.RunNetOnce(model.param_init_net)
    init_values = {b: workspace.FetchBlob(b).copy() for b in workspace.Blobs()
                   if isinstance(workspace.FetchBlob(b), np.ndarray)}
    param_grads = {str(g) for g in model.param_to_grad.values()}
    optim = memonger.share_grad_blobs(model.net, [loss], param_grads, "name_x",
                                      share_activations=share_activations)
    before, after = memonger.count_blobs(model.net.Proto()), memonger.count_blobs(optim)
    assert after < before - 5, (before, after)
    assert memonger.verify_graph_equality(model.net.Proto(), optim)
    assert memonger.verify_inplace_blobs(model.net.Proto(), optim)
    # param gradients and parameters keep their names; only activation gradients move
    used = {b for op in optim.op for b in list(op.input) + list(op.output)}
    assert param_grads <= used
    assert any(b.startswith("name_x/__m") for b in used)

    fetch = [loss] + [str(p) for p in model.params] + sorted(param_grads)
    optim.name = model.net.Proto().name + "_memonger"
    reference = run_steps(model.param_init_net, init_values, model.net.Proto(), fetch)
    shared = run_steps(model.param_init_net, init_values, optim, fetch)
    for ref, got in zip(reference, shared):
        for blob in fetch:
            np.testing.assert_array_equal(got[blob], ref[blob], err_msg=blob)
    assert reference[0][loss] != reference[-1][loss]          # the steps did train


def test_dont_share_blobs_and_other_namescopes_are_kept():
    model, loss = mlp_training_model()
    param_grads = {str(g) for g in model.param_to_grad.values()}
    keep = "name_x/relu1_grad"
    optim = memonger.share_grad_blobs(model.net, [loss], param_grads, "name_x", dont_share_blobs={keep})
    used = {b for op in optim.op for b in list(op.input) + list(op.output)}
    assert keep in used
    # a namescope that matches nothing shares nothing
    untouched = memonger.share_grad_blobs(model.net, [loss], param_grads, "other_scope")
    assert untouched == model.net.Proto()


def test_blob_shapes_pair_similar_sizes():
    model, loss = mlp_training_model(depth=3)
    param_grads = {str(g) for g in model.param_to_grad.values()}
    shapes = {b: [5, 8] for op in model.net.Proto().op for b in list(op.input) + list(op.output)}
    optim = memonger.share_grad_blobs(model.net, [loss], param_grads, "name_x", blob_shapes=shapes)
    assert memonger.count_blobs(optim) < memonger.count_blobs(model.net.Proto())


def branchy_predict_net():
    """Two parallel branches from x joined at the end, then two more layers."""
    net = core.Net("branchy")
    x = net.AddExternalInput("x")
    w = net.AddExternalInput("w")
    a1 = net.Relu(x, "a1")
    a2 = net.Sigmoid(a1, "a2")
    b1 = net.Tanh(x, "b1")
    b2 = net.Relu(b1, "b2")
    c = net.Add([a2, b2], "c")
    d = net.Mul([c, w], "d")
    e = net.Tanh(d, "e")
    f = net.Mul([e, e], "f")
    y = net.Sigmoid(f, "y")
    net.AddExternalOutput(y)
    return net


def run_predict(proto, x, w):
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("w", w)
    workspace.RunNetOnce(proto)
    return workspace.FetchBlob("y")


def test_optimize_inference_for_dag_keeps_outputs_and_branches_apart():
    net = branchy_predict_net()
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    optim = memonger.optimize_inference_for_dag(net, ["x"])
    assert memonger.count_blobs(optim) < memonger.count_blobs(net.Proto())
    assert memonger.verify_graph_equality(net.Proto(), optim)
    assert memonger.verify_inplace_blobs(net.Proto(), optim)
    np.testing.assert_array_equal(run_predict(optim, x, w), run_predict(net.Proto(), x, w))
    # a1 and b1 live in parallel branches: a DAG executor may run b1 before a2 reads a1,
    # so they must not share, although the net order alone would allow it
    names = {b: n for b, n in zip(["a1", "a2", "b1", "b2"], [optim.op[i].output[0] for i in range(4)])}
    assert names["a1"] != names["b1"]
    linear = memonger.optimize_interference(net.Proto(), ["x", "w", "y"])
    assert linear.blob_assignments.get("a1", "a1") == linear.blob_assignments.get("b1", "b1")


def test_optimize_inference_on_lenet_like_predict_net():
    model = model_helper.ModelHelper(name="lenet_predict", init_params=True)
    conv1 = brew.conv(model, "data", "conv1", 1, 4, 3)
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, "conv2", 4, 6, 3)
    relu2 = model.net.Relu(conv2, "relu2")
    fc = brew.fc(model, relu2, "fc3", 6 * 2 * 2, 5)
    pred = model.net.Softmax(fc, "pred")
    model.net.AddExternalOutput(pred)
    workspace.RunNetOnce(model.param_init_net)
    params = {str(p): workspace.FetchBlob(str(p)).copy() for p in model.params}
    data = RNG.standard_normal((2, 1, 10, 10)).astype(np.float32)
    optim = memonger.optimize_inference_for_dag(model.net, ["data"])
    assert memonger.count_blobs(optim) < memonger.count_blobs(model.net.Proto())

    def predict(proto):
        workspace.ResetWorkspace()
        for name, value in params.items():
            workspace.FeedBlob(name, value)
        workspace.FeedBlob("data", data)
        workspace.RunNetOnce(proto)
        return workspace.FetchBlob("pred")
    np.testing.assert_array_equal(predict(optim), predict(model.net.Proto()))


def test_optimize_interference_and_fast_variant():
    net = branchy_predict_net()
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    for ordering in (memonger.topological_sort_traversal, memonger.topological_sort_traversal_longest_path):
        result = memonger.optimize_interference(net.Proto(), ["x", "w"], ordering_function=ordering)
        assert memonger.count_blobs(result.net) < memonger.count_blobs(net.Proto())
        assert "y" not in result.blob_assignments and "x" not in result.blob_assignments
        np.testing.assert_array_equal(run_predict(result.net, x, w), run_predict(net.Proto(), x, w))
        for chain in result.assignments:           # each chain's ranges are disjoint, in order
            for (_, r0), (_, r1) in zip(chain, chain[1:]):
                assert r0.used < r1.defined
    fast = memonger.optimize_inference_fast(net.Proto(), ["x", "w"])
    np.testing.assert_array_equal(run_predict(fast, x, w), run_predict(net.Proto(), x, w))


def test_verify_graph_equality_detects_a_rewired_net():
    net = branchy_predict_net().Proto()
    broken = caffe2_pb2.NetDef()
    broken.CopyFrom(net)
    broken.op[3].input[0] = "a1"          # b2 now reads a1 instead of b1
    assert memonger.verify_graph_equality(net, net)
    assert not memonger.verify_graph_equality(net, broken)
    inplace = caffe2_pb2.NetDef()
    inplace.CopyFrom(net)
    inplace.op[1].output[0] = "a1"        # Sigmoid(a1) -> a1: a new in-place use
    assert not memonger.verify_inplace_blobs(net, inplace)


def test_release_blobs_when_used_and_estimate_memory():
    net = branchy_predict_net()
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    freed = memonger.release_blobs_when_used(net.Proto(), {"x"})
    frees = [op.input[0] for op in freed.op if op.type == "Free"]
    assert sorted(frees) == ["a1", "a2", "b1", "b2", "c", "d", "e", "f"]
    np.testing.assert_array_equal(run_predict(freed, x, w), run_predict(net.Proto(), x, w))
    shapes = {b: [3, 4] for b in ["a1", "a2", "b1", "b2", "c", "d", "e", "f", "y"]}
    types = {b: caffe2_pb2.TensorProto.FLOAT for b in shapes}
    total, high, by_op = memonger.estimate_memory_usage([freed], shapes, types, caffe2_pb2.DeviceOption())
    assert total == 9 * 48
    # alive at once at most: a1 freed after a2; at c: a2, b2 (a1 and b1 freed) + c
    assert high == 3 * 48
    assert by_op["Relu"] == 2 * 48


def test_named_errors():
    model, loss = mlp_training_model(depth=1)
    with pytest.raises(Caffe2Error, match="gradient op"):
        memonger.optimize_inference_for_dag(model.net, ["name_x/data"])
    net = core.Net("undefined_input")
    net.Relu("x", "y")
    proto = net.Proto()
    del proto.external_input[:]
    with pytest.raises(Caffe2Error, match="neither an external input"):
        memonger.optimize_inference_for_dag(proto, [])
    with pytest.raises(Caffe2Error, match="AssignmentAlgorithm"):
        memonger.optimize_interference(branchy_predict_net().Proto(), [], algo="DP")
    with pytest.raises(Caffe2Error, match="loss blob 'no_loss' is not used"):
        memonger.share_grad_blobs(model.net, ["no_loss"], [], "name_x")
    with pytest.raises(Caffe2Error, match="Net or NetDef"):
        memonger.share_grad_blobs("not a net", [loss], [], "name_x")


def test_interference_graph_and_orderings_follow_caffe2():
    m = model_helper.ModelHelper()
    for _ in range(3):
        m.net.Copy("b1", "b1")
    assert memonger.compute_interference_graph(m.net.Proto().op).edges() == [(0, 1), (0, 2), (1, 2)]

    m = model_helper.ModelHelper()
    m.net.Copy("conv0_w_comp", "conv0_w")              # 0
    conv0 = brew.conv(m, "data", "conv0", 32, 32, 4)   # 1
    m.net.Copy("conv2_w", "conv2_w")                   # 2
    brew.conv(m, conv0, "conv2", 16, 32, 4)            # 3
    g = memonger.compute_interference_graph(m.net.Proto().op)
    # Caffe2's order: the ready ops stacked, the last one first (memonger_test.py)
    assert memonger.topological_sort_traversal(g) == [2, 0, 1, 3]
    # the op starting the longer chain goes first
    assert memonger.topological_sort_traversal_longest_path(g) == [0, 1, 2, 3]
    reordered = caffe2_pb2.NetDef()
    reordered.op.extend([m.net.Proto().op[i] for i in (2, 0, 1, 3)])
    g = memonger.compute_interference_graph(reordered.op)
    assert memonger.topological_sort_traversal(g) == [1, 2, 0, 3]
    # sources by their longest path's subtree, lowest first, then depth-first, reversed
    assert memonger.topological_sort_traversal_longest_path(g) == [1, 2, 0, 3]


def test_blobs_valued_from_outside_the_run_are_kept():
    """A blob read before the net writes it (a state carried across runs) and the
    output of Accumulate (which reads its old value) keep their names; sharing them
    would hand them another blob's value."""
    proto = caffe2_pb2.NetDef(name="stateful")     # no external inputs declared (allowed)
    proto.external_output.extend(["y"])
    proto.op.extend([
        core.CreateOperator("Relu", ["x"], ["a"]),
        core.CreateOperator("Add", ["a", "state"], ["b"]),       # state: from the previous run
        core.CreateOperator("Relu", ["b"], ["state"]),
        core.CreateOperator("Accumulate", ["state"], ["acc"]),    # acc: gamma * old acc + state
        core.CreateOperator("Tanh", ["acc"], ["c"]),
        core.CreateOperator("Sigmoid", ["c"], ["y"]),
    ])
    optim = memonger.optimize_inference_fast(proto, ["x"])
    names = {b for op in optim.op for b in list(op.input) + list(op.output)}
    assert {"state", "acc"} <= names
    assert memonger.count_blobs(optim) < memonger.count_blobs(proto)
    interference = memonger.optimize_interference(proto, ["x"])
    assert "state" not in interference.blob_assignments and "acc" not in interference.blob_assignments

    def two_runs(p):
        workspace.ResetWorkspace()
        workspace.FeedBlob("state", np.ones((2, 3), np.float32))
        workspace.FeedBlob("x", RNG.standard_normal((2, 3)).astype(np.float32))
        workspace.CreateNet(p)
        for _ in range(2):
            workspace.RunNet(p.name)
        return workspace.FetchBlob("y")
    state = RNG.bit_generator.state
    expected = two_runs(proto)
    RNG.bit_generator.state = state
    optim.name = "stateful_memonger"
    np.testing.assert_array_equal(two_runs(optim), expected)


def test_blobs_of_nested_nets_keep_their_names():
    """`t` is read inside If's then_net: renaming it outside would leave the nested
    net reading a stale name, so it is never shared."""
    then_net = core.Net("then_branch")
    then_net.Sigmoid("t", "u")
    proto = caffe2_pb2.NetDef(name="with_if")
    proto.external_input.extend(["x", "cond"])
    proto.external_output.extend(["y"])
    proto.op.extend([
        core.CreateOperator("Relu", ["x"], ["a"]),
        core.CreateOperator("Tanh", ["a"], ["b"]),
        core.CreateOperator("Relu", ["b"], ["t"]),
        core.CreateOperator("If", ["cond"], [], then_net=then_net.Proto()),
        core.CreateOperator("Tanh", ["t"], ["c"]),
        core.CreateOperator("Sigmoid", ["c"], ["y"]),
    ])
    optim = memonger.optimize_inference_for_dag(proto, ["x", "cond"])
    names = {b for op in optim.op for b in list(op.input) + list(op.output)}
    assert "t" in names
    assert memonger.count_blobs(optim) < memonger.count_blobs(proto)   # a, b, c still share

    def run(p):
        workspace.ResetWorkspace()
        workspace.FeedBlob("x", np.linspace(-1, 1, 6, dtype=np.float32))
        workspace.FeedBlob("cond", np.array(True))
        workspace.RunNetOnce(p)
        return workspace.FetchBlob("y"), workspace.FetchBlob("u")
    for got, want in zip(run(optim), run(proto)):
        np.testing.assert_array_equal(got, want)


def test_share_grad_blobs_on_an_lstm_training_net():
    """Caffe2's RNN case: an LSTM (RecurrentNetwork and its gradient, step nets
    with links to outer blobs) + fc + softmax loss; sharing gradients and
    activations keeps the loss and every parameter gradient identical."""
    from caffe2py import rnn_cell
    T_, N_, D_, H_ = 5, 3, 4, 6
    model = model_helper.ModelHelper(name="lstm_memonger")
    hidden_all, _, _, _ = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), D_, H_, scope="lstm")
    flat = model.net.Reshape(hidden_all, ["flat", "flat_old_shape"], shape=[T_ * N_, H_])[0]
    logits = brew.fc(model, flat, "logits", H_, 3)
    _, loss = model.net.SoftmaxWithLoss([logits, "labels"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    feeds = {"input": RNG.standard_normal((T_, N_, D_)).astype(np.float32),
             "seq_lengths": np.array([T_, 3, 2], np.int32),
             "h0": RNG.standard_normal((1, N_, H_)).astype(np.float32),
             "c0": RNG.standard_normal((1, N_, H_)).astype(np.float32),
             "labels": RNG.integers(0, 3, T_ * N_).astype(np.int32)}
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(model.param_init_net)
    init_values = {b: workspace.FetchBlob(b).copy() for b in workspace.Blobs()
                   if isinstance(workspace.FetchBlob(b), np.ndarray)}
    param_grads = {str(g) for g in model.param_to_grad.values()}
    optim = memonger.share_grad_blobs(model.net, ["loss"], param_grads, "", share_activations=True)
    assert memonger.count_blobs(optim) < memonger.count_blobs(model.net.Proto())
    fetch = ["loss"] + sorted(param_grads)
    optim.name = "lstm_memonger_optim"
    reference = run_steps(model.param_init_net, init_values, model.net.Proto(), fetch)
    shared = run_steps(model.param_init_net, init_values, optim, fetch)
    for blob in fetch:
        np.testing.assert_array_equal(shared[0][blob], reference[0][blob], err_msg=blob)


def _least_memory_by_enumeration(ranges):
    """Every way to split blobs (in order of last use) into chains whose consecutive
    members do not overlap (next defined after the previous used): the least sum of
    each chain's largest size. Written out independently of memonger."""
    best = [None]

    def place(k, chains):
        if k == len(ranges):
            total = sum(max(r.size for r in chain) for chain in chains)
            best[0] = total if best[0] is None else min(best[0], total)
            return
        r = ranges[k]
        for chain in chains:
            if r.defined > chain[-1].used:
                chain.append(r)
                place(k + 1, chains)
                chain.pop()
        chains.append([r])
        place(k + 1, chains)
        chains.pop()
    place(0, [])
    return best[0]


@pytest.mark.parametrize("seed", range(12))
def test_dynamic_programming_assignment_uses_the_least_memory(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    defined = rng.integers(0, 12, n)
    used = defined + rng.integers(0, 5, n)
    sizes = rng.integers(1, 20, n)
    ranges = sorted((("b%d" % i, memonger.LiveRange(int(d), int(u), int(z)))
                     for i, (d, u, z) in enumerate(zip(defined, used, sizes))), key=lambda p: p[1].used)
    dp = memonger.compute_assignments_dp(ranges, [])
    greedy = memonger.compute_assignments_greedy(ranges, None)
    for chains in (dp, greedy):
        assert sorted(name for chain in chains for name, _ in chain) == sorted(name for name, _ in ranges)
        for chain in chains:
            assert all(b.defined > a.used for (_, a), (_, b) in zip(chain, chain[1:]))
    assert memonger.get_memory_usage(dp) == _least_memory_by_enumeration([r for _, r in ranges])
    assert memonger.get_memory_usage(dp) <= memonger.get_memory_usage(greedy)


def test_greedy_assignment_joins_the_chain_closest_in_size_and_extends_given_chains():
    lr = memonger.LiveRange
    ranges = [("b1", lr(1, 3, 10)), ("b2", lr(3, 4, 1)), ("b3", lr(5, 6, 1)), ("b4", lr(5, 7, 10))]
    # b2 overlaps b1 (defined at b1's last use); b3 fits b2's size, b4 b1's
    assert memonger.compute_assignments_greedy(ranges) == [[ranges[0], ranges[3]], [ranges[1], ranges[2]]]
    start = [[("a", lr(0, 0, 10))]]
    chains = memonger.compute_assignments_greedy(ranges[1:], start)
    assert chains[0] == [("a", lr(0, 0, 10)), ranges[3]] or chains[0][:2] == [("a", lr(0, 0, 10)), ranges[1]]


def test_optimize_interference_with_dynamic_programming_keeps_results():
    model, loss = mlp_training_model(depth=2)
    workspace.RunNetOnce(model.param_init_net)
    feed_batch("name_x")
    start = {b: workspace.FetchBlob(b).copy() for b in workspace.Blobs()
             if isinstance(workspace.FetchBlob(b), np.ndarray)}
    workspace.RunNetOnce(model.net)
    expected = {b: workspace.FetchBlob(b).copy() for b in (loss, "name_x/fc0_w")}
    static = [o for op in model.param_init_net.Proto().op for o in op.output] + \
        list(model.net.Proto().external_input) + [loss]
    for algo in memonger.AssignmentAlgorithm:
        optimization = memonger.optimize_interference(model.net.Proto(), static, algo=algo)
        assert len(optimization.blob_assignments) > 0
        for name, value in start.items():
            workspace.FeedBlob(name, value.copy())
        workspace.RunNetOnce(optimization.net)
        for name, value in expected.items():       # the loss, and the SGD-updated weight
            np.testing.assert_allclose(workspace.FetchBlob(name), value, rtol=1e-6)


def test_orderings_with_two_sinks_follow_caffe2_and_are_topological():
    m = model_helper.ModelHelper()
    m.Copy("conv0_w_comp", "conv0_w")                   # 0
    conv0 = brew.conv(m, "data", "conv0", 32, 32, 4)    # 1
    m.Copy("conv2_w", "conv2_w")                        # 2
    brew.conv(m, conv0, "conv2", 16, 32, 4)             # 3
    m.Copy("data1", "data2")                            # 4
    m.Copy("data2", "data3")                            # 5
    g = memonger.compute_interference_graph(m.net.Proto().op)
    # the orders Caffe2's memonger_test.py expects of this net
    assert memonger.topological_sort_traversal(g) == [4, 5, 2, 0, 1, 3]
    assert memonger.topological_sort_traversal_longest_path(g) == [0, 1, 2, 3, 4, 5]
    rng = np.random.default_rng(3)
    for _ in range(20):                                 # random nets: every op once, after its inputs' writers
        net = core.Net("random_dag")
        for i in range(int(rng.integers(1, 12))):
            reads = ["b%d" % j for j in rng.choice(i + 2, size=min(2, i + 1), replace=False)]
            net.Sum(reads, "b%d" % (i + 2))
        g = memonger.compute_interference_graph(net.Proto().op)
        for ordering in (memonger.topological_sort_traversal, memonger.topological_sort_traversal_longest_path):
            order = ordering(g)
            assert sorted(order) == g.nodes()
            position = {op: k for k, op in enumerate(order)}
            assert all(position[a] < position[b] for a, b in g.edges())
