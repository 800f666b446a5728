"""caffe2.python.cnn.CNNModelHelper: Caffe2's deprecated CNN model class, kept so old
training scripts (the first MNIST tutorial, resnet trainers of 2017) run. It is a
ModelHelper whose methods add layers through brew with the model's storage order and
cuDNN settings, as Caffe2's wrapper does; new code uses ModelHelper and brew."""
import logging

from . import brew, core, scope
from .errors import Caffe2Error
from .model_helper import ModelHelper
from .modeling.parameter_info import ParameterTags
from .proto import caffe2_pb2

log = logging.getLogger("caffe2py")


class StorageOrderError(Caffe2Error, ValueError):
    """An order other than NCHW / NHWC (a ValueError in Caffe2)."""


class CNNModelHelper(ModelHelper):
    """A ModelHelper with CNN layer methods (Conv, FC, Relu, MaxPool, SpatialBN, ...)."""

    def __init__(self, order="NCHW", name=None, use_cudnn=True, cudnn_exhaustive_search=False,
                 ws_nbytes_limit=None, init_params=True, skip_sparse_optim=False, param_model=None):
        log.warning("CNNModelHelper is deprecated in Caffe2: use ModelHelper with brew")
        if order not in ("NCHW", "NHWC"):
            raise StorageOrderError("CNNModelHelper: cannot understand the CNN storage order %r (NCHW or NHWC)" % (order,))
        arg_scope = {"order": order, "use_cudnn": use_cudnn, "cudnn_exhaustive_search": cudnn_exhaustive_search}
        if ws_nbytes_limit:
            arg_scope["ws_nbytes_limit"] = ws_nbytes_limit
        super().__init__(skip_sparse_optim=skip_sparse_optim, name="CNN" if name is None else name,
                         init_params=init_params, param_model=param_model, arg_scope=arg_scope)
        self.order = order
        self.use_cudnn = use_cudnn
        self.cudnn_exhaustive_search = cudnn_exhaustive_search
        self.ws_nbytes_limit = ws_nbytes_limit

    # -- what brew's cuDNN-aware helpers do with use_cudnn and friends

    def _cudnn_kwargs(self, kwargs, exhaustive=False):
        """Caffe2 turns use_cudnn into engine='CUDNN' (caffe2py runs its own kernel for an
        engine it lacks, as Caffe2 does for an engine not built in)."""
        if self.use_cudnn:
            kwargs.setdefault("engine", "CUDNN")
            if exhaustive:
                kwargs.setdefault("exhaustive_search", self.cudnn_exhaustive_search)
                if self.ws_nbytes_limit:
                    kwargs.setdefault("ws_nbytes_limit", self.ws_nbytes_limit)
        return kwargs

    # -- layers with parameters

    def Conv(self, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None, group=1,
             transform_inputs=None, **kwargs):
        return brew.conv(self, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=weight_init,
                         bias_init=bias_init, group=group, transform_inputs=transform_inputs, order=self.order,
                         **self._cudnn_kwargs(kwargs, exhaustive=True))

    def GroupConv(self, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None, group=1,
                  **kwargs):
        return self.Conv(blob_in, blob_out, dim_in, dim_out, kernel, weight_init=weight_init, bias_init=bias_init,
                         group=group, **kwargs)

    def ConvTranspose(self, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None, **kwargs):
        """brew.conv_transpose: weight [dim_in, dim_out, k, k] (NCHW), Xavier; bias zeros."""
        shape = [dim_in, dim_out, kernel, kernel] if self.order == "NCHW" else [dim_in, kernel, kernel, dim_out]
        w = self.create_param(str(blob_out) + "_w", shape, self._init_of(weight_init, "XavierFill"),
                              tags=ParameterTags.WEIGHT)
        b = self.create_param(str(blob_out) + "_b", [dim_out], self._init_of(bias_init, "ConstantFill"),
                              tags=ParameterTags.BIAS)
        return self.net.ConvTranspose([blob_in, w, b], blob_out, kernel=kernel, order=self.order,
                                      **self._cudnn_kwargs(kwargs, exhaustive=True))

    def _init_of(self, init, default_op):
        from .modeling import initializers
        if not self.init_params:
            return initializers.ExternalInitializer()
        op, op_kwargs = init if init else (default_op, {})
        return initializers.Initializer(op, **op_kwargs)

    def FC(self, *args, **kwargs):
        return brew.fc(self, *args, **kwargs)

    def SpatialBN(self, *args, **kwargs):
        return brew.spatial_bn(self, *args, order=self.order, **kwargs)

    def InstanceNorm(self, *args, **kwargs):
        return brew.instance_norm(self, *args, order=self.order, **kwargs)

    def PRelu(self, blob_in, blob_out, num_channels=1, slope_init=None, **kwargs):
        """brew.prelu: one slope per channel (or one shared), 0.25 by default."""
        slope = self.create_param(str(blob_out) + "_slope", [num_channels],
                                  self._init_of(slope_init or ("ConstantFill", {"value": 0.25}), "ConstantFill"),
                                  tags=ParameterTags.WEIGHT)
        return self.net.PRelu([blob_in, slope], [blob_out], **kwargs)

    def LSTM(self, *args, **kwargs):
        from . import rnn_cell
        return rnn_cell.LSTM(self, *args, **kwargs)

    # -- layers without parameters

    def Relu(self, blob_in, blob_out, **kwargs):
        return brew.relu(self, blob_in, blob_out, order=self.order, **self._cudnn_kwargs(kwargs))

    def Softmax(self, blob_in, blob_out=None, **kwargs):
        return brew.softmax(self, blob_in, blob_out, **self._cudnn_kwargs(kwargs))

    def Dropout(self, blob_in, blob_out, **kwargs):
        return brew.dropout(self, blob_in, blob_out, **kwargs)

    def LRN(self, blob_in, blob_out, **kwargs):
        """brew.lrn: LRN's second output (the scale) is kept as `_<out>_scale`."""
        return self.net.LRN(blob_in, [blob_out, "_" + str(blob_out) + "_scale"], order=self.order, **kwargs)[0]

    def MaxPool(self, blob_in, blob_out, **kwargs):
        return brew.max_pool(self, blob_in, blob_out, order=self.order, **self._cudnn_kwargs(kwargs))

    def AveragePool(self, blob_in, blob_out, **kwargs):
        return brew.average_pool(self, blob_in, blob_out, order=self.order, **self._cudnn_kwargs(kwargs))

    def Concat(self, blobs_in, blob_out, **kwargs):
        return brew.concat(self, blobs_in, blob_out, order=self.order, **kwargs)

    def DepthConcat(self, blobs_in, blob_out, **kwargs):
        """Caffe2's old name for Concat (channels of the storage order)."""
        return self.Concat(blobs_in, blob_out, **kwargs)

    def Sum(self, blob_in, blob_out, **kwargs):
        return brew.sum(self, blob_in, blob_out, **kwargs)

    def Transpose(self, blob_in, blob_out, **kwargs):
        return brew.transpose(self, blob_in, blob_out, **self._cudnn_kwargs(kwargs))

    def PadImage(self, blob_in, blob_out, **kwargs):
        return self.net.PadImage(blob_in, blob_out, **kwargs)

    def Iter(self, blob_out, **kwargs):
        return brew.iter(self, blob_out, **kwargs)

    def Accuracy(self, blob_in, blob_out, **kwargs):
        return brew.accuracy(self, blob_in, blob_out, **kwargs)

    def ImageInput(self, blob_in, blob_out, use_gpu_transform=False, **kwargs):
        return brew.image_input(self, blob_in, blob_out, order=self.order, use_gpu_transform=use_gpu_transform,
                                **kwargs)

    # -- parameters and initialisers

    def GetWeights(self, namescope=None):
        namescope = scope.CurrentNameScope() if namescope is None else namescope
        return list(self.weights) if namescope == "" else [w for w in self.weights if w.GetNameScope() == namescope]

    def GetBiases(self, namescope=None):
        namescope = scope.CurrentNameScope() if namescope is None else namescope
        return list(self.biases) if namescope == "" else [b for b in self.biases if b.GetNameScope() == namescope]

    @property
    def XavierInit(self):
        return ("XavierFill", {})

    def ConstantInit(self, value):
        return ("ConstantFill", {"value": value})

    @property
    def MSRAInit(self):
        return ("MSRAFill", {})

    @property
    def ZeroInit(self):
        return ("ConstantFill", {})

    def AddWeightDecay(self, weight_decay):
        return brew.add_weight_decay(self, weight_decay)

    @property
    def CPU(self):
        return core.DeviceOption(caffe2_pb2.CPU)

    @property
    def GPU(self, gpu_id=0):
        return core.DeviceOption(caffe2_pb2.CUDA, gpu_id)
