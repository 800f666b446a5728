"""caffe2.python.layers.layers: the ModelLayer base class and the layer registry.

A layer owns its parameters and knows how to add its operators to a net in each
InstantiationContext (training, eval, prediction, accumulate_pred), so one model
description yields a train net, an eval net and a predict net. Inputs and outputs
are schema records (schema.Field trees bound to blobs).

A subclass implements add_ops (prediction), and where it differs add_eval_ops
(defaults to add_ops) and add_train_ops (defaults to add_eval_ops). Its __init__
creates parameters with self.create_param and sets self.output_schema.
"""
import logging
from collections import namedtuple

import numpy as np

from .. import core, schema, scope
from ..proto import caffe2_pb2
from .tags import TagContext

log = logging.getLogger("caffe2py")

# The record types sparse features travel in.
IdList = schema.List(np.int64)
IdScoreList = schema.Map(np.int64, np.float32)


def almost_equal_schemas(record, original_schema, check_field_names=True, check_field_types=True,
                         check_field_metas=False):
    return schema.equal_schemas(record, original_schema, check_field_names=check_field_names,
                                check_field_types=check_field_types, check_field_metas=check_field_metas)


def get_key(record):
    """The id scalar of an IdList (its values) or an IdScoreList (its keys)."""
    if almost_equal_schemas(record, IdList):
        key = "values"
    elif almost_equal_schemas(record, IdScoreList, check_field_types=False):
        key = "values:keys"
    else:
        raise NotImplementedError("get_key: %r is neither an IdList nor an IdScoreList" % (record,))
    field = record[key]
    assert field.metadata is not None, "sparse feature %s has no metadata (its categorical_limit is needed)" % (
        field() if field.has_blobs() else key)
    return field


def get_categorical_limit(record):
    """How many distinct ids the sparse feature `record` may hold (max id + 1)."""
    return get_key(record).metadata.categorical_limit


def get_avg_length(record):
    return record["lengths"].metadata.expected_value


def set_request_only(field):
    """Mark every scalar of field as coming with the request only, keeping its metadata."""
    for scalar in field.all_scalars():
        metadata = scalar.metadata or schema.Metadata()
        specs = metadata.feature_specs or schema.FeatureSpec()
        if not np.issubdtype(scalar.field_type(), np.integer):
            assert metadata.categorical_limit is None, \
                "categorical_limit shouldn't be set for a non-integer field"
        scalar.set_metadata(metadata._replace(feature_specs=specs._replace(feature_is_request_only=True)))


def is_request_only_scalar(scalar):
    metadata = scalar.field_metadata()
    if not metadata:
        return False
    return all(m is not None and m.feature_specs is not None and bool(m.feature_specs.feature_is_request_only)
               for m in metadata)


class InstantiationContext:
    """The kinds of net a layer can be instantiated in."""
    # accumulates predictions, labels and weights (e.g. for calibration)
    ACCUMULATE_PRED = "accumulate_pred"
    EVAL = "eval"
    PREDICTION = "prediction"
    TRAINING = "training"


_LAYER_REGISTRY = {}


def register_layer(name, layer):
    assert name not in _LAYER_REGISTRY, "layer %s already exists" % name
    _LAYER_REGISTRY[name] = layer


def layer_exists(name):
    return name in _LAYER_REGISTRY


def get_layer_class(name):
    return _LAYER_REGISTRY[name]


def create_layer(layer_name, *args, **kwargs):
    return _LAYER_REGISTRY[layer_name](*args, **kwargs)


LayerPsParam = namedtuple("LayerPsParam", ["sparse_key", "average_length"])


class LayerParameter:
    """A parameter blob of a layer: the op that initializes it, its optimizer and
    regularizer (None: the model's default optimizer, no regularization), and the
    parameter-server hints (ps_param) of a sparse one."""

    def __init__(self, parameter=None, optimizer=None, initializer=None, ps_param=None, regularizer=None):
        assert isinstance(parameter, core.BlobReference), "expect %s to be a BlobReference" % (parameter,)
        self._shape = None
        self.parameter = parameter
        self.optimizer = optimizer
        self.initializer = initializer
        self.ps_param = ps_param
        self.regularizer = regularizer

    @property
    def initializer(self):
        return self._initializer

    @initializer.setter
    def initializer(self, op):
        assert op is None or core.IsOperator(getattr(op, "type", None)), \
            "initializer expects an OperatorDef, got %s" % type(op)
        self._initializer = op
        if op is not None:
            shape = next((list(a.ints) for a in op.arg if a.name == "shape"), None)
            if shape is not None:
                self.shape = shape

    @property
    def shape(self):
        return self._shape

    @shape.setter
    def shape(self, shape):
        assert self._shape is None or self._shape == shape, \
            "inconsistent shape for layer parameter %s: %s, now %s" % (self, self._shape, shape)
        self._shape = shape

    def __str__(self):
        return str(self.parameter)


def _same_op_except_debug_info(a, b):
    first, second = caffe2_pb2.OperatorDef(), caffe2_pb2.OperatorDef()
    first.CopyFrom(a)
    second.CopyFrom(b)
    first.ClearField("debug_info")
    second.ClearField("debug_info")
    return first == second


AccessedFeatures = namedtuple("AccessedFeatures", ["type", "ids"])


