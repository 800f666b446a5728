"""caffe2py.modeling.initializers.update_initializer: Caffe2 reads only the first two
items of an (op name, kwargs, ...) initializer tuple."""
import numpy as np

from caffe2py import brew, workspace
from caffe2py.model_helper import ModelHelper
from caffe2py.modeling import initializers


def test_extra_items_of_an_initializer_tuple_are_ignored():
    init = initializers.update_initializer(None, ("UniformFill", {"min": 5.0}, {"max": 1.0}), ("XavierFill", {}))
    assert init.operator_name == "UniformFill" and init.operator_kwargs == {"min": 5.0}
    default = initializers.update_initializer(None, None, ("ConstantFill", {"value": 2.0}))
    assert default.operator_name == "ConstantFill" and default.operator_kwargs == {"value": 2.0}


def test_brew_fc_accepts_caffe2s_triple():
    workspace.ResetWorkspace()
    model = ModelHelper(name="triple")
    brew.fc(model, "x", "y", 4, 3, ("ConstantFill", {"value": 0.5}, {"ignored": 1}),
            ("ConstantFill", {"value": -1.0}, {}))
    workspace.RunNetOnce(model.param_init_net)
    np.testing.assert_array_equal(workspace.FetchBlob("y_w"), np.full((3, 4), 0.5, np.float32))
    np.testing.assert_array_equal(workspace.FetchBlob("y_b"), np.full(3, -1.0, np.float32))
