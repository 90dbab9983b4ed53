"""Log inspection (pure): the seeds' checks of a copied generation before it may be replayed.

- physical integrity: the header checksum and every record's CRC32C, and the file ends with
  its CLOSE record (a truncated transfer fails here);
- header: the generation in the header equals the one in the file name, and is not higher
  than the highest generation the active has announced;
- identity: the log and database signatures are this copy's;
- sequence: the header's previous-generation creation time is the predecessor's creation time;
- staged bodies (`log/spanning.py`): every part continues its body with the next index, a
  commit names pending bodies at the size and CRC32C their parts add up to, and the
  generation carries exactly what its predecessor left pending (when that one is known);
- Exx.log: an E00.log left from when this copy was active (set aside in E00OutofDate) must be
  a prefix of the closed generation that replaces it, and a closed generation it wrote then
  (above its database's waypoint, set aside too) must equal the active's; if not, the
  streams diverged there (`Diverged`, which the copier answers with an incremental reseed:
  those logs were never in the database file, LLR kept them out).

A failed check raises `InspectionFailed` (the copier recopies, up to its limit).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from replication_node.errors import Diverged, InspectionFailed, LogFormatError
from replication_node.log.logfile import LogHeader, chain_problem, verify_closed
from replication_node.log.spanning import Pending, track


@dataclass(frozen=True, slots=True)
class OutOfDateLog:
    """A log this copy wrote when it was active: its generation and valid bytes; `whole` for
    a closed generation (must equal the active's), else an E00.log (must be a prefix)."""

    generation: int
    data: bytes
    whole: bool = False


@dataclass(frozen=True, slots=True)
class InspectedLog:
    """A generation that passed inspection."""

    generation: int
    header: LogHeader
    close_time: datetime
    size: int
    pending: Pending  # the staged bodies it leaves pending


def inspect_generation(
    data: bytes,
    *,
    generation: int,
    log_signature: uuid.UUID,
    database_signature: uuid.UUID,
    prev: LogHeader | None,
    highest_known: int,
    out_of_date: OutOfDateLog | None = None,
    prev_pending: Pending | None = None,
) -> InspectedLog:
    """Check one copied generation; InspectionFailed (or CopyFailed) says what is wrong."""
    if generation > highest_known:
        raise InspectionFailed(
            f"generation {generation} is higher than the highest generation known ({highest_known})"
        )
    try:
        result = verify_closed(data, generation)
    except LogFormatError as exc:
        text = str(exc)
        raise InspectionFailed(
            text if text.startswith("generation") else f"generation {generation}: {text}"
        ) from exc
    header = result.header
    if header.database_signature != database_signature:
        raise InspectionFailed(
            f"generation {generation} belongs to database {header.database_signature}, "
            f"not {database_signature}"
        )
    problem = chain_problem(prev, header, log_signature)
    if problem:
        raise InspectionFailed(problem)
    try:
        spans = track(result, prev_pending)
    except LogFormatError as exc:
        raise InspectionFailed(f"generation {generation}: {exc}") from exc
    if out_of_date is not None and out_of_date.generation == generation:
        if out_of_date.whole and data != out_of_date.data:
            raise Diverged(
                generation,
                f"generation {generation} as this copy wrote it when it was active differs "
                "from the active's",
            )
        if not out_of_date.whole and not data.startswith(out_of_date.data):
            raise Diverged(
                generation,
                f"the E00.log this copy kept from when it was active (generation {generation})"
                " is not a prefix of the active's closed generation",
            )
    assert result.close_time is not None  # verify_closed insists on the CLOSE record
    return InspectedLog(generation, header, result.close_time, len(data), spans.pending)
