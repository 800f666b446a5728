"""Hierarchical softmax: HSoftmax (+ gradient), HSoftmaxSearch, HuffmanTreeHierarchy
(caffe2/operators/h_softmax_op). Hierarchies are serialized caffe2.HierarchyProto /
TreeProto strings (caffe2py.proto.hsm_pb2), parsed and checked once per op."""
import numpy as np

from caffe2py.gradients import register_gradient, should_not_do_gradient
from caffe2py.kernels.cpu.sequence import hsoftmax as K
from caffe2py.proto import caffe2_pb2, hsm_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

DT = caffe2_pb2.TensorProto
F32 = np.float32


def _parse(ctx, name, cls):
    # the raw bytes of the string argument (argument values are decoded as text)
    raw = next((a.s for a in ctx.op_def.arg if a.name == name), b"")
    message = cls()
    try:
        message.ParseFromString(raw)
    except Exception as exc:           # noqa: BLE001 - protobuf's DecodeError
        raise ctx.error("argument %s is not a serialized %s: %s" % (name, cls.DESCRIPTOR.name, exc)) from None
    return message


def _paths(ctx):
    """{word id: [(index, length, target), ...]} from the hierarchy argument."""
    hierarchy = _parse(ctx, "hierarchy", hsm_pb2.HierarchyProto)
    paths = {}
    for path in hierarchy.paths:
        steps = []
        for node in path.path_nodes:
            if node.length <= 0 or node.index < 0 or not 0 <= node.target < node.length:
                raise ctx.error("hierarchy: word %d has a path node with index %d, length %d, target %d (need "
                                "index >= 0, length > 0, 0 <= target < length)"
                                % (path.word_id, node.index, node.length, node.target))
            steps.append((node.index, node.length, node.target))
        paths[path.word_id] = steps
    return paths


def _fc_inputs(ctx, x, w, b):
    for k, (a, what) in enumerate(((x, "X"), (w, "W"), (b, "b"))):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32:
            raise ctx.input_error(k, "%s must be a float32 tensor" % what)
    m = x.shape[0] if x.ndim > 1 else 1
    k = x.size // m if m else 0
    if w.ndim != 2 or w.shape[1] != k:
        raise ctx.input_error(1, "W must be [N, %d] (one row per hierarchy output), got %s" % (k, list(w.shape)))
    if b.ndim != 1 or b.shape[0] != w.shape[0]:
        raise ctx.input_error(2, "b must be [%d], got %s" % (w.shape[0], list(b.shape)))
    return x.reshape(m, k), m


def _labels(ctx, index, labels, m, paths, rows):
    if not isinstance(labels, np.ndarray) or labels.dtype != np.int32 or labels.size != m:
        raise ctx.input_error(index, "labels must hold %d int32 word ids" % m)
    flat = labels.reshape(-1)
    unknown = [int(w) for w in np.unique(flat) if int(w) not in paths]
    if unknown:
        # Caffe2 gives a word missing from the hierarchy an empty path: no steps, loss 0,
        # no gradient (its path lookup default-constructs one)
        paths = dict(paths)
        paths.update((w, []) for w in unknown)
    for w in np.unique(flat):
        for idx, length, _ in paths[int(w)]:
            if idx + length > rows:
                raise ctx.input_error(1, "word %d's path uses rows %d..%d of W, which has %d rows"
                                      % (w, idx, idx + length - 1, rows))
    return flat, paths


register_schema(OpSchema(
    "HSoftmax", num_inputs=4, num_outputs=2, inputs=("X", "W", "b", "labels"), outputs=("Y", "intermediate_output"),
    args=(Arg("hierarchy", "string", "", doc="serialized HierarchyProto: every word's path"),),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0] if len(ins[0].dims) > 1 else 1,), DT.FLOAT)
                                if ins[0].known else UNKNOWN, TensorType(None, DT.FLOAT)],
    doc="Hierarchical softmax loss: for each sample, the sum over the steps of its label's path of "
        "-log softmax(W[index:index+length] x + b[index:index+length])[target]. X [M, K], W [N, K], b [N], "
        "labels [M] int32. intermediate_output keeps every step's logits and softmax for the gradient."))

register_schema(OpSchema(
    "HSoftmaxGradient", num_inputs=6, num_outputs=4,
    args=(Arg("hierarchy", "string", ""),),
    inputs=("X", "W", "b", "labels", "intermediate_output", "dY"),
    outputs=("dX", "dW", "db", "dintermediate_output"),
    inference=lambda ctx, ins: [ins[0], ins[1], ins[2], ins[4]],
    doc="Gradient of HSoftmax with respect to X, W and b (and the intermediate output)."))


@register_kernel("HSoftmax")
def hsoftmax(ctx):
    paths = _paths(ctx)

    def run(x, w, b, labels):
        x2, m = _fc_inputs(ctx, x, w, b)
        flat, label_paths = _labels(ctx, 3, labels, m, paths, w.shape[0])
        return K.hsoftmax(x2, w, b, flat, label_paths)
    return run


