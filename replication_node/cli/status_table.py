"""The status table of `replication-node status`, rendered: fetched rows in, text out.

`plain_table`: aligned plain text, for a pipe, a file or a script (stable: scripts parse
it).  `rich_table`: the same rows and cells as a rich Table for a terminal, each status in
its colour.  An activation-suspended copy keeps its status (Healthy: it replicates) and says
"activation suspended: <reason>" in the last column (yellow on a terminal), as a seeding
copy says how far its seed has come.  Nothing here fetches or prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dag_common.model import CopyRole, CopyStatus, CopyStatusReport

if TYPE_CHECKING:  # rich is imported only to draw on a terminal (as `reseed_wait` does)
    from rich.console import JustifyMethod
    from rich.table import Table


def _mode(report: CopyStatusReport) -> str:
    """A passive copy's replication mode (Block or File); "-" for an active copy."""
    return report.copy_mode if report.role is CopyRole.PASSIVE else "-"


def _followers(report: CopyStatusReport) -> str:
    """For an active copy, the copies that follow its log in block mode, and how many must
    hold a commit."""
    if report.role is not CopyRole.ACTIVE or not (
        report.block_followers or report.synchronous_copies
    ):
        return ""
    following = ", ".join(report.block_followers) or "none"
    need = f"; {report.synchronous_copies} synchronous" if report.synchronous_copies else ""
    return f"block mode: {following}{need}"


def _seeding(report: CopyStatusReport) -> str:
    """A running seed's progress: bytes of the database file and its logs, of how many."""
    if report.seed_bytes_done is None:
        return ""
    done = report.seed_bytes_done / 1e6
    if not report.seed_bytes_total:
        return f"seeding: {done:,.1f} MB"
    percent = 100 * report.seed_bytes_done / report.seed_bytes_total
    return f"seeding: {done:,.1f} of {report.seed_bytes_total / 1e6:,.1f} MB ({percent:.0f}%)"


def _detail(report: CopyStatusReport) -> str:
    """What the last column says of a copy: its error, then what an operator should know
    (activation suspended, a note), a running seed's progress; else its block followers."""
    parts = [p for p in (report.error, report.note, report.redelivery, _seeding(report)) if p]
    return "; ".join(parts) or _followers(report)


def _fmt_time(value: Any) -> str:
    """A report's time in the operator's local time, date included."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _fmt_lag(report: CopyStatusReport) -> str:
    """A copy's ReplayLagTime (a lagged copy replays that far behind), as a duration."""
    seconds = int(report.replay_lag_time.total_seconds())
    if not seconds:
        return "-"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        (f"{hours}h" if hours else "")
        + (f"{minutes}m" if minutes else "")
        + (f"{secs}s" if secs else "")
    )


@dataclass(frozen=True, slots=True)
class StatusRow:
    """One copy's row of the status table, its cells as the table shows them."""

    name: str  # database\node
    status: str  # a CopyStatus, or "Unknown" when the node did not say
    pref: int
    mode: str
    copy_queue: str
    replay_queue: str
    lag: str
    inspected: str
    detail: str  # the copy's error or note, its block followers, or why it is unknown
    failing: bool  # the detail is an error (the copy's, or the node's)
    barred: bool = False  # the copy is activation-suspended


def status_row(database: str, node: str, pref: int, report: Any, err: str | None) -> StatusRow:
    """The row of one copy: its report, or why there is none (`err`)."""
    name = f"{database}\\{node}"
    if report is None:
        return StatusRow(name, "Unknown", pref, "-", "-", "-", "-", "-", err or "no status", True)
    return StatusRow(
        name,
        str(report.status),
        pref,
        _mode(report),
        str(report.copy_queue_length),
        str(report.replay_queue_length),
        _fmt_lag(report),
        _fmt_time(report.last_inspected_log_time),
        _detail(report),
        bool(report.error),
        report.activation_suspended,
    )


def plain_table(rows: list[StatusRow]) -> list[str]:
    """The table in aligned plain text: what a pipe, a file or a script gets (stable)."""
    lines = [
        f"{'Name':<20}{'Status':<24}{'Pref':>4} {'Mode':<6}{'CopyQueue':>10}"
        f"{'ReplayQueue':>12} {'ReplayLag':>9}  {'LastInspectedLogTime':<21}"
        f"{'ContentIndex/Error'}"
    ]
    for r in rows:
        lines.append(
            f"{r.name:<20}{r.status:<24}{r.pref:>4} {r.mode:<6}{r.copy_queue:>10}"
            f"{r.replay_queue:>12} {r.lag:>9}  {r.inspected:<21}{r.detail}"
        )
    return lines


# The colour of a copy's status on a terminal: serving or ready (green), on its way (yellow),
# not replicating or not serving (red).
STATUS_STYLE: dict[str, str] = {
    CopyStatus.HEALTHY: "green",
    CopyStatus.MOUNTED: "bold green",
    CopyStatus.INITIALIZING: "yellow",
    CopyStatus.SEEDING: "yellow",
    CopyStatus.RESYNCHRONIZING: "yellow",
    CopyStatus.DISCONNECTED_AND_HEALTHY: "yellow",
    CopyStatus.SUSPENDED: "red",
    CopyStatus.FAILED: "bold red",
    CopyStatus.FAILED_AND_SUSPENDED: "bold red",
    CopyStatus.DISMOUNTED: "red",
}


def rich_table(rows: list[StatusRow]) -> Table:
    """The table for a terminal: the same rows and cells as `plain_table`, statuses in
    colour, a node's or copy's error in red."""
    from rich import box  # only to draw on a terminal: a pipe's table needs none of rich
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("Name", "left"),
        ("Status", "left"),
        ("Pref", "right"),
        ("Mode", "left"),
        ("CopyQueue", "right"),
        ("ReplayQueue", "right"),
        ("ReplayLag", "right"),
        ("LastInspectedLogTime", "left"),
    )
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True)
    table.add_column("ContentIndex/Error", min_width=18, overflow="fold")
    for r in rows:
        style = STATUS_STYLE.get(r.status, "bold red")  # Unknown: the node did not say
        table.add_row(
            r.name,
            Text(r.status, style=style),
            str(r.pref),
            r.mode,
            r.copy_queue,
            r.replay_queue,
            r.lag,
            r.inspected,
            Text(r.detail, style="red" if r.failing else "yellow" if r.barred else ""),
        )
    return table
