"""team() (kernels/cpu/runtime/jit.py) sets numba's thread count only once numba is
loaded: a net of NumPy kernels does not import numba (0.3-0.5 s on the first run, which
put the first example of Caffe2's erf and boolean_mask tests past their 1 s deadline),
and the first kernel given machine code inside team() still runs on the team's size."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from caffe2py import core, workspace
    from caffe2py.kernels.cpu.runtime import jit

    x = np.float32([0.1, -0.4, 0.7])
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("m", np.array([True, False, True]))
    workspace.RunOperatorOnce(core.CreateOperator("Erf", ["x"], ["y"]))
    workspace.RunOperatorOnce(core.CreateOperator("BooleanMask", ["x", "m"], ["z"]))
    assert workspace.FetchBlob("z").tolist() == x[[0, 2]].tolist()
    print("numba after NumPy kernels:", "numba" in sys.modules)

    from caffe2py.kernels.cpu.cnn import pool
    with jit.team():
        pool.max_pool(np.ones((1, 2, 9, 9), np.float32), (3, 3), (1, 1), (0, 0, 0, 0))
        import numba
        print("threads:", numba.get_num_threads(), "team:", jit.team_size())
""")


def test_numpy_nets_leave_numba_unloaded_and_compiled_kernels_get_the_team_size():
    env = dict(os.environ, CAFFE2PY_JIT="inline", CAFFE2PY_NUM_THREADS="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "numba after NumPy kernels: False" in out.stdout
    assert "threads: 1 team: 1" in out.stdout
