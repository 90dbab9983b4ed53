"""Which epoch's stream still holds a write (pure)."""

from __future__ import annotations

import pytest

from dag_common.incarnation import EpochRecord, fork_below
from dag_common.model import Lsn

HISTORY = [
    EpochRecord("DB1", 1, "mbx1", 1),
    EpochRecord("DB1", 2, "mbx2", 15),  # a lossy failover: generations 15.. of epoch 1 lost
    EpochRecord("DB1", 3, "mbx3", 30, kept_through=4096),  # kept 29 through byte 4096
]


@pytest.mark.parametrize(
    ("epoch", "generation", "offset", "lost_with"),
    [
        (1, 14, 600, None),  # below the fork: inherited
        (1, 15, 600, 2),  # at the fork: lost
        (2, 28, 900, None),
        (2, 29, 512, None),  # inside the kept prefix of generation 29
        (2, 29, 4000, None),
        (2, 29, 4096, 3),  # at or past the kept end: lost with epoch 3
        (2, 29, 0, 3),  # the whole generation (an offset not given): the safe side
        (2, 30, 512, 3),
        (3, 40, 512, None),  # the current epoch's own writes
    ],
)
def test_a_write_survives_only_what_every_later_epoch_kept(epoch, generation, offset, lost_with):
    fork = fork_below(HISTORY, Lsn(generation=generation, offset=offset, epoch=epoch))
    assert (fork.epoch if fork else None) == lost_with
