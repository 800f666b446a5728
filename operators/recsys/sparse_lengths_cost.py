"""Caffe2's cost function for SparseLengthsSum / WeightedSum / Mean
(CostInferenceForSparseLengths; workspace.GetOperatorCost): one multiply-add per
gathered element (two with weights), the gathered rows, indices and lengths read;
nothing counted as written."""
from caffe2py.cost_inference import nbytes_of_item, nelem, register_cost_inference
from caffe2py.registry import Cost


def _sparse_lengths_cost(weighted):
    def cost(ctx, ins):
        needed = 4 if weighted else 3
        if len(ins) < needed:
            raise ctx.error("%s requires at least %d inputs, got %d" % (ctx.op_def.type, needed, len(ins)))
        data, indices, lengths = ins[0], ins[1 + weighted], ins[2 + weighted]
        if not data.dims:
            raise ctx.error("data requires at least 1 dimension", ctx.op_def.input[0])
        rows = data.dims[0]
        if rows == 0:
            return Cost()
        if not lengths.dims:
            raise ctx.error("lengths requires at least 1 dimension", ctx.op_def.input[2 + weighted])
        d = nelem(data, 1)
        n_indices = nelem(indices)
        result = Cost(flops=n_indices * d,
                      bytes_read=n_indices * (d * nbytes_of_item(data) + nbytes_of_item(indices))
                      + lengths.dims[0] * nbytes_of_item(lengths),
                      params_bytes=rows * d * nbytes_of_item(data))
        if weighted:
            result.flops += n_indices * d
            result.bytes_read += n_indices * nbytes_of_item(ins[1])
        return result
    return cost


register_cost_inference("SparseLengthsSum", "SparseLengthsMean")(_sparse_lengths_cost(False))
register_cost_inference("SparseLengthsWeightedSum")(_sparse_lengths_cost(True))
