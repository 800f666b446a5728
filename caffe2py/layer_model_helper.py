"""caffe2.python.layer_model_helper: LayerModelHelper, a model built from layers.

    model = LayerModelHelper("ranker",
                             input_feature_schema=schema.Struct(("dense", schema.Scalar((np.float32, (8,))))),
                             trainer_extra_schema=schema.Struct(("label", schema.Scalar(np.float32))))
    hidden = model.FC(model.input_feature_schema.dense, 4)
    ...
    model.add_loss(model.BatchLRLoss(record))
    model.output_schema = prediction
    init_net, train_net = layer_model_instantiator.generate_training_nets(model)

`model.<Layer>(...)` creates the registered layer (caffe2py.layers) and adds it;
`model.<Operator>(input_record, num_or_names, **args)` wraps one operator in a
Functional layer. Each layer's parameters are registered with the optimizer and
regularizer they asked for (model.default_optimizer when none); the instantiator
(caffe2py.layer_model_instantiator) turns the layers into train / eval / predict
nets. Global constants (ONE, ZERO, ZERO_RANGE, and any add_global_constant) are
filled by every net create_init_net makes.
"""
import copy
import logging

import numpy as np

from . import core, model_helper, schema, scope
from .errors import Caffe2Error
from .layers import layers
from .modeling.parameter_info import ParameterInfo
from .modeling.parameter_sharing import parameter_sharing_context
from .optimizer import get_param_device
from .regularizer import RegularizationBy, Regularizer

log = logging.getLogger("caffe2py")

_FILL_FOR_DTYPE = {np.dtype(np.int32): "GivenTensorIntFill", np.dtype(np.int64): "GivenTensorInt64Fill",
                   np.dtype(np.bool_): "GivenTensorBoolFill", np.dtype(np.float64): "GivenTensorDoubleFill"}


def _constant_initializer_op(blob_name, array=None, dtype=None, initializer=None):
    """The op filling global constant `blob_name`: from `array` (a GivenTensor*Fill
    of its dtype) or from initializer(blob_name)."""
    if array is None:
        assert initializer is not None, "a global constant needs an array or an initializer"
        return initializer(blob_name)
    assert initializer is None, "give a global constant an array or an initializer, not both"
    array = np.array(array) if dtype is None else np.array(array, dtype=dtype)
    if array.dtype.kind in "SUO":
        op_type, values = "GivenTensorStringFill", [str(v) for v in array.flatten()]
    else:
        # floats of any width are float32 constants, as in Caffe2
        op_type, values = _FILL_FOR_DTYPE.get(array.dtype, "GivenTensorFill"), array.flatten().tolist()
        if op_type == "GivenTensorDoubleFill":
            op_type = "GivenTensorFill"
    return core.CreateOperator(op_type, [], blob_name, shape=list(array.shape), values=values)


