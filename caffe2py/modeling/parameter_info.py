"""caffe2.python.modeling.parameter_info: what a model knows about one parameter."""
import numpy as np

from ..errors import Caffe2Error


class ParameterTags:
    """Tags for ModelHelper.create_param: WEIGHT and BIAS sort params into
    model.weights / model.biases; COMPUTED_PARAM marks blobs the net computes rather
    than the optimizer updates (batch-norm running statistics)."""
    BIAS = "BIAS"
    WEIGHT = "WEIGHT"
    COMPUTED_PARAM = "COMPUTED_PARAM"


class ParameterInfo:
    """A parameter blob with its shape, gradient (a BlobReference or a GradientSlice,
    set once gradients exist), optional copies in other precisions (blob_copy:
    {TensorProto data type: BlobReference}) and an optional optimizer of its own."""

    def __init__(self, param_id, param, key=None, shape=None, length=None, grad=None, blob_copy=None):
        from ..core import BlobReference
        if not isinstance(param, BlobReference):
            raise Caffe2Error("ParameterInfo: param must be a BlobReference, got %s" % type(param).__name__)
        self.param_id = param_id
        self.name = str(param)
        self.blob = param
        self.key = key
        self.shape = shape
        self.size = None if shape is None else int(np.prod(shape))
        self.length = max(1, length if length is not None else 1)
        self.grad = grad
        self.blob_copy = blob_copy
        self._optimizer = None
        self.regularizer = None

    @property
    def parameter(self):
        return self.blob

    @property
    def optimizer(self):
        return self._optimizer

    @optimizer.setter
    def optimizer(self, value):
        if self._optimizer is not None:
            raise Caffe2Error("parameter '%s': optimizer has already been set" % self.name)
        self._optimizer = value

    def grad_type(self):
        """BlobReference or the GradientSlice type, None before gradients exist."""
        from ..core import BlobReference
        if self.grad is None:
            return None
        return BlobReference if isinstance(self.grad, BlobReference) else type(self.grad)

    def __str__(self):
        return self.name

    def __repr__(self):
        return "ParameterInfo(%r, shape=%r, grad=%r)" % (self.name, self.shape, self.grad)
