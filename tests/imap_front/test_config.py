"""The `imap:` section's `move_lock_wait`: how long a write refused by a move's lock waits."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dag_common.config_imap import ImapFrontSettings
from imap_front.node_api import MOVE_LOCK_WAIT


def test_move_lock_wait_is_config_with_the_old_constant_as_its_default():
    assert ImapFrontSettings().move_lock_wait == MOVE_LOCK_WAIT == 60.0
    assert ImapFrontSettings(move_lock_wait=5).move_lock_wait == 5.0


@pytest.mark.parametrize("bad", [0, -1, 3601, "soon"])
def test_a_bad_move_lock_wait_is_refused_naming_the_field(bad):
    with pytest.raises(ValidationError, match="move_lock_wait"):
        ImapFrontSettings(move_lock_wait=bad)
