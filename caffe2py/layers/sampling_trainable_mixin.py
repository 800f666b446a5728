"""caffe2.python.layers.sampling_trainable_mixin: layers SamplingTrain can wrap.

Such a layer builds its ops from a list of parameter blobs (_add_ops(net, params)):
the full parameters for prediction (param_blobs) and, in training, the rows of
them SamplingTrain gathered (train_param_blobs, set once by SamplingTrain).
"""
import abc


class SamplingTrainableMixin(metaclass=abc.ABCMeta):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._train_param_blobs = None
        self._train_param_blobs_frozen = False

    @property
    @abc.abstractmethod
    def param_blobs(self):
        """The parameter blobs, in the order _add_ops takes them."""

    @property
    def train_param_blobs(self):
        return self._train_param_blobs

    @train_param_blobs.setter
    def train_param_blobs(self, blobs):
        assert not self._train_param_blobs_frozen, "train_param_blobs is set already"
        assert blobs is not None
        self._train_param_blobs_frozen = True
        self._train_param_blobs = blobs

    @abc.abstractmethod
    def _add_ops(self, net, params):
        """Add the layer's ops computing from `params`."""

    def add_ops(self, net):
        self._add_ops(net, self.param_blobs)

    def add_train_ops(self, net):
        self._add_ops(net, self.train_param_blobs or self.param_blobs)
