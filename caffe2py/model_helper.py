"""caffe2.python.model_helper.ModelHelper: a net plus its parameter-init net, and the
bookkeeping of the model's parameters (which blobs are trained, their shapes,
initializers, tags and gradients) that brew and the optimizers use."""
import logging

from . import core, scope
from .errors import Caffe2Error
from .modeling import initializers
from .modeling.parameter_info import ParameterInfo, ParameterTags
from .modeling.parameter_sharing import parameter_sharing_context
from .optimizer_context import DEFAULT_OPTIM, OptimizerContext

log = logging.getLogger("caffe2py")


def _is_gradient_slice(grad):
    """A GradientSlice (core's namedtuple of indices and values) or anything shaped so."""
    return hasattr(grad, "indices") and hasattr(grad, "values") and not isinstance(grad, core.BlobReference)


class ParameterShapeError(Caffe2Error, AssertionError):
    """A parameter asked for again with another shape (Caffe2 asserts, so callers
    catch AssertionError)."""


class ModelHelper:
    def __init__(self, name=None, init_params=True, allow_not_known_ops=True,
                 skip_sparse_optim=False, param_model=None, arg_scope=None):
        self.name = name or "model"
        self.net = core.Net(self.name)
        if param_model is not None:          # share another model's parameters
            self.param_init_net = param_model.param_init_net
            self.param_to_grad = param_model.param_to_grad
            self.params = param_model.params
            self._parameters_info = param_model._parameters_info
            self._computed_params = param_model._computed_params
        else:
            self.param_init_net = core.Net(self.name + "_init")
            self.param_to_grad = {}
            self.params = []
            self._parameters_info = {}
            self._computed_params = []
        self.init_params = init_params
        self.allow_not_known_ops = allow_not_known_ops
        self.skip_sparse_optim = skip_sparse_optim
        self.gradient_ops_added = False
        self.weights = []
        self.biases = []
        self._arg_scope = {"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": False}
        if arg_scope is not None:
            self._arg_scope.update(arg_scope)

    @property
    def arg_scope(self):
        return self._arg_scope

    def get_name(self):
        return self.name

    # -- parameters

    @staticmethod
    def _normalize_tags(tags):
        tags = tags or []
        return set(tags) if isinstance(tags, (list, tuple, set)) else {tags}

    @staticmethod
    def _as_initializer(initializer):
        """An Initializer object, or caffe2py's shorthand: an op name or (op name, kwargs)."""
        if hasattr(initializer, "create_param"):
            return initializer
        if isinstance(initializer, str):
            return initializers.Initializer(initializer)
        if isinstance(initializer, (tuple, list)) and initializer and isinstance(initializer[0], str):
            return initializers.Initializer(initializer[0], **dict(initializer[1] if len(initializer) > 1 else {}))
        raise Caffe2Error("create_param: initializer must be an Initializer, an op name or (op name, kwargs), "
                          "got %r" % (initializer,))

    def create_param(self, param_name, shape, initializer, tags=None):
        """Create (or return the existing) parameter `param_name` in the current name
        scope (or the scope ParameterSharing maps it to; a BlobReference is used as given), filled by `initializer` in
        param_init_net, registered with its tags."""
        if isinstance(param_name, core.BlobReference):
            name = str(param_name)
        elif isinstance(param_name, str):
            # the current scope, or the scope it shares parameters with (ParameterSharing)
            name = parameter_sharing_context.get_parameter_name(param_name)
        else:
            raise Caffe2Error("create_param: unsupported type for param_name: %s" % type(param_name).__name__)
        shape = list(shape) if shape is not None else None
        if name in self._parameters_info:
            known = self._parameters_info[name].shape
            if known is not None and shape is not None and list(known) != shape:
                raise ParameterShapeError("parameter '%s' exists with shape %s, asked for %s"
                                          % (name, list(known), shape))
            return self._parameters_info[name].blob
        info = self._as_initializer(initializer).create_param(
            param_name=core.BlobReference(name), init_net=self.param_init_net, shape=shape)
        tags = self._normalize_tags(tags)
        context = OptimizerContext.current()
        for tag in sorted(tags):
            if context.has_optimizer(tag) and info.optimizer is None:
                info.optimizer = context.get_optimizer(tag)
        if info.optimizer is None and context.has_optimizer(DEFAULT_OPTIM):
            info.optimizer = context.get_optimizer(DEFAULT_OPTIM)
        self._parameters_info[name] = info
        self.AddParameter(info.blob, tags)
        return info.blob

    def get_param_info(self, param):
        """The ParameterInfo of a parameter (by blob or name), or None."""
        return self._parameters_info.get(str(param))

    GetParamInfo = get_param_info

    def AddParameter(self, param, tags=None):
        if not isinstance(param, core.BlobReference):
            param = core.BlobReference(str(param), self.net)
        tags = self._normalize_tags(tags)
        if ParameterTags.COMPUTED_PARAM in tags:
            self._computed_params.append(param)
        else:
            self.params.append(param)
        if ParameterTags.WEIGHT in tags:
            self.weights.append(param)
        if ParameterTags.BIAS in tags:
            self.biases.append(param)

    @staticmethod
    def _NormalizeNamescope(namescope):
        if namescope is None:
            return scope.CurrentNameScope()
        if namescope == "" or namescope.endswith(scope._NAMESCOPE_SEPARATOR):
            return namescope
        return namescope + scope._NAMESCOPE_SEPARATOR

    @staticmethod
    def _in_scope(blobs, namescope):
        if namescope == "":
            return list(blobs)
        return [p for p in blobs if p.GetNameScope().startswith(namescope)]

    def GetParams(self, namescope=None, top_scope=False):  # noqa: ARG002 - Caffe2's signature
        """The trained parameters under `namescope` (default: the current one)."""
        return self._in_scope(self.params, self._NormalizeNamescope(namescope))

    def GetComputedParams(self, namescope=None):
        """Parameters the net computes instead of the optimizer (tagged
        COMPUTED_PARAM, e.g. batch-norm running mean and variance)."""
        return self._in_scope(self._computed_params, self._NormalizeNamescope(namescope))

    def GetAllParams(self, namescope=None):
        return self.GetParams(namescope) + self.GetComputedParams(namescope)

    def _Validate(self):
        """Parameter names registered more than once."""
        seen, dupes = set(), []
        for p in map(str, self.params):
            if p in seen and p not in dupes:
                dupes.append(p)
            seen.add(p)
        return sorted(dupes)

    def Validate(self):
        dupes = self._Validate()
        if dupes:
            raise Caffe2Error("Duplicate params: %s" % dupes)

    # -- gradients (AddGradientOperators fills grad_map and param_to_grad)

    def get_param_to_grad(self, params):
        """{param: gradient} for the given params that have one."""
        grad_map = getattr(self, "grad_map", None)
        out = {}
        for p in params:
            if grad_map is not None and str(p) in grad_map:
                out[p] = grad_map[str(p)]
            elif p in self.param_to_grad:
                out[p] = self.param_to_grad[p]
        return out

    def GetOptimizationParamInfo(self, params=None):
        """ParameterInfo (with .grad set) of every parameter that has a gradient in
        param_to_grad (or of `params`); GradientSlice gradients are left out when the
        model was made with skip_sparse_optim."""
        if not self.gradient_ops_added and not self.param_to_grad:
            raise Caffe2Error("GetOptimizationParamInfo needs gradients: call AddGradientOperators "
                              "first (or fill model.param_to_grad)")
        param_to_grad = self.get_param_to_grad(params) if params else self.param_to_grad
        infos = []
        for param, grad in param_to_grad.items():
            if self.skip_sparse_optim and _is_gradient_slice(grad):
                continue
            info = self._parameters_info.get(str(param))
            if info is None:
                blob = param if isinstance(param, core.BlobReference) else core.BlobReference(str(param))
                info = self._parameters_info[str(param)] = ParameterInfo(param_id=None, param=blob)
            info.grad = grad
            infos.append(info)
        return infos

    # -- nets

    def TensorProtosDBInput(self, unused_blob_in, blob_out, batch_size, db, db_type, **kwargs):  # noqa: ARG002
        """The MNIST tutorial's input: brew.db_input (a reader made in param_init_net)."""
        if unused_blob_in:
            raise Caffe2Error("model.TensorProtosDBInput makes its own reader: pass [] as its input, or "
                              "use model.net.TensorProtosDBInput(reader, ...) with a reader of yours")
        from . import brew
        return brew.db_input(self, blob_out, batch_size, db, db_type)

    def CreateDB(self, blob_out, db, db_type, **kwargs):
        """A DBReader blob `blob_out` made by CreateDB in param_init_net (Caffe2's
        ModelHelper.CreateDB; kwargs such as num_shards / shard_id go to the op)."""
        return self.param_init_net.CreateDB([], blob_out, db=db, db_type=db_type, **kwargs)

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

    def GetCompleteNet(self):
        """One net: param_init_net's ops (marked "/param_init_net" in their debug_info)
        then net's, with net's type (ConstructInitTrainNetfromNet splits it again)."""
        complete = self.param_init_net.Clone(self.name + "_complete_net", keep_schema=True)
        for op in complete.Proto().op:
            op.debug_info = op.debug_info + "/param_init_net"
        complete.AppendNet(self.net)
        if self.net.Proto().HasField("type"):
            complete.Proto().type = self.net.Proto().type
        return complete

    def ConstructInitTrainNetfromNet(self, net):
        """param_init_net and net from a GetCompleteNet net (by the debug_info mark)."""
        init_ops = [i for i, op in enumerate(net.Proto().op) if op.debug_info.endswith("/param_init_net")]
        train_ops = [i for i, op in enumerate(net.Proto().op) if not op.debug_info.endswith("/param_init_net")]
        self.param_init_net = net.Clone(net.Name() + "/generated_param_init_net", keep_schema=True,
                                        op_id_mask=init_ops, update_external_list=True)
        self.net = net.Clone(net.Name() + "/generated_net", keep_schema=True, op_id_mask=train_ops,
                             update_external_list=True)

    def __getattr__(self, op_type):
        if op_type.startswith("__") or op_type in ("net", "param_init_net", "_parameters_info",
                                                   "_computed_params", "params", "param_to_grad"):
            raise AttributeError(op_type)
        if not core.IsOperator(op_type):
            raise AttributeError("Method %s is not a registered operator." % op_type)
        return getattr(self.net, op_type)


