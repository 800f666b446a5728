"""Families of targeted hostile input:

  external  ONNX models whose external data lies outside the model's folder (`..`,
            absolute paths, symlinks out, missing files, ranges past the end,
            malformed offsets) must be refused with caffe2py's error naming the
            tensor and the location; well-placed external data must load and
            give the right result.
  api       the workspace functions with hostile names and values (odd Python
            objects, unusual dtypes, random bytes as serialized blobs and ops,
            nets that do not exist).
"""
import os
from pathlib import Path

import numpy as np

from . import values
from .cases import Case

HOSTILE_LOCATIONS = ("../outside.bin", "ABS", "sub/../../outside.bin", "link.bin", "linkdir/outside.bin",
                     "missing.bin", "", ".", "sub", "a\x00b.bin", "..\\outside.bin", "/dev/zero",
                     "sub/../weights.bin#offset", "weights.bin#length", "weights.bin#badoffset",
                     "weights.bin#negoffset")
GOOD_LOCATIONS = ("weights.bin", "sub/weights.bin", "./weights.bin")


def generate_external(case_id, rng):
    where = (values.pick(rng, HOSTILE_LOCATIONS) if rng.random() < 0.75 else values.pick(rng, GOOD_LOCATIONS))
    in_node = rng.random() < 0.3            # external data in a Constant node instead of an initializer
    n = int(rng.integers(1, 6))
    return Case(case_id, "external", {"where": where, "in_node": in_node, "n": n,
                                      "x": values.tensor(rng, (n,), "float", np.float32)},
                "external data at %r (%s)" % (where, "Constant node" if in_node else "initializer"))


def _external_model(where, in_node, n, root):
    """Write model.onnx in root/model with W's data external at `where`."""
    import onnx
    from onnx import TensorProto, helper
    folder = root / "model"
    (folder / "sub").mkdir(parents=True)
    weights = np.arange(n, dtype=np.float32) + 0.5
    (root / "outside.bin").write_bytes(weights.tobytes())
    (folder / "weights.bin").write_bytes(weights.tobytes())
    (folder / "sub" / "weights.bin").write_bytes(weights.tobytes())
    os.symlink(root / "outside.bin", folder / "link.bin")
    os.symlink(root, folder / "linkdir")
    location, offset, length = where, None, None
    if where == "ABS":
        location = str(root / "outside.bin")
    elif "#" in where:
        location, what = where.split("#")
        offset, length = {"offset": ("4096", None), "length": ("0", str(4 * n + 64)),
                          "badoffset": ("abc", None), "negoffset": ("-4", None)}[what]
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[n])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    if in_node:
        nodes = [helper.make_node("Constant", [], ["W"], value=tensor), helper.make_node("Add", ["x", "W"], ["y"])]
        graph = helper.make_graph(nodes, "ext", [x], [y])
    else:
        graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "ext", [x], [y], initializer=[tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    _ = onnx
    return path, weights


def run_external(case, workdir):
    import tempfile

    from caffe2py.onnx import backend

    from .outcomes import classify_exception, outcome
    d = case.data
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path, weights = _external_model(d["where"], d["in_node"], d["n"], Path(tmp))
        try:
            out = backend.prepare(str(path)).run({"x": d["x"]})[0]
        except Exception as exc:  # noqa: BLE001
            cls, message = classify_exception(exc)
            if cls == "our_error" and d["where"] in GOOD_LOCATIONS:
                return outcome("wrong_result", "well-placed external data was refused: " + message)
            if cls == "our_error" and ("'W'" not in message):
                return outcome("raw_text", "the error does not name the tensor 'W': " + message)
            return outcome(cls, message)
    if d["where"] not in GOOD_LOCATIONS:
        return outcome("silent_accept", "external data at %r was read" % d["where"])
    if not np.allclose(out, d["x"] + weights, equal_nan=True):
        return outcome("wrong_result", "x + W from external data differs from the reference")
    return outcome("ran")


# ------------------------------------------------------------------ api family

_ODD_VALUES = ("object", "nested_list", "structured", "datetime", "complex", "zero_dim_string", "huge_empty",
               "memoryview", "none", "bytes", "float128", "noncontiguous", "readonly", "bool_scalar",
               "int_scalar", "str")
_ODD_NAMES = ("ok", "", "a\x00b", "\u00e9", "n" * 1000, 5, None, b"\xff\xfe", "../x")


def _odd_value(what, rng):
    if what == "object":
        return object()
    if what == "nested_list":
        return [1, [2, 3]]
    if what == "structured":
        return np.zeros(3, dtype=[("a", np.int32), ("b", np.float32)])
    if what == "datetime":
        return np.array(["2020-01-01"], dtype="datetime64[D]")
    if what == "complex":
        return np.ones(3, np.complex128)
    if what == "zero_dim_string":
        return np.array("text")
    if what == "huge_empty":
        return np.empty((0, 2 ** 40), np.float32)
    if what == "memoryview":
        return memoryview(b"abcd")
    if what == "none":
        return None
    if what == "bytes":
        return b"\x00\x01"
    if what == "float128":
        return np.ones(2, np.longdouble)
    if what == "noncontiguous":
        return np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    if what == "readonly":
        a = np.ones(3, np.float32)
        a.setflags(write=False)
        return a
    if what == "bool_scalar":
        return True
    if what == "int_scalar":
        return 7
    return "a string"


def generate_api(case_id, rng):
    steps = []
    for _ in range(int(rng.integers(1, 4))):
        action = values.pick(rng, ("feed", "feed", "fetch", "deserialize", "run_op_bytes", "run_missing_net",
                                   "create_net_twice", "serialize", "infer_shapes", "feed_run"))
        steps.append((action, values.pick(rng, _ODD_NAMES), values.pick(rng, _ODD_VALUES),
                      rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8).tobytes()))
    return Case(case_id, "api", {"steps": steps}, ", ".join(s[0] for s in steps))


