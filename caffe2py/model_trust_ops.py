"""Which ops of a net from a model file the model-trust policy refuses, read from
the OperatorDefs alone (type and arguments) before any op is built: factories may
open files (Print's to_file truncates its log) and `Python` unpickles its builder
there. See model_trust.py for the policy and docs/security.md.

- code: a Python* op carrying a pickled builder (a `Python` op by token only finds
  functions the running program registered, so it stays allowed), ScriptModuleLoad
  (a TorchScript archive);
- files: every argument that names a path, resolved as the op resolves it, must lie
  in an allowed folder (Checkpoint's formatted names are checked again when it runs);
- network: store handlers and common worlds are refused outright.

The paths are computed here as the ops compute them (not imported from operators/:
these rules must not depend on where an op module lives).
"""
import os

from .args import ArgumentHelper
from .errors import ModelTrustError, describe_op
from .model_trust import HOW_TO_TRUST, check_path

PYTHON_OPS = frozenset(("Python", "PythonGradient", "PythonDLPack", "PythonDLPackGradient"))
PICKLED_ARGS = ("pickled_builder", "pickled_grad_builder")
CODE_OPS = frozenset(("ScriptModuleLoad",))       # TorchScript archives (caffe2py/script_module.py)

# the distributed ops (distributed_ops.py): rendezvous, collectives and stores shared between processes
NETWORK_OPS = frozenset((
    "FileStoreHandlerCreate", "RedisStoreHandlerCreate", "StoreSet", "StoreGet", "StoreAdd", "StoreWait",
    "CreateCommonWorld", "CloneCommonWorld", "DestroyCommonWorld", "Allreduce", "Allgather", "AllgatherRows",
    "Broadcast", "Reduce", "ReduceScatter", "Barrier", "SendTensor", "ReceiveTensor"))


def _db_paths(*names, write):
    """Save/Load/Checkpoint/DBExists: Caffe2 prefixes the root folder ('.', the
    current folder) unless absolute_path (db_path in the persistence ops' module)."""
    def paths(helper, op):
        absolute = helper.get_int("absolute_path", 0)
        for name in names:
            values = helper.get_strings(name, []) if name == "dbs" else [helper.get_string(name, "")]
            for value in values:
                if value:
                    yield name, value if absolute else "./" + value, write
    return paths


def _given_path(name):
    """CreateDB and CreateTextFileReader open the argument as it is."""
    def paths(helper, op):
        value = helper.get_string(name, "")
        if value:
            yield name, value, False
    return paths


def _log_file(extension):
    """Print / Summarize with to_file write <input name>.<ext> in the current folder."""
    def paths(helper, op):
        if helper.get_int("to_file", 0) and len(op.input):
            yield "to_file", os.path.join(os.getcwd(), op.input[0].replace("/", "_") + extension), True
    return paths


FILE_OPS = {
    "Save": _db_paths("db", write=True),
    "Checkpoint": _db_paths("db", write=True),      # the pattern; each name again when it is written
    "Snapshot": _db_paths("db", write=True),
    "Load": _db_paths("db", "dbs", write=False),
    "DBExists": _db_paths("db_name", write=False),
    "CreateDB": _given_path("db"),
    "CreateTextFileReader": _given_path("filename"),
    "Print": _log_file(".log"),
    "Summarize": _log_file(".summary"),
}


def check_op(index, op, policy, prefix=""):
    """Raise ModelTrustError for the first thing in op the policy refuses."""
    label = prefix + describe_op(index, op)
    if op.type in PYTHON_OPS:
        for arg in op.arg:
            if arg.name in PICKLED_ARGS and arg.s:
                raise ModelTrustError(
                    "%s: argument '%s' holds a pickled function builder; a model file may not carry code, so "
                    "it was refused without unpickling it; register the function in your program and refer to "
                    "it by token, or %s" % (label, arg.name, HOW_TO_TRUST))
    if op.type in CODE_OPS:
        raise ModelTrustError("%s: %s makes a TorchScript module, which is code, and a model file may not carry "
                              "code; %s" % (label, op.type, HOW_TO_TRUST))
    if op.type in NETWORK_OPS:
        named = "".join(", argument '%s' = %r" % (a.name, a.s.decode("utf-8", "replace")) for a in op.arg if a.s)
        raise ModelTrustError("%s: a model file may not open network connections or stores shared with other "
                              "processes (%s%s); %s" % (label, op.type, named[:200], HOW_TO_TRUST))
    rule = FILE_OPS.get(op.type)
    if rule is not None:
        for arg, path, write in rule(ArgumentHelper(op), op):
            check_path(path, write, "%s: argument '%s'" % (label, arg), policy)
    for arg in op.arg:          # subnets (If, While, Do, RecurrentNetwork, ONNX Loop/If/Scan)
        for k, net in enumerate([arg.n] if arg.HasField("n") else list(arg.nets)):
            where = "%s, argument '%s'%s (a net): " % (label, arg.name, "" if arg.HasField("n") else " #%d" % k)
            check_net(net, policy, where)


def check_net(net_def, policy, prefix=""):
    """Every op of net_def (subnets included) against the policy; None when trusted."""
    if policy is None or policy.trusted:
        return
    for index, op in enumerate(net_def.op):
        check_op(index, op, policy, prefix)
