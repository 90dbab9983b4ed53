"""The inspector's checks on real generations written by a real log stream."""

from __future__ import annotations

import uuid

import pytest

from replication_node.errors import Diverged, InspectionFailed
from replication_node.log import logfile
from replication_node.log.inspector import OutOfDateLog, inspect_generation
from replication_node.log.operations import PutItem
from tests.replication_node.helpers import mount


def put(i):
    return [PutItem("m", i + 1, f"i{i}", "Inbox", "", "x" * 300)]


@pytest.fixture
async def stream(tmp_path):
    """Three closed generations; returns (copy, {generation: bytes})."""
    copy = await mount(tmp_path)
    for gen_items in range(3):
        for i in range(5):
            await copy.commit(put(gen_items * 10 + i))
        await copy.roll()
    files = {g: (copy.paths.logs / logfile.closed_log_name(g)).read_bytes() for g in range(1, 4)}
    yield copy, files
    await copy.crash_close()


def check(copy, data, generation, prev=None, highest=10, **kw):
    header = copy.header
    return inspect_generation(
        data,
        generation=generation,
        log_signature=kw.pop("log_signature", header.log_signature),
        database_signature=kw.pop("database_signature", header.database_signature),
        prev=prev,
        highest_known=highest,
        **kw,
    )


async def test_a_whole_generation_passes_and_chains(stream):
    copy, files = stream
    first = check(copy, files[1], 1)
    second = check(copy, files[2], 2, prev=first.header)
    assert second.generation == 2 and second.size == len(files[2])
    assert second.close_time >= first.close_time


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "checksum"),
        (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "checksum"),
        (
            lambda d: d[: len(d) // 2] + bytes([d[len(d) // 2] ^ 1]) + d[len(d) // 2 + 1 :],
            "checksum",
        ),
        (lambda d: d[:-5], "cut short"),
        (lambda d: d[:-17], "CLOSE"),
        (lambda d: b"", "too short"),
    ],
    ids=[
        "header bit",
        "header padding bit",
        "record bit",
        "cut inside the CLOSE record",
        "CLOSE record gone",
        "empty",
    ],
)
async def test_damaged_files_fail(stream, mangle, message):
    copy, files = stream
    with pytest.raises(InspectionFailed, match=message):
        check(copy, mangle(files[2]), 2)


async def test_header_and_identity_checks(stream):
    copy, files = stream
    with pytest.raises(InspectionFailed, match="file name says 3"):
        check(copy, files[2], 3)
    with pytest.raises(InspectionFailed, match="higher than the highest generation known"):
        check(copy, files[3], 3, highest=2)
    with pytest.raises(InspectionFailed, match="belongs to log stream"):
        check(copy, files[2], 2, log_signature=uuid.uuid4())
    with pytest.raises(InspectionFailed, match="belongs to database"):
        check(copy, files[2], 2, database_signature=uuid.uuid4())


async def test_a_generation_that_does_not_chain_fails(stream):
    copy, files = stream
    first = check(copy, files[1], 1)
    with pytest.raises(InspectionFailed, match="does not follow generation 1"):
        check(copy, files[3], 3, prev=first.header)
    second = check(copy, files[2], 2, prev=first.header)
    forged = logfile.LogHeader.decode(files[3])
    with pytest.raises(InspectionFailed, match="does not chain"):
        check(
            copy,
            files[3],
            3,
            prev=type(second.header)(
                **{
                    **{f: getattr(second.header, f) for f in second.header.__slots__},
                    "creation_time": forged.creation_time,
                }
            ),
        )


async def test_out_of_date_e00_must_be_a_prefix(stream):
    copy, files = stream
    data = files[2]
    result = logfile.scan(data)
    prefix = data[: result.records[2].offset]
    assert check(copy, data, 2, out_of_date=OutOfDateLog(2, prefix)).generation == 2
    diverged = prefix[:-1] + bytes([prefix[-1] ^ 1])
    with pytest.raises(Diverged, match="not a prefix"):
        check(copy, data, 2, out_of_date=OutOfDateLog(2, diverged))
    # a closed generation this copy wrote as active must equal the active's, byte for byte
    assert check(copy, data, 2, out_of_date=OutOfDateLog(2, data, whole=True)).generation == 2
    with pytest.raises(Diverged, match="differs from the active's"):
        check(copy, data, 2, out_of_date=OutOfDateLog(2, prefix, whole=True))
    # an E00.log of another generation does not concern this one
    assert check(copy, data, 2, out_of_date=OutOfDateLog(3, diverged)).generation == 2
