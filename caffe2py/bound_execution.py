"""Shape-annotated execution: run a net under a BoundShapeSpec.

A BoundNet is a Net compiled with the inferred input types (kernel factories
see them in OpContext.input_types) that checks, before every run, that the
blobs it reads from the workspace fit the bound it was inferred for. Memory
figures for a spec come from the same shape map.
"""
from .errors import Caffe2Error
from .executor import Net, compile_net
from .proto import caffe2_pb2
from .shape_inference import BoundShapeInferencer, DimType


def _net_def(net):
    return net.Proto() if hasattr(net, "Proto") else net


def bound_violation(name, actual_dims, info, spec):
    """None when actual_dims fit under the bound `info`; otherwise the message."""
    actual = [int(d) for d in actual_dims]
    if len(actual) != len(info.dims):
        return ("blob '%s' was fed %s (%d-D) but the net was bound for %d-D %s"
                % (name, actual, len(actual), len(info.dims), info.dims))
    for i, (a, bound) in enumerate(zip(actual, info.dims)):
        if a > bound:
            return ("blob '%s' was fed %s but the net was bound for at most %s (%s)"
                    % (name, actual, info.dims, spec.describe_dim(info.dim_type(i))))
    return None


def check_fed_blobs(blobs, names, shapes, spec):
    """Raise Caffe2Error for the first of `names` whose value exceeds its bound."""
    for name in names:
        info = shapes.get(name)
        value = blobs.get(name) if hasattr(blobs, "get") else None
        shape = getattr(value, "shape", None)
        if info is None or shape is None:
            continue
        problem = bound_violation(name, shape, info, spec)
        if problem:
            raise Caffe2Error(problem)


class BoundNet(Net):
    """A Net compiled against inferred shapes; run() checks its inputs first."""

    def __init__(self, net_def, workspace, spec, shapes):  # noqa: super().__init__ would compile twice
        self.net_def = net_def
        self.name = net_def.name
        self.workspace = workspace
        self.spec = spec
        self.shapes = shapes
        types = {name: info.as_tensor_type() for name, info in shapes.items()}
        self.plan = compile_net(net_def, workspace.blobs.keys(), input_types=types)
        self.observers = []

    def run(self):
        check_fed_blobs(self.workspace.blobs, self.plan.reads, self.shapes, self.spec)
        super().run()


def create_bound_net(workspace, net, spec, shape_hints=None, overwrite=False):
    """Infer bound shapes for `net` (workspace blobs are CONSTANT hints), compile
    it with those types and register it in the workspace. Returns the BoundNet;
    its `.shapes` holds the shape map."""
    net_def = caffe2_pb2.NetDef.FromString(_net_def(net).SerializeToString())
    if not net_def.name:
        raise Caffe2Error("a net must have a name to be created in a workspace")
    if net_def.name in workspace.nets and not overwrite:
        raise Caffe2Error("a net named '%s' already exists; pass overwrite=True" % net_def.name)
    shapes = BoundShapeInferencer(spec).infer(net_def, shape_hints, workspace)
    bound = BoundNet(net_def, workspace, spec, shapes)
    workspace.nets[net_def.name] = bound
    return bound


def out_of_bound_blobs(blobs, shapes, spec, producers=None):
    """After a run: (blob, message) for every blob whose actual shape exceeds its
    inferred bound, naming the op whose inference rule produced the bound."""
    problems = []
    for name, info in shapes.items():
        value = blobs.get(name) if hasattr(blobs, "get") else None
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        problem = bound_violation(name, shape, info, spec)
        if problem:
            op = (producers or {}).get(name)
            problem = problem.replace("was fed", "is")
            if op:
                problem += "; the shape rule of %s is wrong" % op
            problems.append((name, problem))
    return problems


def memory_summary(net_def, shapes, parameters=()):
    """Bytes at the bound: parameters, activations (everything else known), all
    blobs together (what a workspace holds after a run), and the peak if each
    activation were freed after its last reader (external outputs are kept)."""
    net_def = _net_def(net_def)
    parameters = set(parameters)
    param_bytes = sum(shapes[n].nbytes for n in parameters if n in shapes)
    act_bytes = sum(info.nbytes for n, info in shapes.items() if n not in parameters)
    last_use = {}
    for index, op in enumerate(net_def.op):
        for blob in list(op.input) + list(op.output):
            last_use[blob] = index
    keep = set(net_def.external_output) | parameters
    live, peak = {}, 0
    for index, op in enumerate(net_def.op):
        for blob in list(op.input) + list(op.output):
            if blob not in parameters and blob in shapes:
                live[blob] = shapes[blob].nbytes
        peak = max(peak, sum(live.values()))
        for blob in list(live):
            if last_use.get(blob, -1) <= index and blob not in keep:
                del live[blob]
    return {"parameter_bytes": int(param_bytes), "activation_bytes": int(act_bytes),
            "total_bytes": int(param_bytes + act_bytes), "peak_live_activation_bytes": int(peak)}


__all__ = ["BoundNet", "DimType", "bound_violation", "check_fed_blobs", "create_bound_net",
           "memory_summary", "out_of_bound_blobs"]
