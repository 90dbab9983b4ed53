"""The `imap:` section's `move_lock_wait` (how long a write refused by a move's lock waits) and
`failover_wait` (how long an APPEND with no answer is sent again)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dag_common.config_imap import ImapFrontSettings
from imap_front.node_api import FAILOVER_WAIT, MOVE_LOCK_WAIT


def test_move_lock_wait_is_config_with_the_old_constant_as_its_default():
    assert ImapFrontSettings().move_lock_wait == MOVE_LOCK_WAIT == 60.0
    assert ImapFrontSettings(move_lock_wait=5).move_lock_wait == 5.0


@pytest.mark.parametrize("bad", [0, -1, 3601, "soon"])
def test_a_bad_move_lock_wait_is_refused_naming_the_field(bad):
    with pytest.raises(ValidationError, match="move_lock_wait"):
        ImapFrontSettings(move_lock_wait=bad)


def test_failover_wait_is_config_with_the_constant_as_its_default():
    assert ImapFrontSettings().failover_wait == FAILOVER_WAIT == 60.0
    with pytest.raises(ValidationError, match="failover_wait"):
        ImapFrontSettings(failover_wait=0)
