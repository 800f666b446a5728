"""caffe2.python.modeling.net_modifier: the base of the objects that add ops to a
built net (gradient clipping, blob statistics for monitoring).

A modifier is configured once and then called on a net:

    GradientClipping(grad_clip_method="by_norm")(model.net, grad_map=model.grad_map)

Subclasses implement modify_net; __call__ forwards to it with Caffe2's keywords.
"""
import abc

from .. import core
from ..errors import Caffe2Error


class NetModifier(metaclass=abc.ABCMeta):
    """Adds ops to a net. Caffe2's surface: __call__(net, init_net=None,
    grad_map=None, blob_to_device=None, modify_output_record=False) and the
    field_name_suffix() of the blobs a monitoring modifier writes."""

    @abc.abstractmethod
    def __init__(self):
        pass

    @abc.abstractmethod
    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None,
                   modify_output_record=False):
        pass

    def __call__(self, net, init_net=None, grad_map=None, blob_to_device=None,
                 modify_output_record=False):
        self.modify_net(net, init_net=init_net, grad_map=grad_map, blob_to_device=blob_to_device,
                        modify_output_record=modify_output_record)

    def field_name_suffix(self):
        return getattr(self, "_field_name_suffix", "")


def require_defined(net, blob_name, modifier):
    """The BlobReference of `blob_name`, which `net` must produce or take as input."""
    blob = core.BlobReference(str(blob_name))
    if not net.BlobIsDefined(blob):
        raise Caffe2Error("%s: blob '%s' is not defined in net '%s' (neither an op output nor an "
                          "external input)" % (modifier, blob, net.Name()))
    return blob


def append_output_record(net, field_name, blob, dtype, shape=()):
    """Record `blob` as field `field_name` of the net's output record (a schema.Struct)."""
    from .. import schema
    scalar = schema.Scalar((dtype, shape), blob)
    record = net.output_record()
    if record is None:
        net.set_output_record(schema.Struct((field_name, scalar)))
    else:
        net.AppendOutputRecordField(field_name, scalar)
