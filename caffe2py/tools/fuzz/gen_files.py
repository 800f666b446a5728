"""Families built from real model files:

  mutate   byte-level mutation (bit flips, interesting bytes, inserted, deleted,
           repeated and truncated ranges) of real Caffe2 NetDefs (../shared/models
           when present, and the built-in demo net) and of the onnx package's test
           models, loaded the way a user loads them (caffe2py.models.read_net from a
           file; caffe2py.onnx.backend.prepare from bytes) and run on their inputs.
           onnxruntime is the reference for mutated ONNX models it accepts.
  netdef   structural mutation of those NetDefs: op types swapped for other
           registered ops, arguments changed, duplicated or removed, inputs and
           outputs dropped or renamed, NUL bytes in names, odd net types, engines
           and device options.
"""
import glob
import os
from pathlib import Path

import numpy as np

from . import values
from .cases import Case

INTERESTING = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0x08, 0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x3A, 0x42, 0x0D, 0x10)


def shared_models_dir():
    """../shared/models beside the repository (absent in a user's checkout)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "models"
        if (parent / "setup.cfg").exists() and candidate.is_dir():
            return candidate
    env = os.environ.get("CAFFE2PY_SHARED_MODELS")
    return Path(env) if env and Path(env).is_dir() else None


def caffe2_corpus():
    """[(name, init bytes or None, predict bytes, {input: array})]."""
    from caffe2py.demo import build_demo
    corpus = []
    init, predict, inputs = build_demo(batch=2)
    corpus.append(("demo", init.SerializeToString(), predict.SerializeToString(), inputs))
    root = shared_models_dir()
    if root is not None and (root / "caffe2_mnist_predict_net.pb").exists():
        rng = np.random.default_rng(0)
        corpus.append(("mnist", (root / "caffe2_mnist_init_net.pb").read_bytes(),
                       (root / "caffe2_mnist_predict_net.pb").read_bytes(),
                       {"1": rng.random((1, 1, 28, 28), dtype=np.float32)}))
    return corpus


def onnx_corpus(include_light=True):
    """[(name, model path, input paths)] of the onnx package's test models."""
    try:
        import onnx
    except ImportError:
        return []
    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    out = []
    for model in sorted(glob.glob(str(data / "*" / "*" / "model.onnx"))):
        inputs = sorted(glob.glob(os.path.join(os.path.dirname(model), "test_data_set_0", "input_*.pb")))
        out.append((Path(model).parent.name, model, inputs))
    if include_light:
        for model in sorted(glob.glob(str(data / "light" / "*.onnx"))):
            out.append((Path(model).stem, model, []))
    return out


_corpora = {}


def _corpus(kind):
    if kind not in _corpora:
        _corpora[kind] = caffe2_corpus() if kind == "caffe2" else onnx_corpus()
    return _corpora[kind]


def mutate_bytes(rng, data):
    data = bytearray(data)
    # one or two small changes mostly: a file that still parses reaches the runtime
    count = 1 if rng.random() < 0.6 else (2 if rng.random() < 0.6 else int(rng.integers(3, 9)))
    for _ in range(count):
        if not data:
            data = bytearray(rng.integers(0, 256, 8, dtype=np.uint8).tobytes())
        k = int(rng.integers(len(data)))
        what = rng.random()
        if what < 0.3:
            data[k] ^= 1 << int(rng.integers(8))
        elif what < 0.5:
            data[k] = values.pick(rng, INTERESTING)
        elif what < 0.6:
            data[k:k] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        elif what < 0.7:
            del data[k:k + int(rng.integers(1, 17))]
        elif what < 0.8:
            n = int(rng.integers(1, 33))
            data[k:k] = data[k:k + n]
        elif what < 0.85:
            del data[k:]
        else:  # a varint that claims a huge length or value
            data[k:k + 1] = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
    return bytes(data)


