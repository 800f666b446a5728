"""The `caffe2py` command line: subcommands live in caffe2py.commands."""
import argparse
import sys

from .commands import discover
from .errors import Caffe2Error


def _common_options():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no notes on stderr (such as the one-time kernel compile notice)")
    common.add_argument("--data-root", action="append", default=argparse.SUPPRESS, metavar="DIR",
                        help="a folder the model's ops may read and write (repeatable); without it a model "
                             "file may only read files in its own folder (docs/security.md)")
    common.add_argument("--trust-model", action="store_true", default=argparse.SUPPRESS,
                        help="trust the model files as code: Python ops may unpickle their builders and ops "
                             "may touch any file and the network, as in Caffe2 (also CAFFE2PY_TRUST_MODEL=1)")
    return common


# the arguments that name model files (their folders may be read by the model's ops)
MODEL_FILE_ARGS = ("model", "predict_net", "init_net")


def trust_policy(args):
    """The model-trust policy of a command: every net it reads from a file follows it."""
    from .model_trust import policy_for
    files = [getattr(args, name, None) for name in MODEL_FILE_ARGS]
    return policy_for([f for f in files if isinstance(f, str)], getattr(args, "data_root", ()),
                      getattr(args, "trust_model", False))


def build_parser():
    common = _common_options()
    parser = argparse.ArgumentParser(prog="caffe2py", description="Run and inspect Caffe2-style nets.",
                                     parents=[common])
    sub = parser.add_subparsers(dest="command")
    handlers = {}
    for module in discover():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP, parents=[common])
        module.add_arguments(p)
        handlers[module.NAME] = module.run
    return parser, handlers


def main(argv=None):
    import caffe2py  # noqa: F401  (registers ops)
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:     # no subcommand: the main job on its built-in default
        args = parser.parse_args(argv + ["run"])
    if getattr(args, "quiet", False):
        import os
        os.environ["CAFFE2PY_QUIET"] = "1"      # read by the kernel runtime's notices
    from .model_trust import applying
    try:
        with applying(trust_policy(args)):
            return handlers[args.command](args)
    except Caffe2Error as exc:
        sys.stderr.write("caffe2py %s: error: %s\n" % (args.command, exc))
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: the command's worker processes were stopped on the way out
        sys.stderr.write("caffe2py %s: interrupted\n" % args.command)
        return 130
    except BrokenPipeError:
        # the reader went away (`caffe2py ops | head`): stop quietly, as Unix tools do
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
