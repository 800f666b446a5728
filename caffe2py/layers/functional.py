"""caffe2.python.layers.functional: Functional, a layer made of a Python function.

function(net, in_record, out_record, **kwargs) adds the ops computing out_record
from in_record. output_names_or_num: how many outputs (1: a Scalar, more: a
Struct field_0, ...), their names (a Struct of them), or a schema.Field to use as
given. The outputs' types come from output_dtypes, or else from running schema
inference on the function applied to an empty batch of the input's types (what it
cannot infer stays untyped). model.<Operator>(record, n, **args) is a Functional
around that one operator.
"""
import logging

import numpy as np

from .. import core, schema, scope, workspace
from ..proto import caffe2_pb2
from .layers import ModelLayer

log = logging.getLogger("caffe2py")

_DTYPE_FOR_TENSOR_TYPE = {caffe2_pb2.TensorProto.DOUBLE: np.float64, caffe2_pb2.TensorProto.FLOAT: np.float32,
                          caffe2_pb2.TensorProto.INT32: np.int32, caffe2_pb2.TensorProto.INT64: np.int64,
                          caffe2_pb2.TensorProto.FLOAT16: np.float16}


class Functional(ModelLayer):

    def __init__(self, model, input_record, output_names_or_num, function, name="functional",
                 output_dtypes=None, tags=None, **kwargs):
        input_record = schema.as_record(input_record)
        super().__init__(model, name, input_record, tags=tags, **kwargs)
        self._function = function
        self._kwargs = kwargs
        return_struct = isinstance(output_names_or_num, list) or (
            isinstance(output_names_or_num, int) and output_names_or_num != 1)
        with scope.NameScope(self.name, reset=True):
            if isinstance(output_names_or_num, schema.Field):
                self.output_schema = output_names_or_num.clone(keep_blobs=True)
                return
            if isinstance(output_names_or_num, int):
                outputs = schema.NewRecord(model.net, schema.RawTuple(output_names_or_num))
            else:
                names = output_names_or_num if isinstance(output_names_or_num, list) else [output_names_or_num]
                outputs = schema.NewRecord(model.net, schema.Struct(*[(n, np.void) for n in names]))
        num_outputs = len(outputs.field_blobs())
        self.output_schema = outputs if return_struct else outputs[0]
        if output_dtypes is not None:
            if not isinstance(output_dtypes, list):
                output_dtypes = [output_dtypes] * num_outputs
            assert len(output_dtypes) == num_outputs, "%d output_dtypes for %d outputs" % (
                len(output_dtypes), num_outputs)
            for dtype, scalar in zip(output_dtypes, self.output_schema.all_scalars()):
                scalar.set_type(dtype)
            return
        self._infer_output_types()

    def _infer_output_types(self):
        """Type the outputs by inferring the function's ops on an empty batch."""
        try:
            type_net = core.Net("_temp_type_and_shape_inference_net")
            schema.InitEmptyRecord(type_net, self.input_record, enforce_types=True)
            self._function(type_net, self.input_record, self.output_schema, **self._kwargs)
            shapes, types = workspace.InferShapesAndTypes([type_net], {})
        except (TypeError, ValueError, KeyError, AssertionError, RuntimeError) as error:
            log.warning("Functional layer %s: type inference failed: %s", self.name, error)
            return
        missed = False
        for scalar in self.output_schema.all_scalars():
            blob = str(scalar())
            if blob not in shapes or blob not in types:
                missed = True
                continue
            dims = shapes[blob]
            if not dims:
                shape = ()
            elif dims[0] == 0:              # the batch dimension leads
                shape = tuple(dims[1:])
            else:
                missed = True
                continue
            dtype = _DTYPE_FOR_TENSOR_TYPE.get(types[blob])
            if dtype is not None:
                scalar.set_type((dtype, shape))
        if missed:
            log.warning("Type inference had problems for layer: %s", self.name)

    def add_ops(self, net):
        self._function(net, self.input_record, self.output_schema, **self._kwargs)
