"""One transport: its queue, its delivery loop, and what its API asks of them.

A submission is checked whole before anything is queued: every recipient must be in the
mailbox directory, and the message within each recipient database's max_item_size (a
message no database would take is refused now, with the reason, rather than poisoned
later).  A directory that cannot be read refuses the submission (503): the message is not
accepted, and its sender submits it again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from dag_common.clock import Clock
from dag_common.config import ClusterConfig
from dag_common.credentials import Credentials
from dag_common.errors import ClusterStoreError
from dag_common.memory import MemoryBudget
from transport.delivery import Deliverer
from transport.directory import CachedDirectory
from transport.mail_policy import Hop, message_fault, prepare
from transport.messages import DumpsterState, MessageIn, Queued, QueueState
from transport.metrics import TransportMetrics
from transport.queue import QueueStore, Submitted

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """A submission's answer: HTTP status and body."""

    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class Resolved:
    """A recipient found in the mailbox directory."""

    mailbox: str
    database: str
    max_item_size: int


class Transport:
    def __init__(
        self,
        *,
        config: ClusterConfig,
        name: str,
        token: str,
        store: QueueStore,
        directory: CachedDirectory,
        deliverer: Deliverer,
        clock: Clock,
        metrics: TransportMetrics,
        credentials: Callable[[], Credentials],
        memory: MemoryBudget | None = None,
    ) -> None:
        self.config = config
        # Bodies of submissions being read, within the budget the deliveries share.
        self.memory = memory or MemoryBudget(int(config.transport.memory_budget))
        self.name = name
        self.token = token
        self.credentials = credentials  # what its API accepts
        self.store = store
        self.metrics = metrics
        self._directory = directory
        self._deliverer = deliverer
        self._clock = clock

    @property
    def clock(self) -> Clock:
        return self._clock

    async def submit(self, message: MessageIn | Queued) -> Outcome:
        """Queue a message posted (as JSON, or a message as it is: `submit_message`) once
        it is checked: 201, 200 for a message id already queued, or the refusal."""
        if isinstance(message, MessageIn):
            message = Queued.of(message)
        try:
            refused = await self._check(message)
        except ClusterStoreError as exc:
            self.metrics.refused.labels("directory").inc()
            return Outcome(503, {"error": f"the mailbox directory cannot be read: {exc}; "
                                          "not accepted, submit again"})  # fmt: skip
        if refused is not None:
            self.metrics.refused.labels(refused.body.pop("reason")).inc()
            return refused
        try:
            submitted = await self.enqueue(message)
        except (sqlite3.Error, OSError) as exc:
            return Outcome(503, {"error": f"the queue cannot take it ({exc}); not accepted"})
        if not submitted.new:
            return Outcome(200, {"message_id": message.message_id, "accepted": False,
                                 "reason": "already accepted: nothing queued again"})  # fmt: skip
        recipients = [d.recipient for d in submitted.deliveries]
        return Outcome(
            201, {"message_id": message.message_id, "accepted": True, "recipients": recipients}
        )

    async def submit_message(
        self,
        raw: bytes | bytearray,
        recipients: list[str],
        folder: str,
        *,
        peer: str,
        secure: bool,
    ) -> Outcome:
        """`POST /v1/messages` of a `message/rfc822` body: checked as a DATA is, queued as
        the listeners queue it (a `Received:` header, a Message-ID if it has none)."""
        fault = message_fault(raw)
        if fault is not None:
            self.metrics.refused.labels("malformed").inc()
            return Outcome(400, {"error": f"the message: {fault.text}", "status": fault.status})
        hop = Hop(helo=peer, peer=peer, by=self.config.transport.mail.hostname or self.name,
                  protocol="HTTPS" if secure else "HTTP", when=self._clock.now().astimezone(UTC),
                  recipient=recipients[0] if len(recipients) == 1 else None)  # fmt: skip
        prepared = prepare(raw, hop, sender="", recipients=recipients)
        try:
            message = Queued.of_message(
                prepared.head, prepared.body, message_id=prepared.message_id,
                recipients=recipients, folder=folder,
            )  # fmt: skip
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3]
            )
            return Outcome(400, {"error": f"bad request: {where}"})
        return await self.submit(message)

    async def enqueue(self, message: Queued) -> Submitted:
        """Queue `message` (checked already): once this returns, it is in the queue's file
        with fsync, in the group commit every listener shares, and its deliveries wait.
        sqlite3.Error or OSError: it is not (nothing of it holds)."""
        try:
            submitted = await self.store.submit(message, self._clock.now().timestamp())
        except (sqlite3.Error, OSError) as exc:  # the queue's file or a body's
            self.metrics.refused.labels("queue").inc()
            logger.error("queueing %s failed: %s", message.message_id, exc)
            raise
        if submitted.new:
            self.metrics.accepted.inc()
            if submitted.first:  # its body is the one queued: delivered from memory
                self._deliverer.fresh.keep(message, submitted.deliveries)
            await self._deliverer.add(submitted.deliveries)
        return submitted

    async def resolve(self, mailbox: str) -> Resolved | None:
        """Where `mailbox` lives and the largest item its database takes; None: not in the
        directory (or in a database the config no longer has: no node takes it).
        ClusterStoreError: the directory cannot be read."""
        database = await self._directory.mailbox_database(mailbox)
        return None if database is None else self._resolved(mailbox, database)

    async def resolve_first(self, names: list[str]) -> Resolved | None:
        """`resolve` of the first of `names` the directory has (an SMTP or LMTP recipient's
        mailboxes, in order: `mail_policy.mailboxes_of`); None: none of them.  One found in a
        database the config no longer has is None too: its mail is refused, never given to
        the next name's mailbox instead."""
        first = await self._directory.first_of(names)
        return None if first is None else self._resolved(*first)

    def _resolved(self, mailbox: str, database: str) -> Resolved | None:
        try:
            limit = self.config.max_item_size_of(self.config.database(database))
        except KeyError:
            return None
        return Resolved(mailbox, database, limit)

    async def _check(self, message: Queued) -> Outcome | None:
        unknown, over = [], []
        for recipient in dict.fromkeys(message.recipients):
            resolved = await self.resolve(recipient)
            if resolved is None:
                unknown.append(recipient)
                continue
            database, limit = resolved.database, resolved.max_item_size
            if message.size > limit:
                over.append((recipient, database, limit))
        if unknown:
            return Outcome(400, {
                "error": f"unknown recipient{'s' if len(unknown) > 1 else ''}: "
                         f"{', '.join(unknown)} (not in the mailbox directory); nothing queued",
                "unknown_recipients": unknown, "reason": "unknown recipient",
            })  # fmt: skip
        if over:
            recipient, database, limit = over[0]
            return Outcome(413, {
                "error": f"the message is {message.size} bytes, over {database}'s "
                         f"max_item_size of {limit} bytes (recipient {recipient}); nothing "
                         "queued",
                "max_item_size": limit, "item_size": message.size, "reason": "too large",
            })  # fmt: skip
        return None

    async def redeliver(self, database: str, start: datetime, end: datetime) -> int:
        """Queue again what this transport delivered to `database` within [start, end]."""
        now = self._clock.now().timestamp()
        found = await self.store.redeliver(database, start.timestamp(), end.timestamp(), now)
        await self._deliverer.add(found)
        self.metrics.redelivered.labels(database).inc(len(found))
        logger.warning(
            "redelivery of %s from %s to %s: %d messages queued again",
            database, start.isoformat(), end.isoformat(), len(found),
        )  # fmt: skip
        return len(found)

    async def queue_state(self) -> QueueState:
        states, dumpsters = await self.store.counts()
        return QueueState(
            transport=self.name,
            deliveries=states,
            waiting=self._deliverer.waiting,
            dumpsters=[
                DumpsterState(database=d.database, messages=d.messages, bytes=d.bytes)
                for d in dumpsters
            ],
        )

    async def refresh_gauges(self) -> None:
        _, dumpsters = await self.store.counts()
        for d in dumpsters:
            self.metrics.dumpster_bytes.labels(d.database).set(d.bytes)
