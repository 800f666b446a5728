"""Helpers the loss layers share: casts and shape alignment of labels and weights."""
import numpy as np

from .. import core


def as_float32(net, record_field, name):
    """The field's blob, cast to float32 unless it is float32 already."""
    blob = record_field()
    if record_field.field_type().base == np.float32:
        return blob
    return net.Cast(blob, net.NextScopedBlob(name), to=core.DataType.FLOAT)


def label_like(net, label, label_field, prediction_field):
    """label shaped like the prediction: a (N,) label of a (N, 1) prediction gains
    its trailing dim."""
    if len(label_field.field_type().shape) == 0 and len(prediction_field.field_type().shape) == 1:
        return net.ExpandDims(label, net.NextScopedBlob("expanded_label"), dims=[1])
    return label


def example_weights(net, record):
    """The record's `weight` as a float32 vector of one weight per example, with no
    gradient; None when the record has none."""
    if "weight" not in record:
        return None
    weight = as_float32(net, record.weight, "weight_float32")
    weight = net.FlattenToVec(weight, net.NextScopedBlob("weight_vector"))
    return net.StopGradient(weight, net.NextScopedBlob("weight_stop_gradient"))
