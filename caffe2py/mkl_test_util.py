"""Caffe2's MKL test helpers (caffe2.python.mkl_test_util) as a build without
MKL-DNN has them: `mkl_do` names the MKLDNN device, which never joins the device
lists (workspace.C.has_mkldnn is False), so `gcs` draws from hu's devices alone."""
import hypothesis.strategies as st

from . import hypothesis_test_util as hu
from . import workspace
from .proto import caffe2_pb2

cpu_do = hu.cpu_do
gpu_do = hu.gpu_do
mkl_do = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.MKLDNN)
device_options = hu.device_options + ([mkl_do] if workspace.C.has_mkldnn else [])


def device_checker_device_options():
    return st.just(device_options)


def gradient_checker_device_option():
    return st.sampled_from(device_options)


gcs = dict(gc=gradient_checker_device_option(), dc=device_checker_device_options())
gcs_cpu_only = dict(gc=st.sampled_from([cpu_do]), dc=st.just([cpu_do]))
gcs_gpu_only = dict(gc=st.sampled_from([gpu_do]), dc=st.just([gpu_do]))
gcs_mkl_only = dict(gc=st.sampled_from([mkl_do]), dc=st.just([mkl_do]))
