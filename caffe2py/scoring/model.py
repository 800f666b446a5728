"""The model a scoring job runs: a picklable description (ModelSpec, sent to worker
processes and Ray actors) and the model prepared from it once per worker
(PreparedModel: init net run, predict net optimised and compiled, then run per batch).
"""
import hashlib
import os
from dataclasses import dataclass, field

import numpy as np

from caffe2py.errors import Caffe2Error

DEMO_ROW_SHAPE = [1, 28, 28]


@dataclass(frozen=True)
class ModelSpec:
    """What to load: an .onnx file, a Caffe2 predict net (with its init net), or,
    with neither, the built-in demo net. `outputs`: blobs to keep (default the
    net's external outputs); `shapes` / `dtypes`: per-row shapes and dtypes of
    inputs the model does not declare ({name: [d1, ...]} / {name: "float32"}).
    `trusted` / `data_roots`: the model-trust policy the model runs under, in every
    worker (caffe2py/model_trust.py; untrusted by default)."""
    onnx: str = None
    predict_net: str = None
    init_net: str = None
    outputs: tuple = ()
    shapes: dict = field(default_factory=dict)
    dtypes: dict = field(default_factory=dict)
    trusted: bool = False
    data_roots: tuple = ()

    def __post_init__(self):
        if self.onnx and (self.predict_net or self.init_net):
            raise Caffe2Error("give either an ONNX model or --init-net/--predict-net, not both")
        if self.init_net and not self.predict_net:
            raise Caffe2Error("--init-net given without --predict-net")
        for path in (self.onnx, self.predict_net, self.init_net):
            if path and not os.path.isfile(path):
                raise Caffe2Error("model file '%s' does not exist" % path)

    def describe(self):
        if self.onnx:
            return "ONNX model %s" % self.onnx
        if self.predict_net:
            return "Caffe2 nets %s%s" % (self.predict_net, " + %s" % self.init_net if self.init_net else "")
        return "built-in demo net (LeNet-style CNN on 1x28x28 images)"

    def fingerprint(self):
        """A digest of the model files and kept outputs: an output file written by
        another model or with other outputs is not taken as done."""
        digest = hashlib.sha256()
        for path in (self.onnx, self.predict_net, self.init_net):
            digest.update(b"|")
            if path:
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        digest.update(chunk)
        if not (self.onnx or self.predict_net):
            from caffe2py.demo import build_demo
            init_net, predict_net, _ = build_demo()
            for net in (init_net, predict_net):
                net.name = ""           # builder names get a counter suffix per build
                digest.update(net.SerializeToString())
        digest.update(repr((tuple(self.outputs), sorted(self.shapes.items()), sorted(self.dtypes.items()))).encode())
        return digest.hexdigest()[:16]

    def load_nets(self):
        """(init_net or None, predict_net, input names, {input: (row shape or None, dtype or None)})."""
        from caffe2py.model_trust import applying
        with applying(self.policy()):       # read_net checks and marks the nets by it; folding follows it
            return self._load_nets()

    def _load_nets(self):
        if self.onnx:
            return _onnx_nets(self.onnx)
        if self.predict_net:
            from caffe2py.models import read_net
            init_net = read_net(self.init_net) if self.init_net else None
            predict_net = read_net(self.predict_net)
            return init_net, predict_net, _caffe2_inputs(init_net, predict_net), {}
        from caffe2py.demo import INPUT, build_demo
        init_net, predict_net, _ = build_demo()
        return init_net, predict_net, [INPUT], {INPUT: (list(DEMO_ROW_SHAPE), np.dtype(np.float32))}

    def prepare(self):
        return PreparedModel(self)

    def policy(self):
        from caffe2py.model_trust import policy_for
        return policy_for([self.onnx, self.predict_net, self.init_net], self.data_roots, self.trusted)


def _onnx_nets(path):
    from caffe2py.onnx.convert import convert, graph_inputs
    from caffe2py.onnx.inputs import declared_inputs
    from caffe2py.onnx.loader import load_model
    model = load_model(path)
    init_net, predict_net = convert(model)
    declared = {}
    for name, dims, dtype in declared_inputs(model):
        # the first dim is the batch; the rest must be fixed to say a row's shape
        row = list(dims[1:]) if dims and all(dims[1:]) else None
        declared[name] = (row, dtype)
    return init_net, predict_net, list(graph_inputs(model)), declared


