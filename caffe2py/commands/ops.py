"""`caffe2py ops`: the op x device x engine coverage table, read from the registry."""
from caffe2py import registry

NAME = "ops"
HELP = "print which op types have kernels on which devices and engines"


def add_arguments(parser):
    parser.add_argument("--domain", default=None, help="only this domain (caffe2 or ai.onnx)")
    parser.add_argument("--filter", default=None, help="only op types containing this text")
    parser.add_argument("--schema", default=None, metavar="OP", help="print one op's schema and docs")
    parser.add_argument("--where", default=None, metavar="OP",
                        help="where OP lives: file and line of its schema, kernels per device and engine "
                             "(and the compiled or CUDA kernels they call), gradient maker, ONNX translator, "
                             "and the tests that name it")
    parser.add_argument("--catalogue", action="store_true",
                        help="coverage of Caffe2's operator catalogue: how many of its forward ops are "
                             "registered, and which are not (with the reason when left out on purpose)")


def print_catalogue(name_filter=None):
    from caffe2py.catalogue import coverage
    cov = coverage()
    keep = (lambda n: name_filter.lower() in n.lower()) if name_filter else (lambda n: True)
    print("Caffe2 operator catalogue: %d forward ops; %d registered (%.0f%%), %d left out on purpose, "
          "%d not yet provided" % (cov.total, len(cov.registered), 100.0 * len(cov.registered) / cov.total,
                                   len(cov.left_out), len(cov.missing)))
    if cov.left_out:
        print("\nleft out on purpose:")
        for name, reason in sorted(cov.left_out.items()):
            if keep(name):
                print("  %-40s %s" % (name, reason))
    if cov.missing:
        print("\nnot yet provided:")
        for name in cov.missing:
            if keep(name):
                print("  " + name)
    return 0


def _arity_text(arity):
    """A schema's input / output count for people: 2, 1..3, 1 or more, 1 or 4, or a rule."""
    if arity is None:
        return "any"
    if isinstance(arity, int):
        return str(arity)
    if isinstance(arity, tuple):
        low, high = arity
        return "%d or more" % low if high is None else "%d..%d" % (low, high)
    if isinstance(arity, (set, frozenset)):
        return " or ".join(str(n) for n in sorted(arity))
    return "checked by the op's own rule"           # a predicate, e.g. an even count


def print_schema(name, domain):
    from caffe2py.errors import Caffe2Error
    schema = registry.schema_for(name, domain or "")
    if schema is None:
        hints = registry.close_matches(name, domain or "")
        raise Caffe2Error("no schema for op '%s'%s" % (name, "; did you mean %s?" % " or ".join(hints) if hints else ""))
    print("%s (domain %s, since version %d)" % (schema.name, schema.domain or "caffe2", schema.since_version))
    print("  inputs: %s   outputs: %s" % (_arity_text(schema.num_inputs), _arity_text(schema.num_outputs)))
    for arg in schema.args:
        print("  arg %-18s %-8s default=%r%s  %s" % (arg.name, arg.type, arg.default,
                                                   " (required)" if arg.required else "", arg.doc))
    print("  shape inference: %s   cost: %s" % ("yes" if schema.inference else "no", "yes" if schema.cost else "no"))
    if schema.doc:
        print("\n" + schema.doc)
    return 0


def print_where(name, domain):
    from caffe2py import op_locations
    from caffe2py.errors import Caffe2Error
    try:
        loc = op_locations.locate(name, domain or "")
    except KeyError:
        hints = registry.close_matches(name, domain or "")
        raise Caffe2Error("no op '%s' is registered%s" % (name, "; did you mean %s?" % " or ".join(hints)
                                                           if hints else "")) from None
    print(op_locations.format_location(loc))
    return 0


def run(args):
    if args.where:
        return print_where(args.where, args.domain)
    if args.schema:
        return print_schema(args.schema, args.domain)
    if args.catalogue:
        return print_catalogue(args.filter)
    rows = registry.kernel_coverage()
    if args.domain:
        rows = [r for r in rows if r[0] == args.domain]
    if args.filter:
        rows = [r for r in rows if args.filter.lower() in r[1].lower()]
    header = ("domain", "op type", "device", "engine", "opset")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    print(fmt % header)
    print(fmt % tuple("-" * w for w in widths))
    for row in rows:
        print(fmt % row)
    devices = sorted({r[2] for r in rows})
    print("\n%d kernels, %d op types, devices: %s" % (len(rows), len({(r[0], r[1]) for r in rows}),
                                                     ", ".join(devices)))
    return 0
