"""Legacy `caffe2.python` imports resolve to caffe2py; legacy scripts run unmodified."""
import os
import subprocess
import sys
import textwrap


def test_legacy_imports_resolve():
    code = textwrap.dedent("""
        import caffe2py.compat
        from caffe2.python import core, workspace, model_helper, brew, scope, utils, dyndep
        from caffe2.proto import caffe2_pb2
        import caffe2py
        assert core is caffe2py.core and workspace is caffe2py.workspace
        assert caffe2_pb2.CPU == 0
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_python_m_compat_runs_legacy_script(tmp_path):
    script = tmp_path / "legacy.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        from caffe2.python import core, workspace
        from caffe2.proto import caffe2_pb2
        net = core.Net("legacy")
        net.Relu("x", "y")
        workspace.FeedBlob("x", np.array([-1.0, float(sys.argv[1])], dtype=np.float32))
        workspace.RunNetOnce(net)
        print(workspace.FetchBlob("y").tolist())
    """))
    out = subprocess.run([sys.executable, "-m", "caffe2py.compat", str(script), "4"],
                         capture_output=True, text=True, cwd=os.path.dirname(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 4.0]"


def test_any_caffe2py_module_resolves_under_caffe2_python():
    """`caffe2.python.X.Y` is caffe2py's X.Y itself (shared state), its own spec kept;
    a module caffe2py lacks is a plain ImportError."""
    code = textwrap.dedent("""
        import caffe2py.compat
        import caffe2.python.onnx.backend as backend
        from caffe2.python.onnx import backend as backend2
        from caffe2.python import model_helper
        import caffe2py.onnx.backend, caffe2py.model_helper
        assert backend is caffe2py.onnx.backend and backend2 is backend
        assert model_helper.__spec__.name == "caffe2py.model_helper"
        try:
            from caffe2.python import no_such_module
        except ImportError:
            print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
