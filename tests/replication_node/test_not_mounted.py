"""What an active copy that is not mounted answers: a mount under way is a 409 a client
follows (NotActive), a failure or an operator's dismount a 503 with why (LogStreamStopped).

Ten switchovers under load (test_move_failover_e2e) once caught the new active of a
switchover opening its files: its 503 "not mounted" stalled the move for the seed's 30 s.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from replication_node.errors import LogStreamStopped, NotActive
from replication_node.http.context import not_dismounted


def instance(**state):
    fields = {"copy": None, "mounting": False, "dismounted_by_operator": False, "error": None}
    return SimpleNamespace(**{**fields, **state})


def test_a_copy_being_mounted_is_asked_again_not_reported_down():
    with pytest.raises(NotActive, match="DB2 is being mounted on mbx2; ask again shortly"):
        not_dismounted(instance(mounting=True), "DB2", "mbx2")


@pytest.mark.parametrize(
    ("state", "why"),
    [
        ({"error": "dismounted: disk full"}, "DB2 on mbx2 is dismounted: disk full"),
        ({"dismounted_by_operator": True}, "DB2 on mbx2 is dismounted by an operator"),
        ({}, "DB2 on mbx2 is not mounted"),
    ],
)
def test_a_copy_down_is_a_503_with_why(state, why):
    with pytest.raises(LogStreamStopped, match=why):
        not_dismounted(instance(**state), "DB2", "mbx2")


def test_a_mounted_copy_or_none_here_passes():
    not_dismounted(instance(copy=object()), "DB2", "mbx2")
    not_dismounted(None, "DB2", "mbx2")
