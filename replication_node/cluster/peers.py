"""What a node asks of a database's nodes over HTTP while it moves the active role or
follows the copies: each node's status, every copy's report, an admin call, a reconcile,
whether a copy waits for this node's last logs, and every other copy's progress (for the
active's truncation).

`Peers` is what activation, switchover and the failover monitor ask of the other nodes,
as a protocol over plain values (tests pass a fake); `HttpPeers` asks them over aiohttp.

A node that does not answer counts as unreachable (None, or a value saying the call
failed), never as an error: the callers decide what an unreachable node means.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from dag_common.config import ClusterConfig
from dag_common.model import CopyRole, CopyStatusReport, NodeStatus
from dag_common.node_status import StatusUnavailable, fetch_node_status, post_admin
from replication_node.admin_api import BlockBufferAnswer, LastLogsAnswer, QuiesceAnswer
from replication_node.log.truncation import CopyProgress

logger = logging.getLogger(__name__)
A = TypeVar("A", bound=BaseModel)  # a take-over call's answer


# Between nodes, a status is answered from memory at once: a node that takes longer is hung
# (a stopped process, a hung disk) and counts as unreachable, so that a failover is not held up
# by calls waiting for a general timeout.
PEER_STATUS_TIMEOUT = 2.0

# Copying the last logs or keeping a block-mode buffer copies and inspects files first.
TAKE_OVER_CALL_TIMEOUT = 45.0


@dataclass(frozen=True, slots=True)
class LastLogsCopied:
    """What the copy taking over answered when asked to copy the old active's last logs
    (Attempt Copy Last Logs)."""

    failure: str | None = None  # "HTTP 409: why" when it could not (nothing else is set)
    source: str | None = None  # the node they were copied from
    closed_through: int | None = None  # every closed generation through this one
    open_log_generation: int | None = None  # the open log kept as this generation (None: empty)


@dataclass(frozen=True, slots=True)
class BlockBufferKept:
    """What the copy taking over answered when asked to keep its block-mode buffer."""

    failure: str | None = None  # "HTTP 409: why" when it could not (nothing else is set)
    generation: int | None = None  # kept as this generation (None: it held no transaction)
    kept_through: int | None = None  # through this byte of it


class Peers(Protocol):
    """What moving the active role asks of the nodes holding copies of a database."""

    async def copy_report(self, node: str, database: str) -> CopyStatusReport | None:
        """The copy of `database` on `node` as its node reports it now (None: no answer,
        or no such copy there)."""
        ...

    async def copy_reports(self, database: str) -> dict[str, CopyStatusReport | None]:
        """Every copy of `database` as its node reports it now, by node (None: no answer)."""
        ...

    async def quiesce(self, node: str, database: str, target: str) -> int | None:
        """Ask the active on `node` to stop taking writes and close its open log for a
        switchover to `target`: the last generation it closed (None: it did not)."""
        ...

    async def unquiesce(self, node: str, database: str) -> None:
        """Tell the active on `node` to take writes again (a switchover abandoned)."""
        ...

    async def copy_last_logs(self, node: str, database: str) -> LastLogsCopied:
        """Ask the copy on `node`, taking over, to copy the old active's last logs (Attempt
        Copy Last Logs)."""
        ...

    async def keep_block_buffer(self, node: str, database: str) -> BlockBufferKept:
        """Ask the copy on `node`, taking over, to keep its block-mode buffer as a
        generation of its own."""
        ...

    async def reconcile_all(self, database: str) -> None:
        """Ask every node of `database` to re-read who is active now (a node that cannot be
        told learns it at its next config refresh)."""
        ...


def copy_in(status: NodeStatus | None, database: str) -> CopyStatusReport | None:
    """The report of `database`'s copy in a node's status (None: no status, or no copy)."""
    if status is None:
        return None
    return next((c for c in status.copies if c.database == database), None)


async def copy_awaiting_logs(peers: Peers, database: str, me: str) -> str | None:
    """The node of a copy of `database` that waits for the last logs of the node `me` to
    mount without a loss (asked when `me` comes back after a crash), if any answers."""
    reports = await peers.copy_reports(database)
    for node, report in reports.items():
        if node != me and report and report.awaiting_last_logs_from == me:
            return node
    return None


async def node_status(session: aiohttp.ClientSession, url: str, token: str) -> NodeStatus | None:
    """The node's status, or None if it cannot be had in PEER_STATUS_TIMEOUT seconds (it
    counts as unreachable)."""
    try:
        return await fetch_node_status(session, url, token, timeout=PEER_STATUS_TIMEOUT)
    except StatusUnavailable:
        return None


@dataclass(frozen=True, kw_only=True, eq=False)
class HttpPeers:
    """`Peers` over the nodes' HTTP API, with the running config (it is reloaded) saying
    where each node is."""

    session: aiohttp.ClientSession
    token: str = field(repr=False)
    config: Callable[[], ClusterConfig]

    def _db_url(self, node: str, database: str) -> str:
        return f"{self.config().node(node).url}/v1/databases/{database}"

    async def copy_report(self, node: str, database: str) -> CopyStatusReport | None:
        url = self.config().node(node).url
        return copy_in(await node_status(self.session, url, self.token), database)

    async def copy_reports(self, database: str) -> dict[str, CopyStatusReport | None]:
        nodes = [c.node for c in self.config().database(database).copies]
        reports = await asyncio.gather(*(self.copy_report(n, database) for n in nodes))
        return dict(zip(nodes, reports, strict=True))

    async def quiesce(self, node: str, database: str, target: str) -> int | None:
        url = f"{self._db_url(node, database)}/quiesce"
        answer = await self._post(url, QuiesceAnswer, {"target": target})
        return None if answer is None else answer.last_log_generated

    async def unquiesce(self, node: str, database: str) -> None:
        await self._post(f"{self._db_url(node, database)}/unquiesce")

    async def copy_last_logs(self, node: str, database: str) -> LastLogsCopied:
        copied = await self._take_over(node, database, "copy-last-logs", LastLogsAnswer)
        if isinstance(copied, str):
            return LastLogsCopied(failure=copied)
        return LastLogsCopied(
            source=copied.source,
            closed_through=copied.closed_through,
            open_log_generation=copied.open_log.generation if copied.open_log else None,
        )

    async def keep_block_buffer(self, node: str, database: str) -> BlockBufferKept:
        answer = await self._take_over(node, database, "keep-block-buffer", BlockBufferAnswer)
        if isinstance(answer, str):
            return BlockBufferKept(failure=answer)
        if answer.kept is None:
            return BlockBufferKept()
        return BlockBufferKept(
            generation=answer.kept.generation, kept_through=answer.kept.kept_through
        )

    async def _take_over(self, node: str, database: str, action: str, model: type[A]) -> A | str:
        """A call the copy taking over is asked (`action` on its database): its answer as
        `model`, or why not ("HTTP 409: …", or a malformed answer) as a sentence."""
        status, answer = await post_admin(
            self.session,
            f"{self._db_url(node, database)}/{action}",
            self.token,
            timeout=TAKE_OVER_CALL_TIMEOUT,
        )
        if status != 200:
            return f"HTTP {status}: {answer.get('error')}"
        try:
            return model.model_validate(answer)
        except ValidationError as exc:
            return f"a malformed answer ({exc.error_count()} errors)"

    async def reconcile_all(self, database: str) -> None:
        config = self.config()
        urls = [config.node(c.node).url for c in config.database(database).copies]
        await asyncio.gather(*(self._post(f"{url}/v1/reconcile") for url in urls))

    async def _post(
        self, url: str, model: type[A] | None = None, body: dict[str, object] | None = None
    ) -> A | None:
        """POST an admin call; its answer as `model` (None: no model asked for), or None if
        the node cannot be reached, refuses, or answers what is not one (said in the log)."""
        code, answer = await post_admin(self.session, url, self.token, body)
        if code >= 300:
            logger.warning("POST %s: HTTP %d %s", url, code, str(answer.get("error"))[:300])
            return None
        if model is None:
            return None
        try:
            return model.model_validate(answer)
        except ValidationError as exc:
            logger.warning("POST %s: a malformed answer (%d errors)", url, exc.error_count())
            return None


@dataclass(frozen=True, kw_only=True, eq=False)
class PeerProgress:
    """What every other copy of a database has inspected and replayed, for the active's
    truncation: asked now; a copy that cannot be reached counts with what it was last known
    to have (0 if never)."""

    node: str
    session: aiohttp.ClientSession
    token: str = field(repr=False)
    config: Callable[[], ClusterConfig]  # the running config (it is reloaded)
    # Last progress heard from each passive copy: (database, node) -> CopyProgress.
    _known: dict[tuple[str, str], CopyProgress] = field(default_factory=dict, init=False)

    async def of(self, database: str) -> list[CopyProgress]:
        """The progress of every copy of `database` but this node's."""
        config = self.config()
        db = config.database(database)

        async def ask(node: str, lag: timedelta) -> CopyProgress:
            status = await node_status(self.session, config.node(node).url, self.token)
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

        others = [c for c in db.copies if c.node != self.node]
        return list(await asyncio.gather(*(ask(c.node, c.replay_lag_time) for c in others)))
