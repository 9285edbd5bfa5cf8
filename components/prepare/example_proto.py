"""``tf.train.Example`` as a protocol buffer message built here, without TensorFlow: a step
that only reads whole splits (train-model choosing among candidates, the trees and the
linear model reading their rows) parses the prepared records with it and never pays
TensorFlow's import. Same wire format as TensorFlow's ``example.proto`` and
``feature.proto`` (field numbers and types), in a descriptor pool of its own."""

from __future__ import annotations

import functools

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "gkeflow.example"


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="gkeflow/example.proto", package=_PACKAGE,
                                               syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    for name, kind in (("BytesList", field.TYPE_BYTES), ("FloatList", field.TYPE_FLOAT),
                       ("Int64List", field.TYPE_INT64)):
        message = proto.message_type.add(name=name)
        message.field.add(name="value", number=1, type=kind, label=field.LABEL_REPEATED)
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, kind) in enumerate((("bytes_list", "BytesList"),
                                           ("float_list", "FloatList"),
                                           ("int64_list", "Int64List")), start=1):
        feature.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                          type_name=f".{_PACKAGE}.{kind}", label=field.LABEL_OPTIONAL,
                          oneof_index=0)
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                    type_name=f".{_PACKAGE}.Feature")
    features.field.add(name="feature", number=1, type=field.TYPE_MESSAGE,
                       label=field.LABEL_REPEATED,
                       type_name=f".{_PACKAGE}.Features.FeatureEntry")
    example = proto.message_type.add(name="Example")
    example.field.add(name="features", number=1, type=field.TYPE_MESSAGE,
                      label=field.LABEL_OPTIONAL, type_name=f".{_PACKAGE}.Features")
    return proto


@functools.cache
def example_class():
    """The ``Example`` message class (``Example.FromString(record)``)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Example"))
