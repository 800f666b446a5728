"""ONNX translations of recsys.py's ops: Gather, BatchGather, BatchMatMul."""
from caffe2py.onnx.export_registry import register_exporter


@register_exporter("Gather", "BatchGather", onnx_form="Gather (axis 0 for Gather, 1 for BatchGather, or `axis`)")
def export_gather(ex):
    axis = ex.args.int("axis", 1 if ex.type == "BatchGather" else 0)
    ex.node("Gather", ex.inputs, ex.outputs, axis=axis)


def _swap_last_two(ex, x):
    rank = ex.need_rank(x, "trans_a / trans_b swap its last two dims")
    if rank < 2:
        return x
    return ex.transpose(x, list(range(rank - 2)) + [rank - 1, rank - 2])


@register_exporter("BatchMatMul", onnx_form="MatMul (NumPy's matmul rules); trans_a / trans_b as a "
                                            "Transpose of the last two dims")
def export_batch_matmul(ex):
    a, b = ex.inputs
    if ex.args.bool("trans_a"):
        a = _swap_last_two(ex, a)
    if ex.args.bool("trans_b"):
        b = _swap_last_two(ex, b)
    ex.node("MatMul", [a, b], ex.outputs)
