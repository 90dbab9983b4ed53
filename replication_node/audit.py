"""The node's audit trail: every operator's and mover's action on this node, every call
between nodes that changes a role, and every refused call, as one JSON line each in
`<data_dir>/audit.log` (its own file, apart from the node's log), counted in
`replication_audit_events_total{role,result}`.

A line: `{"time", "node", "credential", "role", "method", "path", "target", "status",
"result"}`; `result` is `done` (2xx), `refused` (401, 403, and 408 for a call read after
its caller's deadline: nothing was done) or `failed`
(anything else: the action was tried and did not happen).  The credential is its name,
never its secret.  `GET /v1/audit` (monitor) answers this node's lines, newest last, and
`replication-node audit` merges every node's.

Each line is written whole with one `write` (O_APPEND) and not fsync'd: the audit tells
what was asked; what was done is in the cluster store and the logs, which are durable.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from pathlib import Path
from typing import Any

from dag_common.clock import Clock
from dag_common.deadline import LATE
from dag_common.route_roles import Call
from replication_node.admin_api import AuditEntry

logger = logging.getLogger(__name__)

AUDIT_FILE = "audit.log"


def result_of(status: int) -> str:
    if 200 <= status < 300:
        return "done"
    if status in (401, 403, LATE):
        return "refused"
    return "failed"


class AuditLog:
    """Appends a node's audited calls to its audit file, and counts them."""

    def __init__(self, path: Path, *, node: str, clock: Clock, counter: Any = None) -> None:
        self.path = path
        self._node = node
        self._clock = clock
        self._counter = counter  # a prometheus Counter labelled role, result (or None)

    def __call__(self, call: Call) -> None:
        result = result_of(call.status)
        line = AuditEntry(
            time=self._clock.now().isoformat(),
            node=self._node,
            credential=call.credential,
            role=str(call.role) if call.role else None,
            method=call.method,
            path=call.path,
            target=call.target,
            status=call.status,
            result=result,
        )
        data = (line.model_dump_json() + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:  # a full disk must not fail the call it audits
            logger.error("audit line not written (%s): %s", exc, line)
        if self._counter is not None:
            self._counter.labels(line.role or "none", result).inc()

    def read(self, *, database: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """The newest `limit` lines (of `database`'s calls, if named), oldest first."""
        kept: deque[AuditEntry] = deque(maxlen=limit)
        try:
            with open(self.path, encoding="utf-8") as f:
                for text in f:
                    try:
                        line = AuditEntry.model_validate_json(text)
                    except ValueError:
                        continue  # a line cut by a crash mid-write
                    if database is None or line.target.get("db") == database:
                        kept.append(line)
        except FileNotFoundError:
            return []
        return list(kept)