def generate_mutate(case_id, rng):
    if rng.random() < 0.35:
        name, init, predict, inputs = values.pick(rng, _corpus("caffe2"))
        which = "init" if init is not None and rng.random() < 0.3 else "predict"
        if which == "init":
            init = mutate_bytes(rng, init)
        else:
            predict = mutate_bytes(rng, predict)
        return Case(case_id, "mutate", {"init_net": init, "predict_net": predict, "inputs": inputs},
                    "%s: mutated %s net" % (name, which))
    corpus = _corpus("onnx")
    if not corpus:
        return None
    # the light_* CNNs cost a full forward pass each: drawn rarely
    small = [c for c in corpus if not c[0].startswith("light_")]
    name, path, input_paths = values.pick(rng, corpus if rng.random() < 0.03 else small)
    structural = rng.random() < 0.5
    model = (mutate_model(rng, Path(path).read_bytes()) if structural
             else mutate_bytes(rng, Path(path).read_bytes()))
    inputs = _model_inputs(path, input_paths)
    return Case(case_id, "mutate", {"model_onnx": model, "inputs": inputs, "light": name.startswith("light_")},
                "%s: %s ONNX model" % (name, "structurally mutated" if structural else "byte-mutated"))


_inputs_cache = {}


def _model_inputs(path, input_paths):
    """The unmutated model's inputs: its test data set (named in the order of the
    graph's inputs that are not initializers), else random values of the declared
    shapes."""
    if path not in _inputs_cache:
        import onnx
        from onnx import TensorProto, numpy_helper

        from caffe2py.onnx.inputs import random_inputs
        model = onnx.load(path)
        fed = [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
        inputs = {}
        for k, p in enumerate(input_paths):
            t = TensorProto()
            t.ParseFromString(Path(p).read_bytes())
            name = t.name if t.name in fed else (fed[k] if k < len(fed) else "input_%d" % k)
            inputs[name] = numpy_helper.to_array(t)
        try:
            inputs.update(random_inputs(model, inputs)[0])
        except Exception:  # noqa: BLE001 - undeclared shapes: the feeds stay as they are
            pass
        _inputs_cache[path] = inputs
    return dict(_inputs_cache[path])


def mutate_model(rng, data):
    """Semantic edits of a parsed ONNX model: attribute values, op types, inputs,
    initializer dims and types, graph input types, opset versions."""
    import onnx
    from onnx import helper

    from .gen_onnx import op_types as onnx_types
    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    for _ in range(int(rng.integers(1, 4))):
        what = rng.random()
        if what < 0.35 and len(graph.node):
            node = graph.node[int(rng.integers(len(graph.node)))]
            if len(node.attribute) and rng.random() < 0.8:
                attr = node.attribute[int(rng.integers(len(node.attribute)))]
                if rng.random() < 0.15:
                    node.attribute.remove(attr)
                else:
                    value = {1: values.float_value, 2: lambda r: values.int_value(r, small=False),
                             3: lambda r: values.string_value(r).encode(),
                             6: lambda r: values.float_list(r, int(r.integers(0, 5))),
                             7: lambda r: values.int_list(r, int(r.integers(0, 6)))}.get(attr.type)
                    if value is not None:
                        new = helper.make_attribute(attr.name, value(rng), attr_type=attr.type)
                        attr.CopyFrom(new)
            else:
                node.attribute.append(helper.make_attribute(
                    values.pick(rng, ("axis", "axes", "perm", "pads", "kernel_shape", "keepdims", "to")),
                    values.pick(rng, (5, -7, [1, 2], [0, 0, -1, 9], 2 ** 40))))
        elif what < 0.5 and len(graph.node):
            node = graph.node[int(rng.integers(len(graph.node)))]
            node.op_type = values.pick(rng, onnx_types())[1]
        elif what < 0.62 and len(graph.node):
            node = graph.node[int(rng.integers(len(graph.node)))]
            if len(node.input) and rng.random() < 0.5:
                del node.input[int(rng.integers(len(node.input)))]
            elif len(node.input):
                node.input[int(rng.integers(len(node.input)))] = values.pick(
                    rng, [v.name for v in graph.input] + [t.name for t in graph.initializer] + ["", "nope"])
        elif what < 0.8 and len(graph.initializer):
            t = graph.initializer[int(rng.integers(len(graph.initializer)))]
            choice = rng.random()
            if choice < 0.4 and len(t.dims):
                t.dims[int(rng.integers(len(t.dims)))] = values.pick(rng, (0, 1, 2, 3, -1, 2 ** 33))
            elif choice < 0.6:
                t.data_type = int(values.pick(rng, (1, 6, 7, 9, 10, 11, 16, 30)))
            elif choice < 0.8 and t.raw_data:
                t.raw_data = t.raw_data[:int(rng.integers(len(t.raw_data)))]
            else:
                del t.dims[:]
        elif what < 0.9 and len(graph.input):
            v = graph.input[int(rng.integers(len(graph.input)))]
            v.type.tensor_type.elem_type = int(values.pick(rng, (1, 6, 7, 9, 10, 11)))
        else:
            for imp in model.opset_import:
                if imp.domain in ("", "ai.onnx"):
                    imp.version = int(rng.integers(1, 30))
    return model.SerializeToString()


def run_caffe2_files(case, workdir):
    """Read the NetDefs from files as `caffe2py run` does, run init then predict."""
    from caffe2py.models import read_net
    from caffe2py.workspace import Workspace

    from .outcomes import classify_exception, outcome
    init_path = os.path.join(workdir, "init_net.pb")
    predict_path = os.path.join(workdir, "predict_net.pb")
    try:
        if case.data["init_net"] is not None:
            Path(init_path).write_bytes(case.data["init_net"])
        Path(predict_path).write_bytes(case.data["predict_net"])
        ws = Workspace("fuzz")
        init = read_net(init_path) if case.data["init_net"] is not None else None
        predict = read_net(predict_path)
        if init is not None:
            ws.run_net_once(init)
        for name, value in case.data["inputs"].items():
            ws.feed_blob(name, value)
        ws.run_net_once(predict)
    except Exception as exc:  # noqa: BLE001
        return outcome(*classify_exception(exc))
    return outcome("ran")


# ------------------------------------------------------------------ netdef family

def _mutate_op(rng, op, types):
    from caffe2py.args import make_argument
    what = rng.random()
    if what < 0.2:
        op.type = values.pick(rng, types)
    elif what < 0.45 and len(op.arg):
        arg = op.arg[int(rng.integers(len(op.arg)))]
        value = values.pick(rng, (values.int_value(rng, small=False), values.float_value(rng),
                                  values.int_list(rng), values.string_value(rng), []))
        new = make_argument(arg.name, value)
        arg.CopyFrom(new)
    elif what < 0.55 and len(op.arg):
        del op.arg[int(rng.integers(len(op.arg)))]
    elif what < 0.6 and len(op.arg):
        op.arg.append(op.arg[int(rng.integers(len(op.arg)))])
    elif what < 0.7 and len(op.input):
        del op.input[int(rng.integers(len(op.input)))]
    elif what < 0.75 and len(op.output):
        del op.output[int(rng.integers(len(op.output)))]
    elif what < 0.82 and len(op.input):
        op.input[int(rng.integers(len(op.input)))] = values.pick(rng, ("", "missing", "a\x00b", "data", "1"))
    elif what < 0.87:
        op.name = values.pick(rng, ("", "x\x00y", "\u00e9", "n" * 300))
    elif what < 0.92:
        op.engine = values.pick(rng, ("CUDNN", "bogus", "DEFAULT", "", "NNPACK"))
    elif what < 0.96:
        op.device_option.device_type = int(values.pick(rng, (0, 1, 2, 6, 99)))
    else:
        op.arg.append(make_argument(values.pick(rng, ("axis", "order", "kernel", "group", "bogus")),
                                    values.pick(rng, (5, -5, 0, "NHWC", 2 ** 40, 1.5))))


def generate_netdef(case_id, rng):
    from caffe2py.proto import caffe2_pb2

    from .gen_ops import op_types
    name, init, predict, inputs = values.pick(rng, _corpus("caffe2"))
    net = caffe2_pb2.NetDef.FromString(predict)
    types = op_types()
    for _ in range(int(rng.integers(1, 4))):
        if len(net.op) == 0:
            break
        _mutate_op(rng, net.op[int(rng.integers(len(net.op)))], types)
    what = rng.random()
    if what < 0.05:
        net.name = "a\x00b"
    elif what < 0.1:
        net.type = values.pick(rng, ("dag", "bogus", "async_scheduling", "prof_dag"))
    elif what < 0.13 and len(net.op) > 1:
        first = caffe2_pb2.OperatorDef()
        first.CopyFrom(net.op[0])
        net.op[0].CopyFrom(net.op[-1])
        net.op[-1].CopyFrom(first)
    elif what < 0.16:
        net.external_output.append("never_made")
    return Case(case_id, "netdef", {"init_net": init, "predict_net": net.SerializeToString(), "inputs": inputs},
                "%s: structurally mutated predict net" % name)
