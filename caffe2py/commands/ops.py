"""`caffe2py ops`: the op x device x engine coverage table, read from the registry."""
from caffe2py import registry

NAME = "ops"
HELP = "print which op types have kernels on which devices and engines"


def add_arguments(parser):
    parser.add_argument("--domain", default=None, help="only this domain (caffe2 or ai.onnx)")
    parser.add_argument("--filter", default=None, help="only op types containing this text")


def run(args):
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