def _caffe2_inputs(init_net, predict_net):
    """The predict net's inputs that the init net does not make."""
    from caffe2py.commands.run import net_inputs
    made = {b for op in init_net.op for b in op.output} if init_net is not None else set()
    return [b for b in net_inputs(predict_net) if b not in made]


class PreparedModel:
    """A model ready to score batches: `run({input: [rows, ...]}) -> {output: [rows, ...]}`."""

    def __init__(self, spec):
        from caffe2py.model_trust import applying
        # the plans compiled here keep the policy for every batch they run
        with applying(spec.policy()):
            self._prepare(spec)

    def _prepare(self, spec):
        from caffe2py.onnx.backend import Caffe2pyRep
        from caffe2py.proto import caffe2_pb2
        init_net, predict_net, inputs, declared = spec.load_nets()
        self.input_names = list(inputs)
        self.row_specs = {}
        for name in self.input_names:
            shape, dtype = declared.get(name, (None, None))
            if name in spec.shapes:
                shape = list(spec.shapes[name])
            if name in spec.dtypes:
                dtype = np.dtype(spec.dtypes[name])
            self.row_specs[name] = (shape, dtype)
        unknown = [n for n in spec.shapes if n not in self.input_names] + \
                  [n for n in spec.dtypes if n not in self.input_names]
        if unknown:
            raise Caffe2Error("--shape/--dtype name %s, which %s not an input of the model (inputs: %s)"
                              % (", ".join(sorted(set(unknown))), "is" if len(set(unknown)) == 1 else "are",
                                 ", ".join(self.input_names)))
        predict_net = caffe2_pb2.NetDef.FromString(predict_net.SerializeToString())
        if not predict_net.name:
            predict_net.name = "predict"
        if spec.outputs:
            known = {b for op in predict_net.op for b in op.output} | set(predict_net.external_output)
            missing = [o for o in spec.outputs if o not in known]
            if missing:
                raise Caffe2Error("--keep %s: no such blob in net '%s' (its outputs: %s)"
                                  % (", ".join(missing), predict_net.name, ", ".join(predict_net.external_output)))
            del predict_net.external_output[:]
            predict_net.external_output.extend(spec.outputs)
        elif not len(predict_net.external_output):
            predict_net.external_output.append(predict_net.op[-1].output[0])
        self.output_names = list(predict_net.external_output)
        self.rep = Caffe2pyRep(init_net if init_net is not None else caffe2_pb2.NetDef(), predict_net,
                               self.input_names)
        # float64 rows of a float32 net are cast (Parquet writers often make doubles)
        self._float32_params = _float32_parameters(self.rep.constants)

    def conform(self, name, values):
        """values cast to the input's dtype where that loses nothing a float32 net
        keeps (float64 rows of a float32 net); any other mismatch is an error."""
        shape, dtype = self.row_specs.get(name, (None, None))
        if shape is not None and list(values.shape[1:]) != list(shape):
            raise Caffe2Error("input '%s' rows have shape %s; the model takes %s"
                              % (name, list(values.shape[1:]), list(shape)))
        if dtype is None and self._float32_params and values.dtype == np.float64:
            dtype = np.dtype(np.float32)
        if dtype is not None and values.dtype != dtype:
            if values.dtype.kind == dtype.kind or (values.dtype.kind in "iub" and dtype.kind in "iu"):
                values = values.astype(dtype)
            else:
                raise Caffe2Error("input '%s' is %s; the model takes %s" % (name, values.dtype, dtype))
        return np.ascontiguousarray(values)

    def run(self, feeds):
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise Caffe2Error("no values for the model's input(s) %s" % ", ".join(missing))
        rows = {len(v) for v in feeds.values()}
        if len(rows) != 1:
            raise Caffe2Error("inputs have different row counts: %s"
                              % ", ".join("%s %d" % (n, len(v)) for n, v in feeds.items()))
        (count,) = rows
        outputs = self.rep.run({n: self.conform(n, feeds[n]) for n in self.input_names})
        result = {}
        for name, value in zip(self.output_names, outputs):
            value = np.asarray(value)
            if value.ndim == 0 or value.shape[0] != count:
                raise Caffe2Error("output '%s' has shape %s for %d input rows: only outputs with one row per "
                                  "input row can be written next to the ids (choose others with --keep)"
                                  % (name, list(value.shape), count))
            result[name] = value
        return result


def _float32_parameters(constants):
    floats = {v.dtype for v in constants.values() if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    return np.dtype(np.float32) in floats and np.dtype(np.float64) not in floats
