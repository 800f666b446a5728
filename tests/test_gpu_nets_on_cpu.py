"""`python -m caffe2py.compat --gpu-nets-on-cpu script.py`: Net.RunAllOnGPU keeps the net
on the CPU for that run (resnet50_trainer.py's LoadModel calls it under --use_cpu);
without the flag the CUDA ops meet Caffe2's own missing-device error."""
import subprocess
import sys
import textwrap

import pytest

# a saved-model load as resnet50_trainer.py's LoadModel does it: the nets moved to the
# GPU, then run, then the iteration counter fed back on the CPU
SCRIPT = textwrap.dedent("""
    import numpy as np
    from caffe2.python import core, workspace
    from caffe2.proto import caffe2_pb2
    workspace.FeedBlob("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    workspace.RunOperatorOnce(core.CreateOperator("Save", ["w"], [], db="m.minidb", db_type="minidb",
                                                  absolute_path=True))
    workspace.ResetWorkspace()
    init = core.Net("init")
    init.Load([], ["w"], db="m.minidb", db_type="minidb", absolute_path=True)
    init.ConstantFill([], "optimizer_iteration", shape=[1], value=5, dtype=core.DataType.INT64)
    init.RunAllOnGPU()
    print("devices", sorted({op.device_option.device_type for op in init.Proto().op}))
    assert workspace.RunNetOnce(init)
    print("w", workspace.FetchBlob("w").ravel().tolist())
    print("iter", workspace.FetchBlob("optimizer_iteration").tolist())
""")


def _run(tmp_path, *flags):
    (tmp_path / "load.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "caffe2py.compat", *flags, "load.py"], capture_output=True,
                          text=True, cwd=tmp_path)


@pytest.mark.parametrize("flags", [["--gpu-nets-on-cpu"], ["--legacy-numpy", "--gpu-nets-on-cpu"],
                                   ["--gpu-nets-on-cpu", "--legacy-numpy"]])
def test_the_gpu_nets_run_on_the_cpu_with_the_flag(tmp_path, flags):
    proc = _run(tmp_path, *flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["devices [0]", "w [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]", "iter [5]"]
    said = [line for line in proc.stderr.splitlines() if line.startswith("caffe2py.compat --")]
    assert len(said) == len(flags) and any("--gpu-nets-on-cpu" in line for line in said)


def _gpus_in_a_child():
    """GPUs a plain child process sees (this process may run on the tests' CUDA emulator)."""
    return int(subprocess.run([sys.executable, "-c", "from caffe2py import devices; print(devices.gpu_count())"],
                              capture_output=True, text=True, check=True).stdout)


def test_without_the_flag_the_cuda_ops_have_no_device(tmp_path):
    if _gpus_in_a_child():
        pytest.skip("with a GPU the CUDA ops have somewhere to run")
    proc = _run(tmp_path)
    assert proc.returncode != 0
    assert "cannot create operator of type 'Load' on the device 'CUDA'" in proc.stderr
    assert "--gpu-nets-on-cpu" not in proc.stderr


def test_never_on_by_importing_caffe2py():
    code = ("import caffe2py.compat\nfrom caffe2py import core\nn = core.Net('n')\nn.Relu('x', 'y')\n"
            "n.RunAllOnGPU()\nprint(n.Proto().op[0].device_option.device_type)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "1"


def test_usage_names_the_option():
    proc = subprocess.run([sys.executable, "-m", "caffe2py.compat", "--gpu-nets-on-cpu"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "--gpu-nets-on-cpu" in proc.stderr
