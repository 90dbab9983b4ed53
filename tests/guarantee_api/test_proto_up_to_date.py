"""The checked-in stubs match the .proto: a stale stub fails CI."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2

from dag_common import codegen
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2, data_guarantee_pb2_grpc


def _drop_json_names(file: descriptor_pb2.FileDescriptorProto) -> None:
    def walk(message: descriptor_pb2.DescriptorProto) -> None:
        for f in message.field:
            f.ClearField("json_name")
        for nested in message.nested_type:
            walk(nested)

    for message in file.message_type:
        walk(message)


def test_message_stubs_match_the_proto(tmp_path: Path):
    fresh = descriptor_pb2.FileDescriptorSet.FromString(codegen.descriptor_set(tmp_path / "d.pb"))
    [compiled] = [f for f in fresh.file if f.name == codegen.PROTO_FILE]
    _drop_json_names(compiled)  # protoc fills them in; the Python stub leaves them out
    checked_in = descriptor_pb2.FileDescriptorProto.FromString(
        data_guarantee_pb2.DESCRIPTOR.serialized_pb
    )
    assert checked_in == compiled, "stubs are stale: run python -m dag_common.codegen"


def test_service_stubs_match_the_proto(tmp_path: Path):
    generate = codegen.generate(tmp_path)
    fresh_grpc = next(p for p in generate if p.name.endswith("_grpc.py")).read_text()
    checked_in = Path(data_guarantee_pb2_grpc.__file__).read_text()
    assert fresh_grpc == checked_in, "stubs are stale: run python -m dag_common.codegen"


def test_generated_imports_work_as_a_package():
    assert (
        "from dag_common._generated.dataguarantee.v1 import"
        in Path(data_guarantee_pb2_grpc.__file__).read_text()
    )
