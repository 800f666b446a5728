"""caffe2.python.normalizer: normalizations a layer model applies to a record.

    normalized = BatchNormalizer(momentum=0.9)(model, record)   # model.BatchNormalization(record, ...)

Layers look them up by name in a NormalizerContext (UseNormalizer blocks).
"""


class Normalizer:
    def __call__(self, layer_model, param):
        return self._run(layer_model, param)

    def _run(self, layer_model, param):
        raise NotImplementedError("%s does not implement _run" % type(self).__name__)


class BatchNormalizer(Normalizer):
    """The BatchNormalization layer with this momentum and initial scale."""

    def __init__(self, momentum, scale_init_value=1.0):
        self._momentum = float(momentum)
        self._scale_init_value = float(scale_init_value)

    def _run(self, layer_model, param):
        return layer_model.BatchNormalization(param, momentum=self._momentum, scale_init_value=self._scale_init_value)


class LayerNormalizer(Normalizer):
    """The LayerNormalization layer with this epsilon and initial scale."""

    def __init__(self, epsilon, use_layer_norm_op=True, scale_init_value=1.0):
        self._epsilon = float(epsilon)
        self._use_layer_norm_op = use_layer_norm_op
        self._scale_init_value = float(scale_init_value)

    def _run(self, layer_model, param):
        return layer_model.LayerNormalization(param, epsilon=self._epsilon,
                                              use_layer_norm_op=self._use_layer_norm_op,
                                              scale_init_value=self._scale_init_value)
