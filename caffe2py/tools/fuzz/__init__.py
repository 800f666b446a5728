"""caffe2py's fuzzing harness: hostile NetDefs, ONNX models, files and API calls,
each case run in a pool of worker processes so that a crash or hang is caught and
reported with its reproducer.

    python -m caffe2py.tools.fuzz --budget 2000 --seed 1 --jobs 2 --out findings/
    python -m caffe2py.tools.fuzz --replay op:1:123      # one case, in the foreground

Families (execute.FAMILIES): `op` (NetDefs over every registered Caffe2 op's schema),
`onnx` (one-node models over onnx's schemas of every ONNX op caffe2py registers,
onnxruntime as reference), `mutate` (byte-level mutation of real Caffe2 and ONNX
model files), `netdef` (structural mutation of real NetDefs), `external` (ONNX
external data that points outside the model's folder), `api` (workspace functions
with hostile arguments). Outcome classes: outcomes.py. See docs/reliability.md.
"""
from .campaign import case_ids, replay, run_campaign  # noqa: F401
from .outcomes import CLASSES, FINDINGS, GOOD  # noqa: F401
