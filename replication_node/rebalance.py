"""Rebalancing: which databases to switch over so that each one's active copy is again its
most preferred healthy copy (activation preference 1, else the next healthy one), as the
seeds' operators do after maintenance or a failover moved actives around.

Pure policy: `plan_rebalance` takes the config's databases and every node's status (or why
it could not be had) and answers one `Move` per database, in the config's order.  The
`replication-node db rebalance` command (cli/rebalance.py) carries the switchovers out.

Safety: a move is only ever a switchover (lossless: the active quiesces, the target replays
every log it closed, then the role moves), planned only from a Mounted active to a copy that
reports Healthy.  A database without a mounted active is skipped, never activated: mounting
a copy over a lost active is an operator's decision (`db activate`), with its loss said.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from dag_common.config import DatabaseConfig
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, NodeStatus


class MoveKind(StrEnum):
    """What rebalancing does with one database."""

    STAY = "stay"  # already on its most preferred healthy copy
    SWITCH = "switch"  # switch over from `source` to `target`
    SKIP = "skip"  # not on its preferred copy, and it cannot be moved there now: `reason`


@dataclass(frozen=True, slots=True)
class Move:
    """The plan for one database: `source` is the active copy's node (None if unknown),
    `target` the copy to switch over to, `reason` why it stays or is skipped (or, for a
    switch to a copy other than the first preference, why that one was passed over)."""

    database: str
    kind: MoveKind
    source: str | None = None
    target: str | None = None
    reason: str = ""

    def line(self, *, dry_run: bool = False) -> str:
        """The plan for this database in one line (a switch as it will be, or would be, done)."""
        if self.kind is MoveKind.SWITCH:
            verb = "would switch over" if dry_run else "switch over"
            note = f" ({self.reason})" if self.reason else ""
            return f"{self.database}: {verb} from {self.source} to {self.target}{note}"
        if self.kind is MoveKind.STAY:
            return f"{self.database}: {self.reason}"
        return f"{self.database}: skipped: {self.reason}"


NodeView = NodeStatus | str
"""A node's status, or one sentence of why it could not be had ("unreachable: …")."""


def _report(view: NodeView | None, database: str) -> CopyStatusReport | str:
    """The copy of `database` a node reports, or why there is none to read."""
    if view is None:
        return "not asked"
    if isinstance(view, str):
        return view
    report = next((c for c in view.copies if c.database == database), None)
    return report if report is not None else f"reports no copy of {database}"


def _why_not(node: str, report: CopyStatusReport | str) -> str:
    if isinstance(report, str):
        return f"{node}: {report}"
    why = f" ({report.error})" if report.error else ""
    return f"{node} is {report.status}{why}"


def plan_database(database: DatabaseConfig, nodes: Mapping[str, NodeView]) -> Move:
    """The move of one database (see the module docstring)."""
    name = database.name
    copies = sorted(database.copies, key=lambda c: c.activation_preference)
    reports = {c.node: _report(nodes.get(c.node), name) for c in copies}
    actives = [
        r for r in reports.values() if isinstance(r, CopyStatusReport) and r.role is CopyRole.ACTIVE
    ]
    # Two copies may both say active for a moment after a failover (the old one not told
    # yet): the mounted one is the active.
    active = next((r for r in actives if r.status is CopyStatus.MOUNTED), None)
    if active is None:
        if actives:
            a = actives[0]
            return Move(
                name,
                MoveKind.SKIP,
                source=a.node,
                reason=f"the active copy on {a.node} is {a.status}, not Mounted "
                "(a switchover needs a mounted active; see `db mount`, `db activate`)",
            )
        unreachable = [_why_not(n, r) for n, r in reports.items() if isinstance(r, str)]
        said = f" ({'; '.join(unreachable)})" if unreachable else ""
        return Move(name, MoveKind.SKIP, reason=f"no copy reports a mounted active copy{said}")
    passed_over: list[str] = []
    for copy in copies:
        if copy.node == active.node:
            if not passed_over:
                return Move(
                    name,
                    MoveKind.STAY,
                    source=active.node,
                    reason=f"already on its preferred copy ({active.node})",
                )
            return Move(
                name,
                MoveKind.SKIP,
                source=active.node,
                reason=f"the preferred copy cannot take over: {'; '.join(passed_over)} "
                f"(stays on {active.node})",
            )
        report = reports[copy.node]
        if isinstance(report, CopyStatusReport) and report.status is CopyStatus.HEALTHY:
            return Move(
                name,
                MoveKind.SWITCH,
                source=active.node,
                target=copy.node,
                reason="; ".join(f"passing over {p}" for p in passed_over),
            )
        passed_over.append(_why_not(copy.node, report))
    # The mounted active's node holds no copy of the database in the config (a config
    # changed under a running cluster): nothing this command should decide.
    return Move(
        name,
        MoveKind.SKIP,
        source=active.node,
        reason=f"the active copy on {active.node} is not one of its copies in the config",
    )


def plan_rebalance(
    databases: Sequence[DatabaseConfig], nodes: Mapping[str, NodeView]
) -> list[Move]:
    """One move per database, in the order given."""
    return [plan_database(db, nodes) for db in databases]
