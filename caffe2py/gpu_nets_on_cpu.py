"""`python -m caffe2py.compat --gpu-nets-on-cpu script.py`: the nets a GPU-era script
moves to the GPU with `Net.RunAllOnGPU()` stay on the CPU for that run.

Caffe2's resnet50_trainer.py calls RunAllOnGPU on the nets that load a saved model
(LoadModel, `--load_model_path`) even with `--use_cpu 1`; on a machine without a GPU
(and in Caffe2's CPU-only build) those ops have no device to run on, and on a GPU the
loaded parameters would land where the CPU training net cannot read them. With the
flag, RunAllOnGPU does what RunAllOnCPU does. Never on unless asked: without it a
CUDA op on a machine without CUDA kernels is Caffe2's own error.
"""
import sys

from . import core


def install(stream=None):
    """Make core.Net.RunAllOnGPU place the net on the CPU; says so in one line on stderr."""
    def run_all_on_cpu_instead(self, gpu_id=0, use_cudnn=False):
        self.RunAllOnCPU()

    core.Net.RunAllOnGPU = run_all_on_cpu_instead
    (stream or sys.stderr).write("caffe2py.compat --gpu-nets-on-cpu: Net.RunAllOnGPU places nets on the CPU "
                                 "for this run\n")