class ModelLayer:
    """Base of every layer. `prefix` names the layer (made unique in the model, in the
    current name scope); `predict_input_record_fields` names the input fields the
    predict net needs, when that is a subset; `tags` adds to the open Tags blocks'."""

    def __init__(self, model, prefix, input_record, predict_input_record_fields=None, tags=None, **kwargs):
        self.name = model.next_layer_name(prefix)
        self.model = model
        self.kwargs = kwargs
        self._input_record = input_record
        if predict_input_record_fields:
            if not isinstance(predict_input_record_fields, list):
                predict_input_record_fields = [predict_input_record_fields]
            self._predict_input_record = self._input_record[predict_input_record_fields]
        else:
            self._predict_input_record = None
        scalars = input_record.all_scalars()
        # a layer whose every input comes with the request computes request-only outputs
        self.request_only = bool(scalars) and all(is_request_only_scalar(s) for s in scalars)
        self.precomputation_request_only = False
        self.precomputation_object_only = False
        self._output_schema = None
        self._predict_output_schema = None
        self.eval_output_schema = None
        self.tags = set(tags or [])
        self.tags.update(TagContext.current().tags)
        self.params = []
        self._export_output_for_metrics = False
        self._export_params_for_metrics = False

    def get_type(self):
        return type(self).__name__

    def _check_output_schema(self):
        assert self._output_schema is not None, "layer %s: output schema is not set" % self.name
        assert self._predict_output_schema is None or schema.is_schema_subset(
            self._predict_output_schema, self._output_schema), \
            "layer %s: predict_output_schema is not a subset of output_schema" % self.name

    @property
    def predict_input_record(self):
        return self._predict_input_record or self._input_record

    @property
    def input_record(self):
        return self._input_record

    @property
    def predict_output_schema(self):
        self._check_output_schema()
        return self._predict_output_schema or self._output_schema

    @predict_output_schema.setter
    def predict_output_schema(self, output_schema):
        assert self._predict_output_schema is None
        self._predict_output_schema = output_schema

    @property
    def output_schema(self):
        if self.request_only:
            set_request_only(self._output_schema)
        self._check_output_schema()
        return self._output_schema

    @output_schema.setter
    def output_schema(self, output_schema):
        assert self._output_schema is None, "layer %s: output schema is set already" % self.name
        self._output_schema = output_schema

    def get_parameters(self):
        return self.params

    def get_fp16_compatible_parameters(self):
        """The parameters that may be stored as float16."""
        return []

    def get_memory_usage(self):
        return 0

    def get_accessed_features(self):
        """{field: [AccessedFeatures]} of the features this layer reads."""
        return {}

    def add_init_params(self, init_net):
        """Add the parameters' initializer ops to init_net, once each."""
        device = scope.CurrentDeviceScope()
        for param in self.params:
            init_op = param.initializer
            if init_op is None:
                continue
            if not init_op.HasField("device_option") and device is not None:
                placed = caffe2_pb2.OperatorDef()
                placed.CopyFrom(init_op)
                placed.device_option.CopyFrom(device)
                init_op = placed
            # a parameter shared between layers is filled once
            if any(_same_op_except_debug_info(op, init_op) for op in init_net.Proto().op):
                continue
            init_net.Proto().op.extend([init_op])

    def create_param(self, param_name, shape, initializer, optimizer, ps_param=None, regularizer=None):
        """A parameter named `<layer name>/<param_name>` (or the name ParameterSharing
        maps it to), registered with this layer; returns its BlobReference."""
        with scope.NameScope(self.name, reset=True):
            param = self.model.create_param(param_name=param_name, shape=shape, initializer=initializer,
                                            optimizer=optimizer, ps_param=ps_param, regularizer=regularizer)
            assert all(param.parameter != p.parameter for p in self.params), \
                "layer %s uses parameter %s twice" % (self.name, param.parameter)
            self.params.append(param)
            return param.parameter

    def get_next_blob_reference(self, name):
        """A new blob named `<layer name>/<name>` (made unique in the model's net)."""
        with scope.NameScope(self.name, reset=True):
            return self.model.net.NextScopedBlob(name)

    def add_operators(self, net, init_net=None, context=InstantiationContext.TRAINING):
        """Add this layer's ops for `context` to net (and its parameters' initializers
        to init_net, which training needs)."""
        with scope.NameScope(self.name):
            if context not in (InstantiationContext.PREDICTION, InstantiationContext.EVAL,
                               InstantiationContext.ACCUMULATE_PRED):
                assert init_net, "only the prediction, eval and accumulate_pred contexts go without init_net"
            if init_net:
                self.add_init_params(init_net)
            if context == InstantiationContext.TRAINING:
                self.add_train_ops(net)
            elif context == InstantiationContext.EVAL:
                self.add_eval_ops(net)
            elif context == InstantiationContext.ACCUMULATE_PRED:
                self.add_ops_to_accumulate_pred(net)
            else:
                self.add_ops(net)
            if context in (InstantiationContext.TRAINING, InstantiationContext.EVAL) \
                    and self._export_params_for_metrics:
                self.add_param_copy_operators(net)

    def add_ops(self, net):
        """The prediction ops."""
        raise NotImplementedError("layer %s has no add_ops" % self.get_type())

    def add_eval_ops(self, net):
        self.add_ops(net)

    def add_train_ops(self, net):
        self.add_eval_ops(net)

    def add_ops_to_accumulate_pred(self, net):
        self.add_eval_ops(net)

    def add_param_copy_operators(self, net):
        for param in self.params:
            copy_ref = self.model.metrics_schema[str(param.parameter)]
            net.Copy([param.parameter], copy_ref.field_blobs())

    def export_output_for_metrics(self):
        """Report this layer's output among the model's metrics."""
        self._export_output_for_metrics = True
        self.model.add_metric_field(self.name + "/output", self.output_schema)

    def export_params_for_metrics(self):
        """Report copies of this layer's parameters among the model's metrics."""
        self._export_params_for_metrics = True
        for param in self.params:
            copy_ref = self.get_next_blob_reference(str(param).split("/")[-1] + "_copy")
            self.model.add_metric_field(str(param.parameter), copy_ref)
