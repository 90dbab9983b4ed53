import uuid
from datetime import UTC, datetime, timedelta

import pytest

from replication_node.errors import LogHeaderError, LogRecordError
from replication_node.log import logfile
from replication_node.log.logfile import LogHeader, RecordType

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_log(generation=3, txns=3, close=True):
    header = LogHeader(
        generation=generation,
        database_signature=uuid.uuid4(),
        log_signature=uuid.uuid4(),
        creation_time=T0,
        prev_creation_time=T0 - timedelta(minutes=1),
        log_file_size=1 << 20,
    )
    data = header.encode()
    for i in range(txns):
        when = T0 + timedelta(seconds=i)
        data += logfile.encode_transaction([{"op": "n", "i": i}], when, salt=header.salt)
    if close:
        when = T0 + timedelta(seconds=txns)
        data += logfile.encode_record(RecordType.CLOSE, when, salt=header.salt)
    return header, data


def test_closed_generation_round_trips():
    header, data = make_log()
    result = logfile.verify_closed(data, 3)
    assert result.header == header
    assert [r.ops[0]["i"] for r in result.transactions] == [0, 1, 2]
    assert result.close_time == T0 + timedelta(seconds=3)
    assert result.transactions[0].offset == logfile.HEADER_SIZE


def test_a_closed_generation_read_scans_as_its_bytes_do(tmp_path):
    """`read_closed`: the same scan as the file's bytes, records and all, kept readable
    after the file is deleted; a file cut short is refused with an error, not a signal."""
    _, data = make_log(txns=5)
    path = tmp_path / logfile.closed_log_name(3)
    path.write_bytes(data)
    result = logfile.verify_closed(logfile.read_closed(path), 3)
    path.unlink()  # what the truncator does: the records still read
    expected = logfile.verify_closed(data, 3)
    assert result.header == expected.header and result.close_time == expected.close_time
    assert [bytes(r.payload) for r in result.records] == [
        bytes(r.payload) for r in expected.records
    ]
    (tmp_path / "empty").write_bytes(b"")
    assert logfile.read_closed(tmp_path / "empty") == b""
    path.write_bytes(data[:-3])
    with pytest.raises(LogRecordError):
        logfile.verify_closed(logfile.read_closed(path), 3)


def test_names():
    assert logfile.closed_log_name(10) == "E0000000A.log"
    assert logfile.parse_closed_log_name("E0000000A.log") == 10
    for bad in ("E00.log", "E0000000a.log", "E00000000.log", "../E0000000A.log", "x.log"):
        assert logfile.parse_closed_log_name(bad) is None


def test_header_bit_flip_is_detected():
    _, data = make_log()
    broken = bytearray(data)
    broken[40] ^= 0x01
    with pytest.raises(LogHeaderError, match="checksum"):
        logfile.verify_closed(bytes(broken))


def test_not_a_log_file():
    with pytest.raises(LogHeaderError, match="magic"):
        logfile.scan(b"hello" * 200)
    with pytest.raises(LogHeaderError, match="too short"):
        logfile.scan(b"DG")


@pytest.mark.parametrize("where", [logfile.HEADER_SIZE + 2, logfile.HEADER_SIZE + 20, -3])
def test_record_bit_flip_is_detected(where):
    _, data = make_log()
    broken = bytearray(data)
    broken[where] ^= 0x40
    with pytest.raises(LogRecordError):
        logfile.verify_closed(bytes(broken))


def test_truncated_closed_generation_is_rejected():
    _, data = make_log()
    with pytest.raises(LogRecordError, match=r"cut short|torn"):
        logfile.verify_closed(data[:-5])
    _, unclosed = make_log(close=False)
    with pytest.raises(LogRecordError, match="no CLOSE"):
        logfile.verify_closed(unclosed)


def test_data_after_close_is_rejected():
    header, data = make_log()
    with pytest.raises(LogRecordError, match="after the CLOSE"):
        logfile.verify_closed(data + logfile.encode_transaction([], T0, salt=header.salt))


def test_wrong_generation_in_file_name():
    _, data = make_log(generation=3)
    with pytest.raises(LogHeaderError, match="file name says 4"):
        logfile.verify_closed(data, 4)


def test_scan_of_open_log_stops_at_torn_tail():
    header, data = make_log(close=False)
    extra = logfile.encode_transaction([{"op": "late"}], T0, salt=header.salt)
    result = logfile.scan(data + extra[:-4])
    assert len(result.records) == 3
    assert result.valid_end == len(data)
    assert "cut short" in result.tail_error
