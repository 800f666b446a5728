"""caffe2.python.modeling.gradient_clipping: a NetModifier that clips each
parameter's gradient in place, after AddGradientOperators and before the
optimizer's update ops.

by_norm: g <- g * threshold / ||g|| when ||g|| > threshold (l2_norm or l1_norm);
  with use_parameter_norm the threshold is multiplied by ||param|| (a relative
  clip), and compute_norm_ratio also writes ||g|| / ||param|| to
  `<param>_norm_ratio` for monitoring.
by_value: g <- clip(g, clip_min, clip_max).

Sparse gradients (GradientSlice) are left alone, as Caffe2 leaves them.
"""
from .. import core
from ..errors import Caffe2Error
from ..proto import caffe2_pb2
from .net_modifier import NetModifier


class GradientClipping(NetModifier):
    L1_NORM = "l1_norm"
    L2_NORM = "l2_norm"

    BY_NORM = "by_norm"
    BY_VALUE = "by_value"

    GRAD_CLIP_METHODS = [BY_NORM, BY_VALUE]
    CLIP_GRADIENT_NORM_TYPES = [L2_NORM, L1_NORM]

    def __init__(self, grad_clip_method, clip_norm_type="l2_norm", clip_threshold=0.1,
                 use_parameter_norm=False, compute_norm_ratio=False, clip_max=1, clip_min=-1,
                 blobs_to_include=None, blobs_to_exclude=None, blob_names=None):
        # blob_names: Caffe2's earlier name for blobs_to_include
        if blob_names is not None:
            if blobs_to_include is not None:
                raise Caffe2Error("GradientClipping: give blobs_to_include or blob_names, not both")
            blobs_to_include = blob_names
        if grad_clip_method not in self.GRAD_CLIP_METHODS:
            raise Caffe2Error("GradientClipping: unknown grad_clip_method %r (expected one of %s)"
                              % (grad_clip_method, self.GRAD_CLIP_METHODS))
        if clip_norm_type is not None and clip_norm_type not in self.CLIP_GRADIENT_NORM_TYPES:
            raise Caffe2Error("GradientClipping: unknown clip_norm_type %r (expected one of %s)"
                              % (clip_norm_type, self.CLIP_GRADIENT_NORM_TYPES))
        if grad_clip_method == self.BY_NORM and clip_norm_type is None:
            raise Caffe2Error("GradientClipping: by_norm needs a clip_norm_type (%s)"
                              % self.CLIP_GRADIENT_NORM_TYPES)
        self.grad_clip_method = grad_clip_method
        self.clip_norm_type = clip_norm_type
        self.clip_threshold = float(clip_threshold)
        self.use_parameter_norm = use_parameter_norm
        self.compute_norm_ratio = compute_norm_ratio
        self.clip_max = float(clip_max)
        self.clip_min = float(clip_min)
        if grad_clip_method == self.BY_VALUE and self.clip_min > self.clip_max:
            raise Caffe2Error("GradientClipping: clip_min (%g) is above clip_max (%g)"
                              % (self.clip_min, self.clip_max))
        self.blobs_to_include = blobs_to_include
        self.blobs_to_exclude = blobs_to_exclude

    def _params_to_clip(self, net, grad_map):
        if self.blobs_to_include is None:
            chosen = dict(grad_map)
        else:
            chosen = {}
            for name in self.blobs_to_include:
                param = core.BlobReference(str(name))
                if not net.BlobIsDefined(param):
                    raise Caffe2Error("GradientClipping: param '%s' is not defined in net '%s'"
                                      % (param, net.Name()))
                if param not in grad_map:
                    raise Caffe2Error("GradientClipping: param '%s' has no gradient in grad_map" % param)
                chosen[param] = grad_map[param]
        for name in self.blobs_to_exclude or ():
            chosen.pop(str(name), None)
            chosen.pop(core.BlobReference(str(name)), None)
        return chosen

    def _norm(self, net, blob, p):
        """||blob||_p as a 1-element blob: LpNorm gives the sum of squares for p=2."""
        norm = net.LpNorm([blob], net.NextScopedBlob(prefix=str(blob) + "_l%d_norm" % p), p=p)
        return net.Pow([norm], exponent=0.5) if p == 2 else norm

    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None,
                   modify_output_record=False):
        from ..optimizer import get_param_device
        if grad_map is None:
            raise Caffe2Error("GradientClipping needs grad_map (the {param: gradient} map that "
                              "AddGradientOperators returns)")
        cpu = core.DeviceOption(caffe2_pb2.CPU)
        for param, grad in self._params_to_clip(net, grad_map).items():
            if isinstance(grad, core.GradientSlice):
                continue          # sparse gradients are not clipped (as in Caffe2)
            device = get_param_device(param, grad, param_to_device=blob_to_device, default_device=cpu)
            with core.DeviceScope(device):
                if self.grad_clip_method == self.BY_VALUE:
                    net.Clip([grad], [grad], max=self.clip_max, min=self.clip_min)
                    continue
                p = 2 if self.clip_norm_type == self.L2_NORM else 1
                grad_norm = self._norm(net, grad, p)
                inputs = [grad, grad_norm]
                if self.use_parameter_norm:
                    param_norm = self._norm(net, param, p)
                    inputs.append(param_norm)
                    if self.compute_norm_ratio:
                        net.Div([grad_norm, param_norm],
                                [net.NextScopedBlob(prefix=str(param) + "_norm_ratio")])
                net.ClipTensorByScaling(inputs, [grad], threshold=self.clip_threshold)
