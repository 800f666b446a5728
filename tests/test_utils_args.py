"""caffe2py.utils.ArgsToDict and BuildUniqueMutexIter's CPU pinning (Caffe2's utils)."""
import numpy as np

from caffe2py import core, utils
from caffe2py.proto import caffe2_pb2


def test_args_to_dict_reads_the_field_each_argument_sets():
    args = [utils.MakeArgument("i", 3), utils.MakeArgument("f", 2.5), utils.MakeArgument("s", "text"),
            utils.MakeArgument("ints", np.array([1, 2])), utils.MakeArgument("strings", ["a", "b"])]
    unnamed = caffe2_pb2.Argument(i=7)
    empty = caffe2_pb2.Argument(name="nothing")
    got = utils.ArgsToDict(args + [unnamed, empty])
    assert got["i"] == 3 and got["f"] == 2.5 and got["s"] == b"text"
    assert list(got["ints"]) == [1, 2] and list(got["strings"]) == [b"a", b"b"]
    assert got["nothing"] is None and len(got) == 6


def test_the_iteration_counter_is_pinned_to_the_cpu_inside_a_gpu_scope():
    init, net = core.Net("mutex_init"), core.Net("mutex_net")
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CUDA, 0)):
        utils.BuildUniqueMutexIter(init, net)
    for op in list(init.Proto().op) + list(net.Proto().op):
        assert op.device_option.device_type == caffe2_pb2.CPU
        assert list(op.device_option.extra_info) == ["device_type_override:cpu"]
