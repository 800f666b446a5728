"""Model inputs for the command line: declared shapes and random values."""
import numpy as np

from caffe2py.errors import Caffe2Error

from .convert import graph_inputs


def declared_inputs(model):
    """[(name, shape, numpy dtype)] for the inputs a caller must feed; unknown or
    symbolic dims are reported as None."""
    from onnx import helper
    fed = set(graph_inputs(model))
    out = []
    for v in model.graph.input:
        if v.name not in fed:
            continue
        t = v.type.tensor_type
        if not v.type.HasField("tensor_type"):
            out.append((v.name, None, None))
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] \
            if t.HasField("shape") else None
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        except (KeyError, TypeError, ValueError):
            dtype = None
        out.append((v.name, dims, dtype))
    return out


def check_input(name, value, dims, dtype):
    """The declared element type and static dims, checked like onnxruntime does."""
    if not isinstance(value, np.ndarray):
        return
    if dtype is not None and value.dtype != dtype and not (dtype.kind == "O" and value.dtype.kind in "OSU"):
        raise Caffe2Error("input '%s' must be %s, got %s" % (name, dtype, value.dtype))
    if dims is not None:
        if value.ndim != len(dims) or any(d and d != v for d, v in zip(dims, value.shape)):
            raise Caffe2Error("input '%s' must have shape %s (None: any size), got %s"
                              % (name, dims, list(value.shape)))


def random_inputs(model, given, seed=0):
    """Values for the inputs not in `given`: the declared shape (unknown dims
    become 1) filled from a seeded generator. Returns (values, names made up)."""
    rng = np.random.default_rng(seed)
    values, made = {}, []
    for name, dims, dtype in declared_inputs(model):
        if name in given:
            continue
        if dtype is None or dims is None:
            raise Caffe2Error("input '%s' has no declared tensor type and shape; feed it with "
                              "--input %s=FILE.npy" % (name, name))
        shape = [d if d else 1 for d in dims]
        if dtype.kind == "f":
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            value = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.random(shape) < 0.5
        else:
            raise Caffe2Error("cannot make up a random value of type %s for input '%s'; feed it with "
                              "--input %s=FILE" % (dtype, name, name))
        values[name] = value
        made.append("%s %s %s" % (name, shape, dtype))
    return values, made


def load_for_run(path, given):
    """(init_net or None, predict_net, inputs, note) for `caffe2py run model.onnx`."""
    from .convert import convert
    from .loader import load_model

    model = load_model(path)
    init_net, predict_net = convert(model)
    unknown = sorted(set(given) - {name for name, _, _ in declared_inputs(model)})
    if unknown:
        raise Caffe2Error("--input names %s are not inputs of the model (inputs: %s)"
                          % (", ".join(unknown), ", ".join(graph_inputs(model))))
    declared = {name: (dims, dtype) for name, dims, dtype in declared_inputs(model)}
    for name, value in given.items():
        check_input(name, np.asarray(value), *declared[name])
    made_values, made = random_inputs(model, given)
    inputs = dict(given)
    inputs.update(made_values)
    note = None
    if made:
        note = "no value given for %s: using random values of the declared shape (seed 0): %s" % (
            "the inputs" if len(made) > 1 else "input", "; ".join(made))
    return (init_net if init_net.op else None), predict_net, inputs, note
