"""What every route of the node's HTTP API needs: the node it serves (`NodeApi`, under the
app key `NODE`), and the request turned into what a handler acts on: its JSON body (read
within its limit: `body.py`), its flags, the mailbox it names, the active instance or the
reader it addresses.

A request that addresses what is not here raises the domain error that says so (NotFound,
NotActive, a dismounted copy's LogStreamStopped); `error_middleware.py` answers it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from aiohttp import web

from dag_common.api_types import NAME_PATTERN
from dag_common.clock import Clock
from dag_common.cluster_store.interface import ClusterStore
from dag_common.config import ClusterConfig
from dag_common.echo import quoted
from dag_common.http_body import SMALL_BODY, BodyLimit, body_text, parse_json, read_body
from dag_common.json_object import JsonObject
from dag_common.memory import MemoryBudget
from dag_common.model import AutoDatabaseMountDial, CopyStatusReport, NodeStatus
from dag_common.store_api import ACTIVE_ONLY_HEADER
from replication_node.admin_api import (
    ActivationAnswer,
    BlockBufferAnswer,
    CopyOrder,
    LastLogsAnswer,
    SwitchoverAnswer,
)
from replication_node.backup.backup import BackupAnswer
from replication_node.errors import BadRequest, LogStreamStopped, NotActive, NotFound
from replication_node.interfaces import ActiveHostedCopy, HostedCopy, MailboxWriter, MountedCopy
from replication_node.storage.reader import MailboxReader


class NodeApi(Protocol):
    """What the routes need of a node (replication_node.node.Node): its copies, its status,
    and the operations an admin call starts."""

    name: str
    config: ClusterConfig
    unexpected_errors: int  # the API's 500s, counted for the metrics
    memory: MemoryBudget  # bytes of request bodies in flight
    cluster_store: ClusterStore  # the mailbox directory, among what it keeps

    @property
    def clock(self) -> Clock: ...

    def instance(self, database: str) -> HostedCopy | None: ...

    def active_here(self, database: str) -> ActiveHostedCopy | None: ...

    def active_of(self, database: str) -> tuple[str | None, str | None]: ...

    def epoch_of(self, database: str) -> int: ...

    def reader(self, database: str) -> MailboxReader | None: ...

    def status(self) -> NodeStatus: ...

    async def reconcile(self) -> None: ...

    async def copy_action(self, database: str, order: CopyOrder) -> CopyStatusReport: ...

    async def activate(
        self, database: str, target: str, dial_override: AutoDatabaseMountDial | None
    ) -> ActivationAnswer: ...

    async def switchover(self, database: str, target: str) -> SwitchoverAnswer: ...

    async def copy_last_logs(self, database: str) -> LastLogsAnswer: ...

    async def keep_block_buffer(self, database: str) -> BlockBufferAnswer: ...

    async def backup(self, database: str, to: Path, *, incremental: bool) -> BackupAnswer: ...


NODE: web.AppKey[NodeApi] = web.AppKey("node")


def node_of(request: web.Request) -> NodeApi:
    """The node the request's app serves (what a handler asks of it goes through here)."""
    return request.app[NODE]


_NAME = re.compile(NAME_PATTERN)


async def json_body(request: web.Request, limit: BodyLimit = SMALL_BODY) -> JsonObject:
    """The request's JSON object ({} without a body), read within `limit`; BadRequest if it
    is not one, RequestTooLarge (413) past the limit (`body.py`)."""
    if not request.can_read_body:
        return {}
    # The bytes are dropped once decoded: an item's bytes and text, then its text and the
    # parsed item, never all three (`body.py`).
    data = parse_json(body_text(await read_body(request, limit)))
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def flag(request: web.Request, name: str) -> bool:
    """Whether the query flag `name` is set (1, true, yes)."""
    return request.query.get(name, "").lower() in ("1", "true", "yes")


