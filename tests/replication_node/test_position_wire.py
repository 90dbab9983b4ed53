"""Records that now hold a `Position` keep their wire format: bytes written before it (by
the code that had plain generation and offset fields) read back and write out the same."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dag_common.model import Position
from replication_node.admin_api import BackupStamp
from replication_node.shipping.frames import Frame, FrameKind, decode_frame, encode_frame

# `POST .../backups/{id}/end`'s answer as it was written with `StampAt` (generation, offset).
OLD_STAMP = (
    b'{"backup_id":"b1","kind":"Full","generation":7,'
    b'"stamp_lsn":{"generation":8,"offset":4096},"header":{"signature":"x"}}'
)


def test_a_backup_stamp_of_before_reads_and_writes_the_same_bytes():
    stamp = BackupStamp.model_validate_json(OLD_STAMP)
    assert stamp.stamp_lsn == Position(8, 4096) and isinstance(stamp.stamp_lsn, Position)
    assert stamp.model_dump_json().encode() == OLD_STAMP
    assert stamp.model_dump()["stamp_lsn"] == {"generation": 8, "offset": 4096}


def test_a_backup_stamp_with_a_bad_position_is_refused():
    with pytest.raises(ValidationError, match="stamp_lsn"):
        BackupStamp.model_validate_json(OLD_STAMP.replace(b'"offset":4096', b'"offset":"x"'))


def test_an_ack_frame_reads_its_position_from_the_header_unchanged():
    old = bytes.fromhex("05" + "0000000000000003" + "0000000000001000" + "00000000" + "00000000")
    frame = decode_frame(old)
    assert frame.kind is FrameKind.ACK and frame.position == Position(3, 4096)
    assert encode_frame(Frame(FrameKind.ACK, *frame.position)) == old
