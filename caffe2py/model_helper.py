"""caffe2.python.model_helper.ModelHelper: a net plus its parameter-init net."""
import logging

from . import core, scope
from .errors import Caffe2Error

log = logging.getLogger("caffe2py")


class ModelHelper:
    def __init__(self, name=None, init_params=True, allow_not_known_ops=True,  # noqa: ARG002
                 skip_sparse_optim=False, param_model=None, arg_scope=None):  # noqa: ARG002
        self.name = name or "model"
        self.net = core.Net(self.name)
        self.init_params = init_params
        if param_model is not None:
            # A step model (rnn_cell) creates its parameters in the outer model.
            self.param_init_net = param_model.param_init_net
            self.params = param_model.params
            self.param_to_grad = param_model.param_to_grad
        else:
            self.param_init_net = core.Net(self.name + "_init")
            self.params = []
            self.param_to_grad = {}
        self.gradient_ops_added = False
        self._arg_scope = {"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": False}
        if arg_scope is not None:
            self._arg_scope.update(arg_scope)

    @property
    def arg_scope(self):
        return self._arg_scope

    def create_param(self, param_name, shape, initializer, tags=None):  # noqa: ARG002
        """initializer: (op type, kwargs) as Caffe2's Initializer gives, or an op type."""
        name = scope.CurrentNameScope() + str(param_name)
        if isinstance(initializer, str):
            op_type, kwargs = initializer, {}
        else:
            op_type, kwargs = initializer[0], dict(initializer[1] if len(initializer) > 1 else {})
        # a BlobReference: the name is already scoped, the fill op must not scope it again
        ref = getattr(self.param_init_net, op_type)([], core.BlobReference(name), shape=list(shape), **kwargs)
        self.AddParameter(ref)
        return ref

    def AddParameter(self, param, tags=None):  # noqa: ARG002
        if not isinstance(param, core.BlobReference):
            param = core.BlobReference(str(param), self.net)
        if param in self.params:
            raise Caffe2Error("parameter '%s' is already registered" % param)
        self.params.append(param)

    def GetParams(self, namescope=None, top_scope=False):  # noqa: ARG002
        if namescope is None:
            namescope = scope.CurrentNameScope()
        return [p for p in self.params if str(p).startswith(namescope)]

    def GetAllParams(self, namescope=None):
        return self.GetParams(namescope)

    def AddGradientOperators(self, *args, **kwargs):
        """net.AddGradientOperators, recording grad_map and param_to_grad. Losses
        given as a list must be scalars (checked when the net runs)."""
        from .gradients import add_gradient_operators
        if self.gradient_ops_added:
            raise Caffe2Error("model '%s': AddGradientOperators was already called" % self.name)
        self.gradient_ops_added = True
        self.grad_map = add_gradient_operators(self.net, *args, scalar_losses=True, **kwargs)
        self.param_to_grad = {p: self.grad_map[p] for p in self.params if p in self.grad_map}
        return self.grad_map

    def Proto(self):
        return self.net.Proto()

    def InitProto(self):
        return self.param_init_net.Proto()

    def RunAllOnGPU(self, *args, **kwargs):
        self.param_init_net.RunAllOnGPU(*args, **kwargs)
        self.net.RunAllOnGPU(*args, **kwargs)

    def __getattr__(self, op_type):
        if op_type.startswith("__") or op_type in ("net", "param_init_net"):
            raise AttributeError(op_type)
        if not core.IsOperator(op_type):
            raise AttributeError("Method %s is not a registered operator." % op_type)
        return getattr(self.net, op_type)
