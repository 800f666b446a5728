"""Caffe2's cost functions for the math ops that had one (workspace.GetOperatorCost):
PointwiseCostInference for elementwise arithmetic and the ReLU family, Sum's and
BatchMatMul's own formulas."""
from caffe2py.cost_inference import nbytes_of_item, nelem, pointwise_cost, register_cost_inference
from caffe2py.registry import Cost

# ops per element: Add/Sub/Mul/Div 1, Relu 0, LeakyRelu/ThresholdedRelu 2
register_cost_inference("Add", "Sub", "Mul", "Div")(pointwise_cost(1))
register_cost_inference("Relu")(pointwise_cost(0))
register_cost_inference("LeakyRelu", "ThresholdedRelu")(pointwise_cost(2))


@register_cost_inference("Sum")
def sum_cost(ctx, ins):
    # n inputs take n - 1 additions per element
    cost = pointwise_cost(1)(ctx, ins)
    cost.flops *= len(ins) - 1
    return cost


def _batch_matmul_output_elements(ctx, a_dims, b_dims):
    """Elements of BatchMatMul's output (its shape inference: batch dims broadcast, 1-D
    operands promoted to matrices and their added dim dropped again)."""
    a, b = list(a_dims), list(b_dims)
    a_vector, b_vector = len(a) == 1, len(b) == 1
    if a_vector:
        a = [1] + a
    if b_vector:
        b = b + [1]
    m = a[-1] if ctx.int("trans_a", 0) else a[-2]
    n = b[-2] if ctx.int("trans_b", 0) else b[-1]
    rank = max(len(a), len(b))
    a_batch = [1] * (rank - len(a)) + a[:-2]
    b_batch = [1] * (rank - len(b)) + b[:-2]
    total = 1
    for x, y in zip(a_batch, b_batch):
        total *= 0 if x == 0 or y == 0 else max(x, y)
    if not a_vector:
        total *= m
    if not b_vector:
        total *= n
    return total


@register_cost_inference("BatchMatMul")
def batch_matmul_cost(ctx, ins):
    if len(ins) != 2:
        raise ctx.error("BatchMatMul requires two inputs, got %d" % len(ins))
    a, b = ins
    if len(a.dims) < 1 or len(b.dims) < 1:
        raise ctx.error("BatchMatMul's inputs need at least one dimension")
    k = a.dims[-2] if ctx.int("trans_a", 0) and len(a.dims) > 1 else a.dims[-1]
    y_elements = _batch_matmul_output_elements(ctx, a.dims, b.dims)
    return Cost(flops=2 * y_elements * k,
                bytes_read=(nelem(a) + nelem(b)) * nbytes_of_item(a),
                bytes_written=y_elements * nbytes_of_item(a))
