"""Records that now hold a `Position` keep their wire format: bytes written before it (by
the code that had plain generation and offset fields) read back and write out the same."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from dag_common.model import CopyMode, CopyRole, CopyStatus, CopyStatusReport, NodeStatus, Position
from dag_common.store_api import LogPosition
from replication_node.admin_api import ActivationAnswer, BackupStamp
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


# A passive copy in block mode as its node reported it (GET /v1/status) with flat
# `block_generation` and `block_offset` fields.
OLD_REPORT = (
    b'{"database":"DB2","node":"mbx3","site":"s1","role":"Passive","status":"Healthy",'
    b'"activation_preference":2,"last_log_generated":0,"last_log_copy_notified":0,'
    b'"last_log_copied":0,"last_log_inspected":8,"last_log_replayed":0,"copy_queue_length":0,'
    b'"replay_queue_length":0,"last_inspected_log_time":null,"last_replayed_log_time":null,'
    b'"replay_lag_time":"0s","truncation_lag_time":"0s","error":null,"epoch":3,'
    b'"open_commits":0,"last_scrub_time":null,"last_scrub_result":null,"held_for":null,'
    b'"awaiting_last_logs_from":null,"lease_expires_in":null,"copy_mode":"Block",'
    b'"block_followers":[],"synchronous_copies":0,"note":null,"redelivery":null,'
    b'"copy_mode_reason":null,"block_generation":9,"block_offset":4096,'
    b'"activation_suspended":false,"seed_bytes_done":null,"seed_bytes_total":null,'
    b'"last_full_backup_generation":0,"last_full_backup_time":null,'
    b'"last_incremental_backup_generation":0,"last_incremental_backup_time":null,'
    b'"backup_in_progress":null}'
)


def test_a_copy_status_report_of_before_reads_its_block_position_and_writes_the_same_bytes():
    report = CopyStatusReport.model_validate_json(OLD_REPORT)
    assert report.block == Position(9, 4096) and isinstance(report.block, Position)
    assert report.copy_mode is CopyMode.BLOCK
    assert report.model_dump_json().encode() == OLD_REPORT
    # The HTTP answer: the node's status dumped in JSON mode, then by json.dumps.
    node = NodeStatus(node="mbx3", site="s1", copies=[report])
    (copy,) = json.loads(node.model_dump_json())["copies"]
    assert copy == node.model_dump(mode="json")["copies"][0] == json.loads(OLD_REPORT)
    assert NodeStatus.model_validate_json(node.model_dump_json()) == node


def test_a_copy_status_report_is_made_from_a_position_and_defaults_to_none_held():
    made = CopyStatusReport(
        database="DB2", node="mbx3", site="s1", role=CopyRole.PASSIVE,
        status=CopyStatus.HEALTHY, activation_preference=2, last_log_inspected=8, epoch=3,
        copy_mode=CopyMode.BLOCK, block=Position(9, 4096),
    )  # fmt: skip
    assert made.model_dump_json().encode() == OLD_REPORT
    without = CopyStatusReport.model_validate_json(
        OLD_REPORT.replace(b'"block_generation":9,"block_offset":4096,', b"")
    )
    assert without.block == Position(0, 0)
    assert without.model_dump()["block_generation"] == without.model_dump()["block_offset"] == 0
    assert "block" not in made.model_dump(exclude={"block"})


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        (b'"block_offset":"x"', "block.offset"),
        (b'"block_offset":4096,"block":[1,2]', "both"),
    ],
)
def test_a_copy_status_report_with_a_bad_block_position_is_refused(bad, where):
    with pytest.raises(ValidationError, match=where):
        CopyStatusReport.model_validate_json(OLD_REPORT.replace(b'"block_offset":4096', bad))


def test_a_log_position_answer_keeps_its_flat_wire_and_names_its_durable_end():
    old = (
        b'{"database":"DB2","open_generation":9,"durable":4096,"open_records":true,'
        b'"block_followers":["mbx2","mbx3"],"passive_copies":["mbx2","mbx3"],"epoch":2}'
    )
    answer = LogPosition.model_validate_json(old)
    assert answer.durable_end == Position(9, 4096)
    assert answer.model_dump_json().encode() == old


# `POST .../activate`'s answer as it was written with `KeptOpenLogAnswer` (generation,
# through_byte): what the block-mode buffer kept of the open log.
OLD_ACTIVATION = (
    b'{"database":"DB1","node":"b","epoch":2,"previous_node":"a","cause":"ManualActivation",'
    b'"lost_logs":1,"lost_open_log":true,"lost_commits_at_least":null,'
    b'"kept_open_log":{"generation":11,"through_byte":4800},"last_logs":null,"reason":"why"}'
)


def test_an_activation_answer_of_before_reads_its_kept_open_log_as_a_position():
    answer = ActivationAnswer.model_validate_json(OLD_ACTIVATION)
    assert answer.kept_open_log == Position(11, 4800)
    assert isinstance(answer.kept_open_log, Position)
    assert answer.model_dump_json().encode() == OLD_ACTIVATION
    assert answer.model_dump(mode="json") == json.loads(OLD_ACTIVATION)
    none_kept = OLD_ACTIVATION.replace(b'{"generation":11,"through_byte":4800}', b"null")
    assert ActivationAnswer.model_validate_json(none_kept).model_dump_json().encode() == none_kept
