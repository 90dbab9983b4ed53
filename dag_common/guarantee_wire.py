"""The LSN on the Data Guarantee's wire: `Lsn` as `pb.Lsn` and back, the one place either
end converts it (the mover's client asks with it, the service reads it into `FlushTarget`).

The field meanings are the proto's and `Lsn`'s: offset 0 names the whole generation (no
record starts there), epoch 0 an LSN answered by generation alone.
"""

from __future__ import annotations

from typing import Protocol

from google.protobuf.duration_pb2 import Duration

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common.model import Lsn

# Generations, offsets and epochs are signed 64-bit numbers everywhere else (SQLite, JSON
# clients): a uint64 above that is no LSN any node can have written.
MAX_LSN_FIELD = 2**63 - 1


class GuaranteeRequest(Protocol):
    """What CheckReplicationHealth's and CheckReplicationFlush's requests share, as the
    service and the client read them (the generated classes come without type stubs)."""

    database: str
    caller_id: str
    constraint: int

    @property
    def wait(self) -> Duration: ...

    def HasField(self, field_name: str) -> bool: ...


def lsn_to_pb(lsn: Lsn) -> pb.Lsn:
    """The LSN as CheckReplicationFlush carries it."""
    return pb.Lsn(generation=lsn.generation, offset=lsn.offset, epoch=lsn.epoch)


def lsn_from_pb(message: pb.Lsn) -> Lsn:
    """The LSN a request names; ValueError naming the field that no node can have written."""
    if not 1 <= message.generation <= MAX_LSN_FIELD:
        raise ValueError(f"lsn.generation must be within 1..{MAX_LSN_FIELD}")
    for name, value in (("offset", message.offset), ("epoch", message.epoch)):
        if value > MAX_LSN_FIELD:
            raise ValueError(f"lsn.{name} must be within 0..{MAX_LSN_FIELD}")
    return Lsn(generation=message.generation, offset=message.offset, epoch=message.epoch)