def active_for_write(request: web.Request) -> ActiveHostedCopy:
    """The mounted active instance the request writes to; NotActive if it is elsewhere or
    being switched over."""
    node = node_of(request)
    db = request.match_info["db"]
    if node.instance(db) is None:
        if any(d.name == db for d in node.config.databases_on(node.name)):
            # Its role is changing (an active stopping to follow a new one, or starting).
            raise NotActive(
                f"the copy of {db} on {node.name} is changing role; write to the active"
            )
        raise NotFound(f"no copy of database {quoted(db)} on node {node.name}")
    instance = node.active_here(db)
    not_dismounted(instance, db, node.name)
    if instance is None or instance.store is None:
        raise NotActive(f"the copy of {db} on {node.name} is passive; write to the active copy")
    if instance.switching_to is not None:
        raise NotActive(f"{db} is being switched over to {instance.switching_to}; write there")
    return instance


def store_of(instance: ActiveHostedCopy) -> MailboxWriter:
    """The mailbox store of an instance `active_for_write` returned (NotActive should it have
    been dismounted since)."""
    if instance.store is None:
        raise NotActive(f"the copy of {instance.database} is not mounted; write to the active")
    return instance.store


def store_for_write(request: web.Request) -> MailboxWriter:
    """The mailbox store of the mounted active instance the request writes to."""
    return store_of(active_for_write(request))


def mounted_copy(instance: ActiveHostedCopy) -> MountedCopy:
    """The mounted copy of an instance `active_for_write` returned."""
    if instance.copy is None:
        raise NotActive(f"the copy of {instance.database} is not mounted; write to the active")
    return instance.copy


def not_dismounted(instance: ActiveHostedCopy | None, db: str, node: str) -> None:
    """An active copy that is dismounted (a failure, or an operator) answers 503 with why:
    it is still the active, nothing else serves this database here, and the call may work
    again after a re-mount or a failover.  One being mounted (the new active of a
    switchover opening its files) answers 409 naming the active, which a client follows
    for a while as it follows a switchover: a 503 there stalled a move for the seed's 30 s
    (test_move_failover_e2e, ten switchovers under load)."""
    if instance is not None and instance.copy is None:
        if instance.mounting:
            raise NotActive(f"{db} is being mounted on {node}; ask again shortly")
        if instance.dismounted_by_operator:
            why = "dismounted by an operator (replication-node db mount re-mounts it)"
        else:
            why = instance.error or "not mounted"
        raise LogStreamStopped(f"{db} on {node} is {why}")


def reader_for(request: web.Request) -> MailboxReader:
    """What answers a read of the request's database on this node: its copy, active or
    passive; only the mounted active when the caller asks so (`ACTIVE_ONLY_HEADER`: a
    client that follows the active and has seen what it holds, which a passive's replay,
    a roll interval or a suspension behind, may not hold yet)."""
    node = node_of(request)
    db = request.match_info["db"]
    active = node.active_here(db)
    not_dismounted(active, db, node.name)
    if active is None and node.instance(db) is not None and request.headers.get(
        ACTIVE_ONLY_HEADER
    ) == "1":  # fmt: skip
        raise NotActive(f"the copy of {db} on {node.name} is passive; read from the active")
    reader = node.reader(db)
    if reader is None:
        if any(d.name == db for d in node.config.databases_on(node.name)):
            # Its role is changing (a switchover's old active becoming passive, a new one
            # mounting), or it is being seeded, or failed (it may hold diverged data): a 409
            # naming the active, which a client follows as it follows a write's, rather than
            # a 404 it must take for an answer.
            raise NotActive(
                f"the copy of {db} on {node.name} serves no reads now (changing role, being "
                "seeded or checked, or failed); read from the active"
            )
        raise NotFound(f"no readable copy of database {quoted(db)} on node {node.name}")
    return reader


def epoch_for(request: web.Request) -> int:
    """The stream incarnation of the copy that answers a read (0: not known yet)."""
    return node_of(request).epoch_of(request.match_info["db"])


def mailbox_name(request: web.Request) -> str:
    """The mailbox the path names, checked against the name pattern."""
    name = request.match_info["mailbox"]
    if not _NAME.match(name):
        raise BadRequest(f"invalid mailbox name {quoted(name)}")
    return name


def active_here(request: web.Request) -> ActiveHostedCopy:
    """This node's active instance of the request's database, mounted or not."""
    node = node_of(request)
    db = request.match_info["db"]
    instance = node.active_here(db)
    if instance is None:
        raise NotFound(f"the active copy of {db} is not on {node.name}")
    return instance
