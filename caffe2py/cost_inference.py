"""Caffe2's per-op cost inference (OpSchema::CostInferenceFunction), as
workspace.GetOperatorCost answers it: (flops, bytes_written, bytes_read) of one op
from the shapes and types of its inputs.

Only the ops Caffe2 gave a cost function have one here, with Caffe2's formulas; they
are registered next to each op family's schema (`operators/<family>/*_cost.py`).
Asking for any other op is an error, as in Caffe2 ("Cost inference function not
defined"). The schema's own `cost` (registry.OpSchema.cost, what BenchmarkNet's FLOP
columns use) is caffe2py's estimate and covers more ops; it is not consulted here.
"""
import math

from .errors import Caffe2Error
from .registry import Cost, OpContext, schema_for
from .shape_inference import itemsize

_COST_FUNCTIONS = {}


def register_cost_inference(*op_types):
    """Decorator: fn(ctx, input_types) -> registry.Cost is Caffe2's cost function of op_types."""
    def register(fn):
        for op_type in op_types:
            _COST_FUNCTIONS[op_type] = fn
        return fn
    return register


def has_cost_inference(op_type):
    return op_type in _COST_FUNCTIONS


def infer_cost(op_def, input_types):
    """Cost of op_def on inputs of these TensorTypes; Caffe2Error where Caffe2 has no cost function."""
    schema = schema_for(op_def.type)
    if schema is None:
        raise Caffe2Error("GetOperatorCost: operator type '%s' has no schema" % op_def.type)
    fn = _COST_FUNCTIONS.get(op_def.type)
    if fn is None:
        raise Caffe2Error("GetOperatorCost: Cost inference function not defined for operator '%s' "
                          "(Caffe2 gives a cost function to a few ops only: %s)"
                          % (op_def.type, ", ".join(sorted(_COST_FUNCTIONS))))
    if any(not t.known for t in input_types):
        raise Caffe2Error("GetOperatorCost: %s needs tensor inputs with known shapes" % op_def.type)
    return fn(OpContext(op_def, schema, None, list(input_types)), list(input_types))


# ----------------------------------------------------------------- shared by the cost functions

def nelem(t, from_dim=0):
    """Elements of TensorType t counted from dimension from_dim (Caffe2's nElemFromDim)."""
    return int(math.prod(t.dims[from_dim:]))


def nbytes_of_item(t):
    return itemsize(t.dtype)


def pointwise_cost(ops_per_point):
    """Caffe2's PointwiseCostInference<ops_per_point>: every input read, one output of
    input 0's size written, all counted at input 0's item size."""
    def cost(ctx, ins):  # noqa: ARG001 - Caffe2's cost functions take the op too
        size = nbytes_of_item(ins[0])
        return Cost(flops=nelem(ins[0]) * ops_per_point,
                    bytes_read=sum(nelem(t) for t in ins) * size,
                    bytes_written=nelem(ins[0]) * size)
    return cost
