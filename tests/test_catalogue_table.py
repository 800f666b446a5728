"""docs/operators.md's catalogue coverage table is the registry's, never stale."""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "catalogue_table.py")


def _tool():
    spec = importlib.util.spec_from_file_location("catalogue_table", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_table_matches_the_registry():
    out = subprocess.run([sys.executable, TOOL, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_table_follows_the_registry():
    from caffe2py import registry
    from caffe2py.catalogue import catalogue_ops
    tool = _tool()
    lines = tool.table_lines()
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and " | " in line}
    assert set(catalogue_ops()) <= set(rows)
    assert rows["Add"].startswith("| Add | yes | CPU")
    # every catalogue op is registered or left out now: take a left-out one, and see its
    # row without the reason (not yet) and with a reason holding a pipe
    missing = next(n for n in catalogue_ops() if not registry.has_op(n))
    reason = registry._left_out.pop(missing, None)
    try:
        rows = {line.split(" | ")[0][2:]: line for line in tool.table_lines() if line.startswith("| ")}
        assert rows[missing] == "| %s | not yet |  |  |  |  |" % missing
        registry.leave_out(missing, "a reason with | a pipe")
        left = {line.split(" | ")[0][2:]: line for line in tool.table_lines() if line.startswith("| ")}
        assert left[missing] == "| %s | left out |  |  |  | a reason with / a pipe |" % missing
    finally:
        registry._left_out.pop(missing, None)
        if reason is not None:
            registry._left_out[missing] = reason
    text = "intro\n%s\nold rows\n%s\nafter\n" % (tool.BEGIN, tool.END)
    rendered = tool.render(text)
    assert rendered.startswith("intro\n" + tool.BEGIN + "\n") and rendered.endswith(tool.END + "\nafter\n")
    assert "old rows" not in rendered and "| Add | yes |" in rendered


# issue 17 part A: the first half of ../shared/reference/caffe2_ops/tensor.txt
ISSUE_17A_OPS = """Accumulate And Cast Ceil Cos Elu EQ Floor GE GT LE LT LeakyRelu Logit Max Min Mod Not Or Pow
PRelu ReplaceNaN Scale Selu Sign Sin Softplus Softsign Sqr Swish ThresholdedRelu Where Xor StumpFunc
ElementwiseLinear SquareRootDivide ExpandDims FlattenToVec Squeeze MergeDim PrependDim ResizeLike Size
HasElements IsEmpty IsMemberOf Range Slice ScatterAssign UnsafeCoalesce CopyOnDeviceLike DiagonalFill""".split()


def test_issue_17a_ops_are_registered_with_schema_and_cpu_kernel():
    from caffe2py import registry
    from caffe2py.catalogue import catalogue_ops
    assert len(ISSUE_17A_OPS) == 52 and set(ISSUE_17A_OPS) <= set(catalogue_ops())
    cpu = {row[1] for row in registry.kernel_coverage() if row[0] == "caffe2" and row[2] == "CPU"}
    for name in ISSUE_17A_OPS:
        schema = registry.schema_for(name)
        assert schema is not None and schema.inference is not None, name
        assert name in cpu, name
