"""Every Python package in the tree is listed in setup.cfg, so a regular (non-editable)
install ships it."""
import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAPPING = {"caffe2py": "caffe2py", "operators": "caffe2py.operators", "kernels": "caffe2py.kernels"}


def test_all_packages_are_listed():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    found = set()
    for top, dotted in MAPPING.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            if "__init__.py" in filenames:
                rel = os.path.relpath(dirpath, os.path.join(ROOT, top))
                found.add(dotted if rel == "." else dotted + "." + rel.replace(os.sep, "."))
    assert found - listed == set(), "add these to setup.cfg [options] packages"
