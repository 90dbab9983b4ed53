"""The status page on `http_listen` (`GET /`): what the service sees and what it last said.

`take_snapshot` freezes the live view and the last answers at one moment; `render` is a
pure function from that snapshot to one HTML page, server-rendered, no script, every value
passed through `html.escape` (database names, reasons and caller ids come from config and
callers, and must never become markup).  The page refreshes itself every
`REFRESH_SECONDS`: fixed, not configured, because nothing on it is worth a setting: the
copies' freshness limit is a few seconds (3 polls), a move's gates are asked about every
few seconds, and a render only reads memory, so 5 s shows a person what changed while
they look without making the text they are reading jump under them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime

from dag_common.clock import Clock
from dag_common.guarantee.values import CopySnapshot, DatabaseView
from guarantee_api.last_answers import LastAnswer, LastAnswers, Method, shorten
from guarantee_api.view import LiveView

REFRESH_SECONDS = 5
MAX_PROBLEM = 120  # characters of a copy's problem or error shown in its row
NONE = "—"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.when { white-space: nowrap; }
tr.stale td { background: #fde2e1; }
td.Satisfied { color: #17692c; font-weight: bold; }
td.NotSatisfied { color: #a31515; font-weight: bold; }
td.Retry { color: #8a5a00; font-weight: bold; }
.none { color: #777; font-style: italic; }
"""


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """Everything the page shows, as of `rendered_at` (UTC)."""

    cluster: str
    rendered_at: datetime
    serving: bool
    reachable_nodes: int
    nodes: int
    databases: tuple[DatabaseView, ...]
    answers: tuple[LastAnswer, ...]
    refresh_seconds: int = REFRESH_SECONDS


def take_snapshot(
    *,
    cluster: str,
    view: LiveView,
    answers: LastAnswers,
    clock: Clock,
    serving: bool,
    nodes: int,
) -> StatusSnapshot:
    """The view's every database and the last answers, frozen now."""
    now = clock.monotonic()
    return StatusSnapshot(
        cluster=cluster,
        rendered_at=clock.now(),
        serving=serving,
        reachable_nodes=view.reachable_nodes,
        nodes=nodes,
        databases=tuple(view.snapshot(db, now) for db in view.databases),
        answers=answers.all(),
    )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _time(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _copy_row(copy: CopySnapshot) -> str:
    r = copy.report
    if copy.fresh:
        data, row_class = "fresh", "fresh"
    else:
        data, row_class = f"stale: {shorten(copy.problem or 'no status', MAX_PROBLEM)}", "stale"
    status = NONE
    if r is not None:
        status = r.status.value
        if r.error:
            status += f" ({shorten(r.error, MAX_PROBLEM)})"
    cells = [
        ("", copy.database),
        ("", copy.node),
        ("", copy.site),
        ("", r.role.value if r else NONE),
        ("", status),
        ("num", r.copy_queue_length if r else NONE),
        ("num", r.replay_queue_length if r else NONE),
        ("num", r.last_log_copied if r else NONE),
        ("num", r.last_log_replayed if r else NONE),
        ("data", data),
    ]
    tds = "".join(f"<td class='{cls}'>{_e(v)}</td>" if cls else f"<td>{_e(v)}</td>"
                  for cls, v in cells)  # fmt: skip
    return f"<tr class='{row_class}'>{tds}</tr>"


def _answer_row(database: str, method: Method, answer: LastAnswer | None, now: datetime) -> str:
    head = f"<td>{_e(database)}</td><td>{_e(method.value)}</td>"
    if answer is None:
        return f"<tr>{head}<td class='none' colspan='5'>no answer yet</td></tr>"
    ago = max(0, round((now - answer.at).total_seconds()))
    return (
        f"<tr>{head}<td class='{_e(answer.status.value)}'>{_e(answer.status.value)}</td>"
        f"<td>{_e(answer.constraint.value)}</td>"
        f"<td class='when'>{_e(_time(answer.at))} ({ago} s ago)</td>"
        f"<td>{_e(answer.caller_id)}</td><td>{_e(answer.reason)}</td></tr>"
    )


def render(snapshot: StatusSnapshot) -> str:
    """The whole page for `snapshot`, as an HTML string."""
    s = snapshot
    copies = "".join(_copy_row(c) for db in s.databases for c in db.copies)
    if not copies:
        copies = "<tr><td class='none' colspan='10'>no database in the cluster config</td></tr>"
    by_key = {(a.database, a.method): a for a in s.answers}
    names = [db.database for db in s.databases]
    names += sorted({a.database for a in s.answers} - set(names))
    answers = "".join(
        _answer_row(db, method, by_key.get((db, method)), s.rendered_at)
        for db in names
        for method in Method
    )
    told = "" if s.answers else "<p class='none'>The service has answered no check yet.</p>"
    serving = "yes" if s.serving else "no"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{s.refresh_seconds}">
<title>Data Guarantee: {_e(s.cluster)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>Data Guarantee service: cluster {_e(s.cluster)}</h1>
<p id="rendered">Rendered {_e(_time(s.rendered_at))}; this page refreshes every \
{s.refresh_seconds} s. Serving: {serving}; nodes reachable at the last poll: \
{s.reachable_nodes} of {s.nodes}.</p>
<h2>Copies</h2>
<table id="copies">
<thead><tr><th>Database</th><th>Copy</th><th>Site</th><th>Role</th><th>Status</th>\
<th>Copy queue</th><th>Replay queue</th><th>Last log copied</th><th>Last log replayed</th>\
<th>Data</th></tr></thead>
<tbody>{copies}</tbody>
</table>
<h2>Last answers</h2>
{told}<table id="answers">
<thead><tr><th>Database</th><th>Check</th><th>Status</th><th>Constraint</th><th>Answered</th>\
<th>Caller</th><th>Reason</th></tr></thead>
<tbody>{answers}</tbody>
</table>
</body>
</html>
"""
