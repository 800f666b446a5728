"""docs/training.md lists every operator that has a gradient (issue 16: the docs list
every gradient op): a gradient registered without a row there fails this test."""
import re
from pathlib import Path

import pytest

from caffe2py import gradients   # importing caffe2py registers every op and its gradient

DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def test_every_forward_op_with_a_gradient_has_a_row_in_the_gradient_table():
    if not DOC.exists():
        pytest.skip("docs/training.md is not in this tree")
    text = DOC.read_text()
    section = text[text.index("### Gradient operators"):text.index("## Optimizers")]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| ")]
    listed = set(re.findall(r"[A-Za-z0-9_]+", " ".join(rows)))
    with_gradient = gradients.registered_gradient_types()
    assert len(with_gradient) > 100
    assert sorted(t for t in with_gradient if t not in listed) == []
