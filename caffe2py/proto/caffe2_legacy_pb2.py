"""Caffe's Datum record (Caffe2's caffe2_legacy.proto CaffeDatum; Caffe's caffe.proto
Datum): what image dbs made by Caffe's convert_imageset hold, and what ImageInput
reads with use_caffe_datum=1.

Built from a descriptor at import (no protoc step): one message, wire-compatible with
both definitions (channels 1, height 2, width 3, data 4, label 5, float_data 6,
encoded 7). `data` holds an encoded image when `encoded`, else raw uint8 pixels in
channels x height x width order."""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_FIELDS = (("channels", 1, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
           ("height", 2, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
           ("width", 3, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
           ("data", 4, _F.TYPE_BYTES, _F.LABEL_OPTIONAL),
           ("label", 5, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
           ("float_data", 6, _F.TYPE_FLOAT, _F.LABEL_REPEATED),
           ("encoded", 7, _F.TYPE_BOOL, _F.LABEL_OPTIONAL))


def _message_class():
    proto = descriptor_pb2.FileDescriptorProto(name="caffe2py/caffe2_legacy.proto", package="caffe2",
                                               syntax="proto2")
    message = proto.message_type.add(name="CaffeDatum")
    for name, number, kind, label in _FIELDS:
        message.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()      # a pool of its own: no clash with other protos
    pool.AddSerializedFile(proto.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("caffe2.CaffeDatum"))


CaffeDatum = _message_class()
Datum = CaffeDatum          # Caffe's name for the same record

__all__ = ["CaffeDatum", "Datum"]
