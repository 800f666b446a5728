"""Caffe2's HIP test helper (caffe2.python.hip_test_util). caffe2py has no ROCm
device, so a test's devices are never HIP unless the test names HIP itself."""
from .proto import caffe2_pb2


def run_in_hip(gc, dc):
    """Whether the gradient-check device or any device-check device is HIP."""
    return gc.device_type == caffe2_pb2.HIP or caffe2_pb2.HIP in {d.device_type for d in dc}
