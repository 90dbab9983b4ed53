"""How far a new active reserves the numbers a lost tail may have shown (`lost_reservation`),
and what `ReserveLost` does to a counter near its ceiling (`storage.ops.reserved`): pure
rules, table-driven."""

from __future__ import annotations

import pytest

from replication_node.active.imap_counters import lost_reservation
from replication_node.log.operations import RESERVE_MAX
from replication_node.storage.ops import (
    MODSEQ_CEILING,
    UID_NEXT_CEILING,
    floored,
    reserved,
    reserved_folder,
)
from replication_node.storage.reader import FolderRow, ItemRow


@pytest.mark.parametrize(
    ("lost_logs", "first_mount", "ceiling", "held", "by"),
    [
        (3, True, 1_048_900, 500, 1_048_400),  # a lossy failover: the whole gap
        (0, True, 1_048_900, 500, 0),  # a switchover loses nothing, bumps nothing
        (None, True, 1_048_900, 500, 0),  # not known (a config change): as the dumpster's
        (3, False, 2_000_000, 1_048_901, 0),  # a re-mount at the same epoch: done already
        (1, True, 500, 500, 0),  # this copy holds every number handed out
        (1, True, 400, 500, 0),  # a ceiling below what it holds (an older store's)
        (1, True, 2**63, 0, RESERVE_MAX),  # past any counter: the most an operation says
    ],
)
def test_only_a_lossy_activations_first_mount_reserves_the_gap(
    lost_logs, first_mount, ceiling, held, by
):
    assert (
        lost_reservation(
            lost_logs=lost_logs, first_mount_of_epoch=first_mount, ceiling=ceiling, held=held
        )
        == by
    )


@pytest.mark.parametrize(
    ("value", "by", "ceiling", "after"),
    [
        (41, 7, UID_NEXT_CEILING, 48),
        (UID_NEXT_CEILING - 3, 7, UID_NEXT_CEILING, UID_NEXT_CEILING),  # no UID left
        (5, RESERVE_MAX, UID_NEXT_CEILING, UID_NEXT_CEILING),
        (MODSEQ_CEILING - 1, RESERVE_MAX, MODSEQ_CEILING, MODSEQ_CEILING),
        (UID_NEXT_CEILING, 1, UID_NEXT_CEILING, UID_NEXT_CEILING),
    ],
)
def test_a_reserved_counter_is_held_at_its_ceiling_and_never_lowered(value, by, ceiling, after):
    assert reserved(value, by, ceiling) == after


def test_a_folder_reserves_uids_and_modseqs_and_keeps_its_uidvalidity():
    row = FolderRow("m", "Inbox", 9, uidvalidity=1700000000, uid_next=31, highest_modseq=40)
    # its floor lifted to its new HIGHESTMODSEQ: every item is reported changed at it
    assert reserved_folder(row, 100) == row._replace(
        uid_next=131, highest_modseq=140, modseq_floor=140
    )
    # never lowered (a second reservation at the ceiling)
    top = row._replace(highest_modseq=MODSEQ_CEILING, modseq_floor=MODSEQ_CEILING)
    assert reserved_folder(top, 7).modseq_floor == MODSEQ_CEILING


@pytest.mark.parametrize(
    ("modseq", "floor", "reported"), [(3, 0, 3), (3, 140, 140), (141, 140, 141), (140, 140, 140)]
)
def test_an_item_is_reported_at_its_folders_floor_or_above(modseq, floor, reported):
    row = ItemRow("m", "a", "Inbox", "", "", 0, 1, False, "", modseq=modseq)
    assert floored(row, floor).modseq == reported
