"""Stepping down: the active switches its database over to a healthy copy by itself, when it
cannot go on holding the role (a damaged generation of its LLR window that no copy could give
it whole: `active/log_mend.py`).  The switchover is the operator's (`switchover.py`): the
target must have replayed every generation the active closed, so nothing acknowledged is
lost; the copies are tried in their activation preference's order.
"""

from __future__ import annotations

import logging
from operator import attrgetter

from dag_common.config import ClusterConfig
from dag_common.errors import DagError
from replication_node.cluster.switchover import Switchover
from replication_node.errors import Conflict

logger = logging.getLogger(__name__)


async def step_down(switchover: Switchover, config: ClusterConfig, database: str, node: str) -> str:
    """Switch `database` over from `node` to the first copy that takes it; its node, or
    Conflict naming why each copy did not."""
    refused = []
    copies = sorted(config.database(database).copies, key=attrgetter("activation_preference"))
    for copy in copies:
        if copy.node == node:
            continue
        try:
            answer = await switchover.switch(database, copy.node)
        except DagError as exc:  # refused, the store busy, a copy unreachable
            refused.append(f"{copy.node}: {exc}")
            continue
        logger.warning("%s: stepped down from %s to %s", database, node, answer.node)
        return answer.node
    raise Conflict("; ".join(refused) or f"{database} has no other copy")