class LayerModelHelper(model_helper.ModelHelper):
    """A ModelHelper whose model is a list of layers (see the module docstring).
    input_feature_schema: the features the predict net reads; trainer_extra_schema:
    what training also reads (labels, weights). Both get blobs of self.net unless
    keep_blobs (then the given records' blobs are used)."""

    def __init__(self, name, input_feature_schema, trainer_extra_schema, keep_blobs=False):
        super().__init__(name=name)
        self._layer_names = set()
        self._layers = []
        self._param_to_shape = {}
        self._seed = None
        self._sequence_seed = True
        self.param_to_optim = {}
        self.param_to_reg = {}
        self._default_optimizer = None
        self._loss = None
        self._prediction = []
        self._output_schema = None
        self._post_grad_net_modifiers = []
        self._final_net_modifiers = []
        self._breakdown_map = None
        if keep_blobs:
            self._input_feature_schema = input_feature_schema.clone()
            self._trainer_extra_schema = trainer_extra_schema.clone()
        else:
            self._input_feature_schema = schema.NewRecord(self.net, input_feature_schema)
            self._trainer_extra_schema = schema.NewRecord(self.net, trainer_extra_schema)
        self._metrics_schema = schema.Struct()
        self._preproc_output_schema = None
        self._init_global_constants()
        self.param_init_net = self.create_init_net("param_init_net")
        self._initialize_params = True

    # -- output, loss and metrics records

    def clear_output_schema(self):
        self._output_schema = None

    def set_initialize_params(self, initialize_params):
        """False: parameters get no initializer op (they are loaded from elsewhere)."""
        self._initialize_params = initialize_params

    def add_metric_field(self, name, value):
        assert name not in self._metrics_schema.fields, "metric field %s is added twice" % name
        self._metrics_schema = self._metrics_schema + schema.Struct((name, value))

    def add_output_schema(self, name, value):
        assert value is not None, "output schema field %s is None" % name
        assert isinstance(value, schema.Field), "output schema field %s must be a schema.Field" % name
        if self._output_schema is None:
            self._output_schema = schema.Struct((name, value))
        else:
            assert name not in self._output_schema.fields, "output schema field %s is added twice" % name
            self._output_schema = self._output_schema + schema.Struct((name, value))

    @property
    def input_feature_schema(self):
        return self._input_feature_schema

    @property
    def trainer_extra_schema(self):
        return self._trainer_extra_schema

    @property
    def metrics_schema(self):
        """What the train and eval nets report besides output_schema."""
        return self._metrics_schema

    @property
    def output_schema(self):
        assert self._output_schema is not None, "model %s has no output schema" % self.name
        return self._output_schema

    @output_schema.setter
    def output_schema(self, value):
        assert self._output_schema is None, "model %s: output schema is set already" % self.name
        self._output_schema = value

    @property
    def preproc_output_schema(self):
        assert self._preproc_output_schema is not None
        return self._preproc_output_schema

    @preproc_output_schema.setter
    def preproc_output_schema(self, value):
        assert self._preproc_output_schema is None
        self._preproc_output_schema = value

    @property
    def prediction(self):
        assert self._prediction, "model %s has no prediction" % self.name
        return self._prediction

    def add_prediction(self, prediction, weight=1.0):
        assert prediction is not None, "added prediction should not be None"
        self._prediction.append((prediction, weight))

    @property
    def loss(self):
        assert self._loss is not None, "model %s has no loss" % self.name
        return self._loss

    @loss.setter
    def loss(self, loss):
        assert self._loss is None, "model %s: loss is set already (use add_loss)" % self.name
        self._loss = loss

    def has_loss(self):
        return self._loss is not None

    def add_loss(self, loss, name="unnamed"):
        """Add loss (a Scalar or Struct) to the model's loss Struct as `name`, or
        `name_auto_<i>` when that is taken."""
        assert loss is not None, "added loss should not be None"
        assert isinstance(loss, (schema.Scalar, schema.Struct)), "added loss should be a Scalar or a Struct"
        if self._loss is None:
            self._loss = schema.Struct((name, loss))
            return
        unique, index = name, 0
        while unique in self._loss:
            unique = "%s_auto_%d" % (name, index)
            index += 1
        self._loss = self._loss + schema.Struct((unique, loss))

    # -- global constants

    def _init_global_constants(self):
        self.global_constants = {}
        self.global_constant_initializers = {}
        self.add_global_constant("ONE", 1.0)
        self.add_global_constant("ZERO", 0.0)
        self.add_global_constant("ZERO_RANGE", [0, 0], dtype="int32")

    def add_global_constant(self, name, array=None, dtype=None, initializer=None):
        """A constant blob every init net from create_init_net fills (few of these)."""
        assert name not in self.global_constants, "%s is already a global constant" % name
        blob_name = self.net.NextBlob(name)
        self.global_constants[name] = blob_name
        op = _constant_initializer_op(blob_name, array, dtype, initializer)
        assert blob_name not in self.global_constant_initializers, \
            "global constant blob %s already has an initializer" % blob_name
        self.global_constant_initializers[blob_name] = op
        return blob_name

    def maybe_add_global_constant(self, name, *args, **kwargs):
        """add_global_constant, or the existing blob when `name` is one already (its
        initializer must then be the same)."""
        if name not in self.global_constants:
            return self.add_global_constant(name, *args, **kwargs)
        blob_name = self.global_constants[name]
        op = _constant_initializer_op(blob_name, *args, **kwargs)
        assert op == self.global_constant_initializers[blob_name], \
            "conflicting initializers for global constant %s: %s, now %s" % (
                blob_name, self.global_constant_initializers[blob_name], op)
        return blob_name

    def _add_global_constants(self, init_net):
        init_net.Proto().op.extend(list(self.global_constant_initializers.values()))

    def create_init_net(self, name):
        """A new net that fills the global constants."""
        init_net = core.Net(name)
        self._add_global_constants(init_net)
        return init_net

    # -- parameters

    def _validate_param_shape(self, param_name, shape):
        known = self._param_to_shape.get(param_name)
        if param_name in self._param_to_shape and shape != known:
            raise ValueError("Got inconsistent shapes between shared parameters when trying to map a "
                             "blob in scope %s to %s: %s vs %s" % (scope.CurrentNameScope(), param_name, known, shape))

    def create_param(self, param_name, shape, initializer, optimizer=None, ps_param=None, regularizer=None):
        """A LayerParameter: its blob (the current scope's `param_name`, as resolved
        by ParameterSharing, or the BlobReference given) and the op `initializer`
        ((op type,) or (op type, kwargs)) filling it with `shape`."""
        if isinstance(param_name, core.BlobReference):
            param_name = str(param_name)
        elif isinstance(param_name, str):
            param_name = parameter_sharing_context.get_parameter_name(param_name)
        else:
            raise Caffe2Error("create_param: unsupported type for param_name: %s" % type(param_name).__name__)
        param_blob = core.BlobReference(param_name)
        if len(initializer) == 1:
            init_args = {}
        else:
            assert len(initializer) == 2, "initializer is (op type,) or (op type, kwargs), got %r" % (initializer,)
            init_args = copy.deepcopy(initializer[1])
        if shape is not None:
            assert "shape" not in init_args, "give the shape once: the initializer of %s has one" % param_name
            init_args["shape"] = shape
        init_op = None
        if self._initialize_params:
            init_op = core.CreateOperator(initializer[0], [], param_blob, **init_args)
        param = layers.LayerParameter(parameter=param_blob, initializer=init_op, optimizer=optimizer,
                                      ps_param=ps_param, regularizer=regularizer)
        self._validate_param_shape(param_name, shape)
        self._param_to_shape[param_name] = shape
        return param

    def next_layer_name(self, prefix):
        """`prefix` in the current name scope, or `<that>_auto_<i>` when taken."""
        base = core.ScopedName(prefix)
        name, index = base, 0
        while name in self._layer_names:
            name = "%s_auto_%d" % (base, index)
            index += 1
        self._layer_names.add(name)
        return name

    def add_layer(self, layer):
        """Register layer and its parameters, add its ops to self.net (so errors show
        at once) and return its output schema."""
        self._layers.append(layer)
        for param in layer.get_parameters():
            assert isinstance(param.parameter, core.BlobReference)
            self.param_to_optim[str(param.parameter)] = param.optimizer or self.default_optimizer
            self.params.append(param.parameter)
            if isinstance(param, layers.LayerParameter):
                self.param_to_reg[param.parameter] = param.regularizer
            elif isinstance(param, ParameterInfo):
                log.info("regularization is unsupported for ParameterInfo %s", param)
            else:
                raise ValueError("unknown parameter object (not a LayerParameter or ParameterInfo): %r" % (param,))
        layer.add_operators(self.net, self.param_init_net)
        return layer.output_schema

    def get_parameter_blobs(self):
        return [param.parameter for layer in self._layers for param in layer.get_parameters()]

    @property
    def layers(self):
        return self._layers

    # -- seeds

    @property
    def seed(self):
        return self._seed

    def store_seed(self, seed, sequence_seed=True):
        """Seed every op of the nets apply_seed is given (op i gets seed + i when
        sequence_seed)."""
        self._seed = seed
        self._sequence_seed = sequence_seed

    def apply_seed(self, net):
        if not self._seed:
            return
        for index, op in enumerate(net.Proto().op):
            op.device_option.random_seed = self._seed + (index if self._sequence_seed else 0)

    # -- optimizers and regularizers

    @property
    def default_optimizer(self):
        return self._default_optimizer

    @default_optimizer.setter
    def default_optimizer(self, optimizer):
        self._default_optimizer = optimizer

    def add_post_grad_net_modifiers(self, modifier):
        assert modifier not in self._post_grad_net_modifiers
        self._post_grad_net_modifiers.append(modifier)

    def add_final_net_modifiers(self, modifier):
        assert modifier not in self._final_net_modifiers
        self._final_net_modifiers.append(modifier)

    def apply_post_grad_net_modifiers(self, trainer_net, trainer_init_net, grad_map, blob_to_device=None):
        for modifier in self._post_grad_net_modifiers:
            modifier(trainer_net, trainer_init_net, grad_map, blob_to_device=blob_to_device)

    def apply_final_net_modifiers(self, trainer_net, trainer_init_net, grad_map, blob_to_device=None):
        for modifier in self._final_net_modifiers:
            modifier(trainer_net, trainer_init_net, grad_map, blob_to_device=blob_to_device)

    def apply_regularizers_on_loss(self, train_net, train_init_net, blob_to_device=None):  # noqa: ARG002
        """Add each parameter's regularization term (those applied on the loss) to the loss."""
        for param, regularizer in self.param_to_reg.items():
            if regularizer is None:
                continue
            assert isinstance(regularizer, Regularizer), "%r is not a Regularizer" % (regularizer,)
            added = regularizer(train_net, train_init_net, param, grad=None, by=RegularizationBy.ON_LOSS)
            if added is not None:
                self.add_loss(schema.Scalar(blob=added), str(added))

    def apply_regularizers_after_optimizer(self, train_net, train_init_net, grad_map,
                                           blob_to_device=None):  # noqa: ARG002
        for param, regularizer in self.param_to_reg.items():
            if regularizer is None:
                continue
            assert isinstance(regularizer, Regularizer), "%r is not a Regularizer" % (regularizer,)
            regularizer(train_net, train_init_net, param, grad=grad_map.get(str(param)),
                        by=RegularizationBy.AFTER_OPTIMIZER)

    def apply_optimizers(self, train_net, train_init_net, grad_map, blob_to_device=None):
        """Add each parameter's update ops; a parameter without a gradient is skipped
        (Caffe2 hands its optimizer None, which NoOptim ignores)."""
        cpu = core.DeviceOption(core.caffe2_pb2.CPU)
        blob_to_device = blob_to_device or {}
        for param, optimizer in self.param_to_optim.items():
            assert optimizer is not None, "parameter %s has no optimizer and the model no default_optimizer" % param
            grad = grad_map.get(str(param))
            if optimizer == self.NoOptim or grad is None:
                continue
            device = get_param_device(param, grad, param_to_device=blob_to_device, default_device=cpu)
            with core.DeviceScope(device):
                optimizer(train_net, train_init_net, core.BlobReference(param), grad)

    def _GetOne(self):
        return self.global_constants["ONE"]

    def NoOptim(self, *args, **kwargs):
        """The optimizer of parameters that are not trained (counters, statistics)."""

    @property
    def breakdown_map(self):
        return self._breakdown_map

    @breakdown_map.setter
    def breakdown_map(self, breakdown_map):
        assert isinstance(breakdown_map, dict)
        assert all(isinstance(k, str) for k in breakdown_map)
        assert sorted(breakdown_map.values()) == list(range(len(breakdown_map)))
        self._breakdown_map = breakdown_map

    # -- model.<Layer>(...) and model.<Operator>(...)

    def __getattr__(self, name):
        if name.startswith("_") or name in ("net", "param_init_net", "params", "param_to_grad"):
            raise AttributeError(name)
        if layers.layer_exists(name):
            def make_layer(*args, **kwargs):
                layer = layers.create_layer(name, self, *args, **kwargs)
                return self._add_exported_layer(layer, kwargs)
            return make_layer
        if core.IsOperator(name):
            def make_operator_layer(*args, **kwargs):
                def apply_operator(net, in_record, out_record, **op_kwargs):
                    net.__getattr__(name)(in_record.field_blobs(), out_record.field_blobs(), **op_kwargs)
                kwargs.setdefault("name", name)
                layer = layers.create_layer("Functional", self, *args, function=apply_operator, **kwargs)
                return self._add_exported_layer(layer, kwargs)
            return make_operator_layer
        raise AttributeError("Trying to create non-registered layer: %s" % name)

    def _add_exported_layer(self, layer, kwargs):
        if kwargs.get("output_to_metrics", False):
            layer.export_output_for_metrics()
        if kwargs.get("params_to_metrics", False):
            layer.export_params_for_metrics()
        return self.add_layer(layer)
