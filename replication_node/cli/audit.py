"""`replication-node audit [--database DB] [--limit N] [--json]`: the recent audited calls
of every node (each keeps its own trail: `replication_node/audit.py`), merged by time.

A node that cannot be reached is named on stderr and the others are shown; exit 1 if none
answered."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from pydantic import ValidationError

from dag_common.cli import (
    ExitCode,
    add_config,
    add_count,
    add_json,
    add_timeout,
    database_named,
)
from dag_common.command_calls import CallFailed, Calls, credential_refused
from dag_common.config import ClusterConfig, load_config
from replication_node.admin_api import AuditAnswer, AuditEntry


async def _every_node(
    config: ClusterConfig, timeout: float, query: str
) -> dict[str, tuple[int, Any] | CallFailed]:
    """Each node's answer, or why it gave none (all asked at once)."""

    async def ask(calls: Calls, node: str) -> tuple[int, Any] | CallFailed:
        try:
            return await calls.get(calls.node(node), f"/v1/audit{query}")
        except CallFailed as exc:
            return exc

    async with Calls(config, timeout=timeout) as calls:
        answers = await asyncio.gather(*(ask(calls, n.name) for n in config.nodes))
    return {n.name: a for n, a in zip(config.nodes, answers, strict=True)}


def line_of(entry: AuditEntry) -> str:
    target = ",".join(f"{k}={v}" for k, v in entry.target.items())
    return (
        f"{entry.time[:23]}  {entry.node:<8} {entry.credential or '-':<12} "
        f"{entry.role or '-':<11} {entry.method:<6} {entry.path}  {target}  "
        f"{entry.status} {entry.result}"
    ).rstrip()


def cmd_audit(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    query = f"?limit={args.limit}"
    if args.database:
        query += f"&database={database_named(config, args.database, args.config).name}"
    answers = asyncio.run(_every_node(config, args.timeout.total_seconds(), query))
    heard = {node: a for node, a in answers.items() if not isinstance(a, CallFailed)}
    if heard and all(status in (401, 403) for status, _ in heard.values()):
        # Every node that answered refused the credential: a token to fix (exit 2, one
        # line), as `status` says it, not the nodes' trouble.
        status, body = next(iter(heard.values()))
        raise credential_refused(status, body)
    lines: list[AuditEntry] = []
    answered = 0
    for node, answer in answers.items():
        if isinstance(answer, CallFailed):
            print(f"{answer}; its audit lines are left out", file=sys.stderr)
            continue
        status, body = answer
        if status == 200:
            try:
                lines.extend(AuditAnswer.model_validate(body).lines)
            except ValidationError as exc:
                print(f"{node}: a malformed answer ({exc.error_count()} errors)", file=sys.stderr)
                continue
            answered += 1
        else:
            why = body.get("error") or f"HTTP {status}"
            print(f"node {node} answered HTTP {status} ({why}); its audit lines are left out",
                  file=sys.stderr)  # fmt: skip
    lines.sort(key=lambda e: e.time)
    lines = lines[-args.limit :]
    if args.json:
        print(json.dumps([e.model_dump(mode="json") for e in lines], indent=2))
    else:
        for entry in lines:
            print(line_of(entry))
    return ExitCode.OK if answered else ExitCode.FAILED


def register(audit: argparse.ArgumentParser) -> None:
    """`audit`."""
    audit.add_argument("--database", help="only this database's")
    add_count(audit, "--limit", least=1, of="lines", default=50, help="the newest N lines")
    add_config(audit)
    add_timeout(audit, "15s")
    add_json(audit)
    audit.set_defaults(func=cmd_audit)
