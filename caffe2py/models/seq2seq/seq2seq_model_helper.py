"""caffe2.python.models.seq2seq.seq2seq_model_helper: Seq2SeqModelHelper, a ModelHelper
whose parameters are added one by one (AddParam) and may be non-trainable (kept
apart from `params`, so no gradient or optimizer touches them)."""
from ... import scope
from ...model_helper import ModelHelper


class Seq2SeqModelHelper(ModelHelper):
    """ModelHelper with Caffe2's seq2seq arg scope (NHWC; use_cudnn and
    cudnn_exhaustive_search from the keywords, ws_nbytes_limit when given)."""

    def __init__(self, init_params=True, **kwargs):
        arg_scope = {
            "use_cudnn": kwargs.pop("use_cudnn", True),
            "cudnn_exhaustive_search": kwargs.pop("cudnn_exhaustive_search", False),
            "order": "NHWC",
        }
        if kwargs.get("ws_nbytes_limit"):
            arg_scope["ws_nbytes_limit"] = kwargs.pop("ws_nbytes_limit")
        super().__init__(init_params=init_params, arg_scope=arg_scope, **kwargs)
        self.non_trainable_params = []

    def AddParam(self, name, init=None, init_value=None, trainable=True):
        """A parameter named `name` (in the current name scope): filled by
        init = (op type, kwargs), or by a constant init_value (int, float or str) of
        shape [1]; an external input of the net when init_params is False."""
        if init_value is not None:
            if init is not None:
                raise ValueError("AddParam: give init or init_value, not both")
            if type(init_value) not in (int, float, str):
                raise TypeError("AddParam: init_value must be an int, float or str, got %s"
                                % type(init_value).__name__)
            init = ("ConstantFill", dict(shape=[1], value=init_value))
        if self.init_params:
            if init is None:
                raise ValueError("AddParam: parameter '%s' needs init or init_value" % name)
            param = self.param_init_net.__getattr__(init[0])([], name, **init[1])
        else:
            param = self.net.AddExternalInput(name)
        (self.params if trainable else self.non_trainable_params).append(param)
        return param

    def GetNonTrainableParams(self, namescope=None):
        """The non-trainable parameters of `namescope` (the current one by default;
        all of them at the top scope)."""
        if namescope is None:
            namescope = scope.CurrentNameScope()
        elif not namescope.endswith(scope._NAMESCOPE_SEPARATOR):
            namescope += scope._NAMESCOPE_SEPARATOR
        if namescope == "":
            return self.non_trainable_params[:]
        return [p for p in self.non_trainable_params if p.GetNameScope() == namescope]

    def GetAllParams(self, namescope=None):
        return self.GetParams(namescope) + self.GetComputedParams(namescope) + self.GetNonTrainableParams(namescope)
