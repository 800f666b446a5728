"""Caffe2's caffe2.python.functional: call an operator on arrays.

    y = Functional.Relu(x)[0]
    out, split_info = Functional.Concat(a, b, axis=1)
    parts = Functional.Split(x, split=[2, 3], axis=0, num_output=2)

Functional.<Op>(*arrays, **arguments) runs the op once, in a workspace of its own,
on inputs named input_0, input_1, ... and returns its outputs as a named tuple
(fields output_0, output_1, ...; index it by position or by name). The number
of outputs comes from the op's schema, or from `num_output` for ops whose
output count depends on their arguments (Split); outputs the schema makes
in-place take their input's name. `device_option` places the inputs and the op.
"""
from collections import namedtuple

from . import core, registry, workspace
from .proto import caffe2_pb2


def namedtupledict(typename, field_names, *args, **kwargs):
    """A namedtuple class whose items can also be read by field name (t["output_0"])."""
    index_of = {name: i for i, name in enumerate(field_names)}
    kwargs.setdefault("rename", True)       # output names need not be identifiers
    data = namedtuple(typename, field_names, *args, **kwargs)

    def getitem(self, key):
        if isinstance(key, str):
            key = index_of[key]
        return tuple.__getitem__(self, key)

    data.__getitem__ = getitem
    return data


def _bounds(spec):
    """(min, max) of an arity spec; max None when unbounded or not known."""
    if isinstance(spec, int):
        return spec, spec
    if isinstance(spec, tuple):
        return spec
    if isinstance(spec, (set, frozenset)) and spec:
        return min(spec), max(spec)
    return 0, None


def _arity_ok(spec, n):
    lo, hi = _bounds(spec)
    if isinstance(spec, (set, frozenset)):
        return n in spec
    if callable(spec):
        return bool(spec(n))
    return n >= lo and (hi is None or n <= hi)


def _output_count(schema, num_output):
    if num_output is not None:
        if not _arity_ok(schema.num_outputs, num_output):
            raise ValueError("Functional: %s cannot have %d outputs" % (schema.name, num_output))
        return num_output
    lo, hi = _bounds(schema.num_outputs)
    if hi is None:
        raise ValueError("For operators with max_output == inf, user should pass num_output explicity.")
    return hi          # the most the op can have (Concat: the output and its split info)


def _enforced_inplace(schema, i, o):
    pairs = schema.enforce_inplace
    if pairs is True:
        return i == o
    return (i, o) in pairs


class _Functional:
    def __getattribute__(self, op_type):
        schema = registry.schema_for(op_type)
        if schema is None:
            raise AttributeError("Functional: no operator named '%s'" % op_type)

        def op_func(*inputs, **args):
            if not _arity_ok(schema.num_inputs, len(inputs)):
                raise ValueError("Functional.%s: %d inputs is not a number of inputs the op takes"
                                 % (op_type, len(inputs)))
            input_names = ["input_%d" % i for i in range(len(inputs))]
            count = _output_count(schema, args.pop("num_output", None))
            output_names = ["output_%d" % i for i in range(count)]
            for i in range(len(input_names)):
                for o in range(len(output_names)):
                    if _enforced_inplace(schema, i, o):
                        output_names[o] = input_names[i]
            device_option = args.pop("device_option", None) or core.DeviceOption(caffe2_pb2.CPU)
            op = core.CreateOperator(op_type, input_names, output_names, device_option=device_option, **args)
            ws = workspace.Workspace("functional")
            for name, value in zip(input_names, inputs):
                ws.feed_blob(name, value, device_option)
            ws.run_operator_once(op)
            return namedtupledict("output", output_names)(*[ws.fetch_blob(name) for name in output_names])

        return op_func


Functional = _Functional()
