"""What a node asks of a database's nodes over HTTP while it moves the active role or
follows the copies: each node's status, every copy's report, an admin call, a reconcile,
whether a copy waits for this node's last logs, and every other copy's progress (for the
active's truncation).

A node that does not answer counts as unreachable (None), never as an error: the callers
decide what an unreachable node means.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from dag_common.config import ClusterConfig
from dag_common.model import CopyRole, CopyStatusReport, NodeStatus
from dag_common.node_status import StatusUnavailable, fetch_node_status, post_admin
from replication_node.log.truncation import CopyProgress

logger = logging.getLogger(__name__)


# Between nodes, a status is answered from memory at once: a node that takes longer is hung
# (a stopped process, a hung disk) and counts as unreachable, so that a failover is not held up
# by calls waiting for a general timeout.
PEER_STATUS_TIMEOUT = 2.0


async def node_status(session: aiohttp.ClientSession, url: str, token: str) -> NodeStatus | None:
    """The node's status, or None if it cannot be had in PEER_STATUS_TIMEOUT seconds (it
    counts as unreachable)."""
    try:
        return await fetch_node_status(session, url, token, timeout=PEER_STATUS_TIMEOUT)
    except StatusUnavailable:
        return None


def copy_in(status: NodeStatus | None, database: str) -> CopyStatusReport | None:
    """The report of `database`'s copy in a node's status (None: no status, or no copy)."""
    if status is None:
        return None
    return next((c for c in status.copies if c.database == database), None)


async def copy_reports(
    session: aiohttp.ClientSession, config: ClusterConfig, token: str, database: str
) -> dict[str, CopyStatusReport | None]:
    """Every copy of `database` as its node reports it now (None: no answer)."""
    nodes = [c.node for c in config.database(database).copies]
    statuses = await asyncio.gather(
        *(node_status(session, config.node(n).url, token) for n in nodes)
    )
    return {n: copy_in(s, database) for n, s in zip(nodes, statuses, strict=True)}


async def post_logged(
    session: aiohttp.ClientSession, url: str, token: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """POST an admin call; its JSON answer, or None if the node cannot be reached or refuses
    (said in the log)."""
    code, answer = await post_admin(session, url, token, body)
    if code >= 300:
        logger.warning("POST %s: HTTP %d %s", url, code, str(answer.get("error"))[:300])
        return None
    return answer


async def reconcile_all(
    session: aiohttp.ClientSession, config: ClusterConfig, database: str, token: str
) -> None:
    """Ask every node of `database` to re-read who is active now; a node that cannot be told
    now learns it at its next config refresh."""
    urls = [config.node(c.node).url for c in config.database(database).copies]
    await asyncio.gather(*(post_logged(session, f"{url}/v1/reconcile", token) for url in urls))


async def copy_awaiting_logs(
    session: aiohttp.ClientSession, config: ClusterConfig, token: str, database: str, me: str
) -> str | None:
    """The node of a copy of `database` that waits for the last logs of the node `me` to
    mount without a loss (asked when `me` comes back after a crash), if any answers."""
    reports = await copy_reports(session, config, token, database)
    for node, report in reports.items():
        if node != me and report and report.awaiting_last_logs_from == me:
            return node
    return None


class PeerProgress:
    """What every other copy of a database has inspected and replayed, for the active's
    truncation: asked now; a copy that cannot be reached counts with what it was last known
    to have (0 if never)."""

    def __init__(
        self,
        *,
        node: str,
        session: aiohttp.ClientSession,
        token: str,
        config: Callable[[], ClusterConfig],
    ) -> None:
        self._node = node
        self._session = session
        self._token = token
        self._config = config  # the running config (it is reloaded)
        # Last progress heard from each passive copy: (database, node) -> CopyProgress.
        self._known: dict[tuple[str, str], CopyProgress] = {}

    async def of(self, database: str) -> list[CopyProgress]:
        """The progress of every copy of `database` but this node's."""
        config = self._config()
        db = config.database(database)

        async def ask(node: str, lag: Any) -> CopyProgress:
            status = await node_status(self._session, config.node(node).url, self._token)
            report = copy_in(status, database)
            if report is not None and report.role is CopyRole.PASSIVE:
                known = self._known[(database, node)] = CopyProgress(
                    node=node,
                    last_log_inspected=report.last_log_inspected,
                    last_log_replayed=report.last_log_replayed,
                    replay_lag_time=lag,
                    reachable=True,
                )
                return known
            # Unreachable, or claiming to be active: what it was last known to have.
            known = self._known.get((database, node))
            return CopyProgress(
                node=node,
                last_log_inspected=known.last_log_inspected if known else 0,
                last_log_replayed=known.last_log_replayed if known else 0,
                replay_lag_time=lag,
                reachable=False,
            )

        others = [c for c in db.copies if c.node != self._node]
        return list(await asyncio.gather(*(ask(c.node, c.replay_lag_time) for c in others)))
