"""Server reflection in both versions clients ask for: `grpc.reflection.v1`, which grpcurl
and `buf curl --reflect-protocol grpc-v1` use, and `grpc.reflection.v1alpha`, which older
clients use.

grpcio-reflection serves v1alpha only.  v1 is the same protocol under a new package: the
same messages, field for field, so the same bytes on the wire.  So one servicer answers
both, grpcio-reflection's own: v1alpha as that package registers it, and v1 as a second
route to it.  For reflection to describe v1 itself (a client asks for the file of every
service it lists), v1's file descriptor, v1alpha's renamed, is added to the default pool.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as alpha
from grpc_reflection.v1alpha import reflection_pb2_grpc as alpha_grpc

V1ALPHA = reflection.SERVICE_NAME  # grpc.reflection.v1alpha.ServerReflection
V1_PACKAGE = "grpc.reflection.v1"
V1 = f"{V1_PACKAGE}.ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """v1's file descriptor: v1alpha's, under v1's package and file name."""
    proto = descriptor_pb2.FileDescriptorProto()
    alpha.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{alpha.DESCRIPTOR.package}.", f".{V1_PACKAGE}."
    proto.name, proto.package = V1_FILE, V1_PACKAGE
    proto.ClearField("options")  # v1alpha's say "deprecated" and name its Java/Go packages
    for message in proto.message_type:
        for field in message.field:
            if field.type_name:  # set only where it names a message (setting "" marks it set)
                field.type_name = field.type_name.replace(old, new)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    return proto


def _register_v1() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)  # registered already (here, or by a library)
    except KeyError:
        pool.AddSerializedFile(_v1_file().SerializeToString())


def enable(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serve reflection v1 and v1alpha on `server`, listing `service_names` and both."""
    _register_v1()
    servicer = reflection.aio.ReflectionServicer((*service_names, V1, V1ALPHA))
    alpha_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    info = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=alpha.ServerReflectionRequest.FromString,
        response_serializer=alpha.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1, {"ServerReflectionInfo": info}),)
    )
