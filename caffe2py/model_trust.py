"""The model-trust policy: what a net read from a model file may do (docs/security.md).

A script that builds its own nets is trusted code and keeps Caffe2's behaviour. A
model file handed to the command line, the scoring service or a loader
(models.read_net, the predictor loaders, onnx.backend.prepare of a path) is not:
it may not carry code, may touch files only inside the folders the user allows
(--data-root DIR; reading also in the model files' own folders) and may not reach
the network. --trust-model, CAFFE2PY_TRUST_MODEL=1 or trusted=True restores
Caffe2's behaviour. Which ops ask for what: model_trust_ops.py.

How a policy reaches the executor: a loader sets it as a context (`applying`)
around what it compiles and runs, and marks the NetDefs it returns (`mark`), so a
net read by read_net and run later through `workspace` keeps it. compile_net
checks every op of a net against it before any op is built; the plan keeps it and
sets it again for each run, where paths only known then (Checkpoint's formatted
name, the db of a deserialized DBReader) are checked by `check_path`.
"""
import contextvars
import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import ModelTrustError

ENV = "CAFFE2PY_TRUST_MODEL"
# the NetDef argument a loader's mark lives in: a token only this process knows
MARK = "caffe2py_model_trust"
HOW_TO_ALLOW = ("allow it with --data-root DIR (data_roots=[DIR] in Python), or trust the model with "
                "--trust-model (trusted=True in Python, %s=1)" % ENV)
HOW_TO_TRUST = "trust the model with --trust-model (trusted=True in Python, %s=1)" % ENV


@dataclass(frozen=True)
class TrustPolicy:
    """data_roots: folders a model may read and write; read_roots: folders it may
    only read (its own files' folders). Real paths. trusted: no limits."""
    data_roots: tuple = ()
    read_roots: tuple = ()
    trusted: bool = False

    def allows(self, real, write):
        roots = self.data_roots if write else self.data_roots + self.read_roots
        return any(_inside(real, root) for root in roots)

    def describe(self, write):
        parts = ["--data-root: %s" % (", ".join(self.data_roots) or "none given")]
        if not write:
            parts.append("the model's own folder: %s" % (", ".join(self.read_roots) or "none"))
        return "; ".join(parts)


TRUSTED = TrustPolicy(trusted=True)


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def real_path(path):
    """The path with symlinks and '..' resolved; a path that does not exist yet is
    resolved through its existing parents (os.path.realpath's non-strict mode)."""
    return os.path.realpath(os.fsdecode(os.fspath(path)))


def env_trusts():
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def policy_for(model_files=(), data_roots=(), trusted=False):
    """The policy for nets read from model_files: TRUSTED when trusted (or the
    environment says so), else the data roots plus the files' folders for reading."""
    if trusted or env_trusts():
        return TRUSTED
    roots = tuple(dict.fromkeys(real_path(d) for d in data_roots or () if d))
    own = tuple(dict.fromkeys(os.path.dirname(real_path(f)) for f in model_files if f))
    return TrustPolicy(roots, own)


def loader_policy(model_files, data_roots=None, trusted=None):
    """The policy for nets a loader reads from model_files: the one a caller set
    (the command line, a service) when the call says nothing else, else policy_for."""
    current = _current.get()
    if current is not None and trusted is None and data_roots is None:
        return current
    return policy_for(model_files, data_roots or (), bool(trusted))


# ----------------------------------------------------------------- the context

_current = contextvars.ContextVar("caffe2py_model_trust", default=None)


@contextmanager
def applying(policy):
    """Within: nets compiled (and runs of plans) follow `policy` (None: unset)."""
    token = _current.set(policy)
    try:
        yield policy
    finally:
        _current.reset(token)


def enter(policy):
    """applying() for the executor's run paths, without a generator frame per run."""
    return _current.set(policy)


def leave(token):
    _current.reset(token)


def current():
    """The policy set here (None: unset; TRUSTED when a caller trusts its models)."""
    return _current.get()


def active():
    """The untrusted policy in force here, or None (trusted, or none set)."""
    policy = _current.get()
    return None if policy is None or policy.trusted else policy


# ----------------------------------------------------------------- marks on NetDefs

_marks = {}         # token -> policy; tokens are random, so a file cannot name one
_tokens = {}        # policy -> token


def mark(net_def, policy):
    """Record on net_def the policy of the file it was read from (replacing any mark
    the file carried); TRUSTED leaves no mark. Returns net_def."""
    if any(a.name == MARK for a in net_def.arg):
        kept = [a for a in net_def.arg if a.name != MARK]
        del net_def.arg[:]
        net_def.arg.extend(kept)
    if policy is not None and not policy.trusted:
        token = _tokens.get(policy)
        if token is None:
            token = _tokens[policy] = secrets.token_hex(16).encode()
            _marks[token] = policy
        net_def.arg.add(name=MARK, s=token)
    return net_def


def net_policy(net_def):
    """The policy compile_net applies: the context's when a loader set one, else
    the net's mark; None when the net is trusted."""
    policy = _current.get()
    if policy is None:
        for arg in net_def.arg:
            if arg.name == MARK:
                policy = _marks.get(arg.s)
    return None if policy is None or policy.trusted else policy


# ----------------------------------------------------------------- paths

def check_path(path, write, where, policy=None):
    """Raise ModelTrustError unless the policy (default: the active one) lets a
    model file read (or write) `path`. `where` names the op and the argument."""
    policy = policy or active()
    if policy is None:
        return
    try:
        real = real_path(path)
    except (ValueError, OSError, TypeError):        # a NUL byte, an odd object: no path to allow
        real = None
    if real is not None and policy.allows(real, write):
        return
    verb = "write" if write else "read"
    if real is None:
        raise ModelTrustError("%s: '%s' is no file name a folder can hold (a NUL byte?), so a model file may not "
                              "%s it; %s" % (where, _printable(path), verb, HOW_TO_TRUST))
    shown = "" if real == os.fsdecode(path) else " (resolved: '%s')" % _printable(real)
    raise ModelTrustError("%s: %s '%s'%s is outside the folders a model file may %s (%s); %s"
                          % (where, "writing" if write else "reading", _printable(path), shown, verb,
                             policy.describe(write), HOW_TO_ALLOW))


def _printable(path):
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def check_op_path(ctx, arg, path, write):
    """check_path for a kernel whose path is only known when it runs (one call)."""
    check_path(path, write, "%s: argument '%s'" % (ctx.label, arg))
