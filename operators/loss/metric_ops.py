"""Evaluation metrics: APMeter, MultiClassAccuracy and Perplexity (no gradients)."""
import numpy as np

from caffe2py.gradients import should_not_do_gradient
from caffe2py.kernels.cpu.loss import metrics as M
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

DT = caffe2_pb2.TensorProto


def _matrix(ctx, index, a, what, dtypes):
    if not isinstance(a, np.ndarray) or a.dtype not in dtypes:
        raise ctx.input_error(index, "%s must be a %s tensor, got %s"
                              % (what, " or ".join(np.dtype(d).name for d in dtypes),
                                 getattr(a, "dtype", type(a).__name__)))
    return a


register_schema(OpSchema(
    "APMeter", num_inputs=2, num_outputs=1, args=(Arg("buffer_size", "int", 1000),),
    inputs=("predictions", "labels"), outputs=("AP",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[1],), DT.FLOAT) if ins[0].known and len(ins[0].dims) == 2
                                else UNKNOWN],
    doc="Average precision per class over the last buffer_size (score, label) pairs the op has seen: "
        "predictions [N, D] float32, labels [N, D] int32 (1 = positive). The buffer lives in the op, across "
        "runs of its net; like Caffe2's it is kept sorted by score, and room for new pairs is made by "
        "dropping its first (highest-scoring) entries."))


@register_kernel("APMeter")
def ap_meter(ctx):
    size = ctx.int("buffer_size")
    if size <= 0:
        raise ctx.error("buffer_size must be positive, got %d" % size)
    state = M.APBuffer(size)

    def run(pred, labels):
        _matrix(ctx, 0, pred, "predictions", (np.float32,))
        if pred.ndim != 2:
            raise ctx.input_error(0, "predictions must be [N, D], got %s" % list(pred.shape))
        _matrix(ctx, 1, labels, "labels", (np.int32,))
        if labels.shape != pred.shape:
            raise ctx.input_error(1, "labels must be shaped like predictions %s, got %s"
                                  % (list(pred.shape), list(labels.shape)))
        if state.scores is not None and state.scores.shape[0] != pred.shape[1]:
            raise ctx.input_error(0, "this APMeter buffers %d classes, predictions have %d"
                                  % (state.scores.shape[0], pred.shape[1]))
        state.add(pred, labels)
        return state.average_precision()
    return run


register_schema(OpSchema(
    "MultiClassAccuracy", num_inputs=2, num_outputs=2, inputs=("prediction", "labels"),
    outputs=("accuracies", "amounts"),
    inference=lambda ctx, ins: ([TensorType((ins[0].dims[1],), DT.FLOAT), TensorType((ins[0].dims[1],), DT.INT32)]
                                if ins[0].known and len(ins[0].dims) == 2 else [UNKNOWN, UNKNOWN]),
    doc="Per class j: the share of rows labelled j whose first highest prediction is j (0 when no row is), "
        "and the number of rows labelled j. prediction [N, D] float32, labels [N] int32 in [0, D)."))


@register_kernel("MultiClassAccuracy")
def multi_class_accuracy(ctx):
    def run(pred, labels):
        _matrix(ctx, 0, pred, "prediction", (np.float32,))
        if pred.ndim != 2:
            raise ctx.input_error(0, "prediction must be [N, D], got %s" % list(pred.shape))
        _matrix(ctx, 1, labels, "labels", (np.int32,))
        if labels.shape != (pred.shape[0],):
            raise ctx.input_error(1, "labels must be [%d], got %s" % (pred.shape[0], list(labels.shape)))
        if labels.size and (labels.min() < 0 or labels.max() >= pred.shape[1]):
            bad = int(labels[(labels < 0) | (labels >= pred.shape[1])][0])
            raise ctx.input_error(1, "label %d is outside [0, %d)" % (bad, pred.shape[1]))
        return M.multi_class_accuracy(pred, labels.astype(np.int64))
    return run


register_schema(OpSchema(
    "Perplexity", num_inputs=1, num_outputs=1, inputs=("probabilities",), outputs=("output",),
    inference=lambda ctx, ins: [TensorType((), DT.FLOAT)],
    doc="Perplexity of a vector of probabilities: prod(p_i ^ (-1/N)), a 0-D float32 (1 for no "
        "probabilities)."))


@register_kernel("Perplexity")
def perplexity(ctx):
    def run(p):
        _matrix(ctx, 0, p, "probabilities", (np.float32,))
        if p.ndim != 1:
            raise ctx.input_error(0, "probabilities must be 1-D, got %s" % list(p.shape))
        return M.perplexity(p)
    return run


should_not_do_gradient("APMeter", "MultiClassAccuracy", "Perplexity")
