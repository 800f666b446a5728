"""Caffe2 op -> ONNX translators, registered per (domain, op type).

A translator is a function `translate(ex)` that receives an ExportOp
(caffe2py/onnx/export_op.py: the op with its arguments, the ONNX names of its
inputs and outputs, their inferred shapes) and emits ONNX nodes through it.
Translators live beside their op's schema (operators/<family>_export.py), as
gradient makers do; this module imports nothing from onnx, so registering one
costs nothing when caffe2py is imported.

`onnx_form` says in a few words what the op becomes (docs/onnx.md lists it);
`min_opset` is the lowest ai.onnx opset the translator can write.
"""
from dataclasses import dataclass
from typing import Callable

from caffe2py.registry import normalize_domain


@dataclass(frozen=True)
class Translator:
    op_type: str
    domain: str
    translate: Callable
    onnx_form: str = ""
    min_opset: int = 13


_translators = {}        # (domain, op type) -> Translator
_domain_translators = {}  # domain -> Translator for every op of that domain


def register_exporter(*op_types, domain="", onnx_form="", min_opset=13):
    """Decorator: `translate(ex)` exports each of op_types (Caffe2's domain by default)."""
    domain = normalize_domain(domain)

    def wrap(translate):
        for op_type in op_types:
            _translators[(domain, op_type)] = Translator(op_type, domain, translate, onnx_form, min_opset)
        return translate
    return wrap


def register_domain_exporter(domain, onnx_form="", min_opset=1):
    """Decorator: `translate(ex)` exports every op of `domain` that has no translator
    of its own (the ai.onnx ops the ONNX importer makes are ONNX already)."""
    domain = normalize_domain(domain)

    def wrap(translate):
        _domain_translators[domain] = Translator("*", domain, translate, onnx_form, min_opset)
        return translate
    return wrap


def translator_for(op_type, domain=""):
    """The Translator of an op type, or None."""
    domain = normalize_domain(domain)
    found = _translators.get((domain, op_type))
    return found if found is not None else _domain_translators.get(domain)


def exported_op_types(domain=""):
    """Op types of `domain` that have a translator of their own, sorted."""
    domain = normalize_domain(domain)
    return sorted(t for (d, t) in _translators if d == domain)


def translators(domain=""):
    """Translator records of `domain`, sorted by op type (for docs and `--list`)."""
    domain = normalize_domain(domain)
    return [_translators[(domain, t)] for t in exported_op_types(domain)]


def exported_domains():
    """Domains whose every op is exported (ai.onnx)."""
    return sorted(_domain_translators)
