"""Subcommands of the `caffe2py` command line. Each module defines
NAME, HELP, add_arguments(parser) and run(args) -> exit code; discovered here."""
import importlib
import pkgutil


def discover():
    commands = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            commands.append(importlib.import_module(__name__ + "." + info.name))
    return commands