@register_kernel("HSoftmaxGradient")
def hsoftmax_gradient(ctx):
    paths = _paths(ctx)

    def run(x, w, b, labels, inter, dy):
        x2, m = _fc_inputs(ctx, x, w, b)
        flat, label_paths = _labels(ctx, 3, labels, m, paths, w.shape[0])
        size = K.intermediate_size(flat, label_paths)
        if not isinstance(inter, np.ndarray) or inter.dtype != np.float32 or inter.size != size:
            raise ctx.input_error(4, "intermediate_output must hold %d float32 values (HSoftmax's output for "
                                     "these labels)" % size)
        if not isinstance(dy, np.ndarray) or dy.dtype != np.float32 or dy.size != m:
            raise ctx.input_error(5, "dY must hold %d float32 values" % m)
        dx, dw, db, dinter = K.hsoftmax_gradient(x2, w, b, flat, label_paths, inter.reshape(-1), dy.reshape(-1))
        return dx.reshape(x.shape), dw, db, dinter.reshape(inter.shape)
    return run


@register_gradient("HSoftmax")
def _hsoftmax_grad(g):
    # Caffe2 names the intermediate output's gradient GO(1), whether or not one flows in
    dinter = g.GO(1) if g.has_grad(1) else g.O(1) + "_grad"
    return [g.op("HSoftmaxGradient", [g.I(0), g.I(1), g.I(2), g.I(3), g.O(1), g.GO(0)],
                 [g.GI(0), g.GI(1), g.GI(2), dinter])]


# ----------------------------------------------------------------- HSoftmaxSearch

register_schema(OpSchema(
    "HSoftmaxSearch", num_inputs=3, num_outputs=2, inputs=("X", "W", "b"), outputs=("Y_names", "Y_scores"),
    args=(Arg("tree", "string", "", doc="serialized TreeProto; every node needs offset and name"),
          Arg("beam", "float", 0.01, doc="children scoring below parent score + beam are kept"),
          Arg("topN", "int", 5, doc="entries per sample")),
    inference=lambda ctx, ins: ([TensorType((ins[0].dims[0] if len(ins[0].dims) > 1 else 1, ctx.int("topN")),
                                            DT.STRING),
                                 TensorType((ins[0].dims[0] if len(ins[0].dims) > 1 else 1, ctx.int("topN")),
                                            DT.FLOAT)] if ins[0].known else [UNKNOWN, UNKNOWN]),
    doc="Beam search through a hierarchy: scores are cumulative -log probabilities; a node's children and "
        "words scoring below its score + beam are kept and nodes expanded. Per sample, the topN lowest "
        "scores with their names (node names, or word ids as text); missing entries are '' with score 0."))


def _check_tree(ctx, node, rows, where="root"):
    if not node.HasField("offset") or not node.HasField("name"):
        raise ctx.error("HSM Search require the field offset and name in NodeProto (%s)" % where)
    length = len(node.children) + len(node.word_ids)
    if node.offset < 0 or (length and node.offset + length > rows):
        return "node '%s' uses rows %d..%d of W" % (node.name, node.offset, node.offset + length - 1)
    for child in node.children:
        bad = _check_tree(ctx, child, rows, "child of '%s'" % node.name)
        if bad:
            return bad
    return None


@register_kernel("HSoftmaxSearch")
def hsoftmax_search(ctx):
    tree = _parse(ctx, "tree", hsm_pb2.TreeProto)
    beam, top_n = ctx.float("beam"), ctx.int("topN")
    if top_n < 0:
        raise ctx.error("topN must be >= 0, got %d" % top_n)
    _check_tree(ctx, tree.root_node, np.iinfo(np.int64).max)

    def run(x, w, b):
        if not isinstance(w, np.ndarray) or w.ndim != 2:
            raise ctx.input_error(1, "Weight must be a matrix.")
        x2, _ = _fc_inputs(ctx, x, w, b)
        bad = _check_tree(ctx, tree.root_node, w.shape[0])
        if bad:
            raise ctx.input_error(1, "%s, which has %d rows" % (bad, w.shape[0]))
        return K.search(x2, w, b, tree.root_node, beam, top_n)
    return run


# ----------------------------------------------------------------- HuffmanTreeHierarchy

register_schema(OpSchema(
    "HuffmanTreeHierarchy", num_inputs=1, num_outputs=1, inputs=("Labels",), outputs=("Hierarch",),
    args=(Arg("num_classes", "int", -1, required=True, doc="classes of the tree"),),
    inference=lambda ctx, ins: [TensorType((1,), DT.STRING)],
    doc="Builds a Huffman tree over the label frequencies (int64 labels in [0, num_classes)) and returns it "
        "as a one-element string tensor holding the serialized TreeProto, numbered as Caffe2 numbers it."))


@register_kernel("HuffmanTreeHierarchy")
def huffman_tree_hierarchy(ctx):
    classes = ctx.int("num_classes")
    if classes <= 0:
        raise ctx.error("num_classes must be positive, got %d" % classes)

    def run(labels):
        if not isinstance(labels, np.ndarray) or labels.dtype != np.int64 or labels.ndim != 1:
            raise ctx.input_error(0, "Input labels must be an int64 vector.")
        bad = labels[(labels < 0) | (labels >= classes)]
        if bad.size:
            raise ctx.input_error(0, "Found an input label %d not in range [0,%d]" % (bad[0], classes))
        tree = K.huffman_tree(labels, classes, hsm_pb2.TreeProto)
        return np.array([tree.SerializeToString()], dtype=object)
    return run


should_not_do_gradient("HSoftmaxSearch", "HuffmanTreeHierarchy")