def ExtractPredictorNet(net_proto, input_blobs, output_blobs, device=None, renames=None, disabled_inputs=None):
    """Caffe2's predictor extraction from a (test-mode) training net: the ops from the
    first that reads an input to the last that writes an output whose inputs are all
    known (the net's external inputs and `input_blobs`, less `disabled_inputs`), so
    reader, loss, gradient and optimizer ops fall away. Ops get `device` when given;
    blob names are renamed by `renames`. Returns (predict net, the external inputs
    other than input_blobs: the parameters to export). An op with is_test=0 (a training
    SpatialBN or Dropout) is an error: extract from the test model."""
    renames = dict(renames or {})
    inputs = {str(b) for b in input_blobs}
    outputs = {str(b) for b in output_blobs}
    original_inputs = set(net_proto.external_input)
    original_outputs = set(net_proto.external_output)
    known = (original_inputs | inputs) - {str(b) for b in (disabled_inputs or ())}
    ops = list(net_proto.op)
    readers = [i for i, op in enumerate(ops) if inputs & set(op.input) and op.type != "StopGradient"]
    writers = [i for i, op in enumerate(ops) if outputs & set(op.output)]
    if not readers:
        raise Caffe2Error("ExtractPredictorNet: no op of net '%s' reads the inputs %s" % (net_proto.name, sorted(inputs)))
    if not writers:
        raise Caffe2Error("ExtractPredictorNet: no op of net '%s' writes the outputs %s" % (net_proto.name, sorted(outputs)))

    def renamed(names):
        return [renames.get(n, n) for n in names]

    predict_net = core.Net(net_proto.name + "_predict")
    proto = predict_net.Proto()
    external_inputs, external_outputs = set(inputs), set(outputs)
    for op in ops[min(readers):max(writers) + 1]:
        if not known.issuperset(op.input):
            continue              # fed by something the predictor does not have (labels, readers)
        op = type(op).FromString(op.SerializeToString())
        if any(a.name == "is_test" and a.i == 0 for a in op.arg):
            raise Caffe2Error("ExtractPredictorNet: op %s '%s' has is_test=0: extract the predictor from a "
                              "test model (is_test=1), not the training net" % (op.type, op.output[0] if op.output else ""))
        for arg in op.arg:
            if op.type == "RecurrentNetwork" and arg.name == "backward_step_net":
                arg.ClearField("n")
            elif op.type == "RecurrentNetwork" and arg.name == "step_net":
                for step_op in arg.n.op:
                    step_op.input[:] = renamed(step_op.input)
                    step_op.output[:] = renamed(step_op.output)
                    if device is not None:
                        step_op.device_option.CopyFrom(device)
                arg.n.external_input[:] = renamed(arg.n.external_input)
                arg.n.external_output[:] = renamed(arg.n.external_output)
                external_inputs |= set(arg.n.external_input) & original_inputs
        if device is not None:
            op.device_option.CopyFrom(device)
        known.update(op.output)
        external_inputs |= set(op.input) & original_inputs
        external_outputs |= set(op.output) & original_outputs
        op.input[:] = renamed(op.input)
        op.output[:] = renamed(op.output)
        proto.op.extend([op])
    proto.external_input.extend(renamed(sorted(external_inputs)))
    proto.external_output.extend(renamed(sorted(external_outputs)))
    return predict_net, sorted(set(proto.external_input) - set(renamed(inputs)))
