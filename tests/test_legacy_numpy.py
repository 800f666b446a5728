"""`python -m caffe2py.compat --legacy-numpy script.py`: the NumPy names Caffe2-era
scripts use and NumPy removed are back for that run only, with one line on stderr."""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np
    from caffe2.python import workspace
    x = np.zeros(3, dtype=np.float)
    workspace.FeedBlob("x", x.astype(np.float32))
    print(np.asscalar(np.array([7])), np.int(3.7), np.bool(1), x.dtype, np.float_ is np.float64)
""")


def _run(tmp_path, *args):
    script = tmp_path / "legacy.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "caffe2py.compat", *args, str(script)], capture_output=True,
                          text=True, cwd=tmp_path)


def test_a_legacy_script_runs_with_the_flag(tmp_path):
    proc = _run(tmp_path, "--legacy-numpy")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["7", "3", "True", "float64", "True"]
    said = [line for line in proc.stderr.splitlines() if "--legacy-numpy" in line]
    assert len(said) == 1 and "np.int" in said[0]


def test_without_the_flag_numpy_says_why(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode != 0
    # NumPy's own message, not one of ours
    assert "AttributeError: module 'numpy' has no attribute 'float'" in proc.stderr
    assert "--legacy-numpy" not in proc.stderr


def test_never_on_by_importing_caffe2py():
    code = ("import numpy as np, caffe2py, caffe2py.compat\n"
            "print(any(n in np.__dict__ for n in ('int', 'float', 'asscalar', 'object')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_a_module_runs_through_the_alias(tmp_path):
    """`python -m caffe2py.compat -m MODULE`: the module sees the caffe2 alias."""
    (tmp_path / "probe_mod.py").write_text("from caffe2.python import core\nimport sys\n"
                                           "print(core.__name__, sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-m", "caffe2py.compat", "-m", "probe_mod", "a", "b"],
                          capture_output=True, text=True, cwd=tmp_path, check=True)
    assert proc.stdout.split() == ["caffe2py.core", "['a',", "'b']"]


def test_usage_without_a_script():
    proc = subprocess.run([sys.executable, "-m", "caffe2py.compat", "--legacy-numpy"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("usage:")


def test_np_sum_of_a_generator_sums_as_numpy_1_did(tmp_path):
    """NumPy 2 refuses np.sum(generator); Caffe2-era references call it (cross_entropy_ops_test)."""
    script = tmp_path / "gen_sum.py"
    script.write_text("import numpy as np\n"
                      "rows = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]\n"
                      "print(np.sum(r * 2 for r in rows).tolist(), np.sum(x for x in range(5)),"
                      " np.sum(np.arange(4)))\n")
    run = lambda *flags: subprocess.run([sys.executable, "-m", "caffe2py.compat", *flags, str(script)],
                                        capture_output=True, text=True)
    proc = run("--legacy-numpy")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[8.0,", "12.0]", "10", "6"]
    assert run().returncode != 0        # NumPy's own TypeError without the flag


def test_scipy_misc_functions_moved_to_scipy_special_are_put_back(tmp_path):
    """Caffe2-era tests do `from scipy.misc import logsumexp` (moved to scipy.special in
    SciPy 1.3). A stand-in scipy package (the real one need not be installed) shows the
    name is taken from scipy.special under the flag, and refused without it."""
    pkg = tmp_path / "scipy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "misc.py").write_text("")
    (pkg / "special.py").write_text("import math\n"
                                    "def logsumexp(a):\n    return math.log(sum(math.exp(x) for x in a))\n")
    script = tmp_path / "uses_misc.py"
    script.write_text("from scipy.misc import logsumexp\nprint(round(logsumexp([0.0, 0.0]), 6))\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = lambda *flags: subprocess.run([sys.executable, "-m", "caffe2py.compat", *flags, str(script)],
                                        capture_output=True, text=True, env=env, cwd=tmp_path)
    proc = run("--legacy-numpy")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(round(math.log(2), 6))
    proc = run()
    assert proc.returncode != 0 and "cannot import name 'logsumexp'" in proc.stderr


def test_interp2d_on_a_regular_grid_is_given_back_when_scipy_removed_it(tmp_path):
    """scipy.interpolate.interp2d (removed in SciPy 1.14; Caffe2's heatmap keypoint test
    builds its heatmaps with it): linear interpolation equals bilinear interpolation
    written out here, cubic reproduces the grid, points past the grid take the edge."""
    scipy = pytest.importorskip("scipy")
    script = tmp_path / "uses_interp2d.py"
    script.write_text(textwrap.dedent("""
        import json, numpy as np
        from scipy import interpolate
        x = np.array([0.0, 1.0, 2.0, 4.0]); y = np.array([0.0, 0.5, 1.5, 2.0, 3.0])
        z = np.random.RandomState(3).rand(5, 4)            # z[j, i] at (x[i], y[j])
        lin = interpolate.interp2d(x, y, z, kind="linear")
        cub = interpolate.interp2d(x, y, z, kind="cubic")
        xs, ys = np.array([0.25, 1.5, 3.0]), np.array([0.2, 1.0])
        print(json.dumps({"z": z.tolist(), "lin": lin(xs, ys).tolist(), "grid": cub(x, y).tolist(),
                          "edge": lin([9.0], [-3.0]).tolist()}))
    """))
    proc = subprocess.run([sys.executable, "-m", "caffe2py.compat", "--legacy-numpy", str(script)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json
    out = json.loads(proc.stdout)
    z = np.array(out["z"])
    x, y = np.array([0.0, 1.0, 2.0, 4.0]), np.array([0.0, 0.5, 1.5, 2.0, 3.0])

    def bilinear(px, py):
        i = min(np.searchsorted(x, px, side="right") - 1, len(x) - 2)
        j = min(np.searchsorted(y, py, side="right") - 1, len(y) - 2)
        tx, ty = (px - x[i]) / (x[i + 1] - x[i]), (py - y[j]) / (y[j + 1] - y[j])
        return ((1 - tx) * (1 - ty) * z[j, i] + tx * (1 - ty) * z[j, i + 1]
                + (1 - tx) * ty * z[j + 1, i] + tx * ty * z[j + 1, i + 1])
    expected = [[bilinear(px, py) for px in (0.25, 1.5, 3.0)] for py in (0.2, 1.0)]
    np.testing.assert_allclose(out["lin"], expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["grid"], z, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["edge"], [[z[0, -1]]], rtol=1e-12)
    del scipy