def run_api(case, workdir):
    from caffe2py import core, workspace

    from .outcomes import classify_exception, outcome
    workspace.ResetWorkspace()
    rng = np.random.default_rng(0)
    try:
        for action, name, what, raw in case.data["steps"]:
            if action == "feed":
                workspace.FeedBlob(name, _odd_value(what, rng))
            elif action == "fetch":
                workspace.FetchBlob(name)
            elif action == "deserialize":
                ok = workspace.FeedBlob("src", np.arange(4, dtype=np.float32))
                blob = bytearray(workspace.SerializeBlob("src"))
                if raw:
                    blob[len(raw) % max(len(blob), 1)] ^= raw[0]
                workspace.DeserializeBlob("dst", bytes(blob) if ok and raw[:1] != b"\x00" else raw)
            elif action == "run_op_bytes":
                workspace.RunOperatorOnce(raw)
            elif action == "run_missing_net":
                workspace.RunNet("never_created_%d" % len(raw))
            elif action == "create_net_twice":
                net = core.Net("twice")
                net.ConstantFill([], ["c"], shape=[1], value=1.0)
                workspace.CreateNet(net)
                workspace.CreateNet(net)
            elif action == "serialize":
                workspace.FeedBlob("s", _odd_value(what, rng))
                workspace.SerializeBlob("s")
            elif action == "infer_shapes":
                net = core.Net("infer")
                net.Relu(["x_%s" % what], ["y"])
                workspace.InferShapesAndTypes([net], {"x_%s" % what: [len(raw), 2]})
            elif action == "feed_run":
                workspace.FeedBlob("v", _odd_value(what, rng))
                net = core.Net("use")
                net.Relu(["v"], ["w"])
                workspace.RunNetOnce(net)
    except Exception as exc:  # noqa: BLE001
        return outcome(*classify_exception(exc))
    return outcome("ran")
