"""`spark-metrics report`: one self-contained HTML page over an aggregation's output.

Per database: a chart over time of the copy queue and the replay queue of each copy (PNG
drawn by matplotlib, embedded as a data URI: the page is one file, openable anywhere), the
fraction of the time each constraint would have been Satisfied (over the whole period and
per day), and per site the windows with the worst copy queue. The page says the period it
covers, the window width, and which history files the last run skipped and why.

The output is small (already aggregated), so it is read with pyarrow, without Spark.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from dag_common.durable import atomic_write
from spark_metrics.chart import queue_chart
from spark_metrics.constraints import FRACTION_COLUMNS
from spark_metrics.errors import BadInputError
from spark_metrics.manifest import load_run
from spark_metrics.options import describe_window

WORST_PER_SITE = 10
MISSING = "—"  # a figure without a value: no fresh sample of it in the window
_CONSTRAINT_LABELS = {c: str(k) for k, c in FRACTION_COLUMNS.items()}


def read_output(root: Path, name: str) -> pd.DataFrame:
    """One of the aggregate's datasets (`copies`, `sites`, `constraints`) as pandas."""
    path = root / name
    if not path.is_dir():
        raise BadInputError(f"--input {root}: no {name}/ dataset (run spark-metrics aggregate)")
    try:
        table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    except (OSError, pa.ArrowException) as exc:
        raise BadInputError(f"cannot read {path}: {exc}") from exc
    df = table.to_pandas()
    for col in ("window_start", "window_end"):
        if col in df:
            df[col] = pd.to_datetime(df[col], utc=True)
    return df


def _pct(value: float) -> str:
    return MISSING if pd.isna(value) else f"{100 * value:.1f}%"


def _count(value: object) -> str:
    """A whole number (pandas reads an integer column with nulls as floats)."""
    return MISSING if pd.isna(value) else f"{int(value):,}"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return MISSING if pd.isna(value) else f"{value:,.2f}"
    if isinstance(value, pd.Timestamp):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return html.escape(str(value))


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def constraint_table(constraints: pd.DataFrame, database: str) -> str:
    """Satisfied fractions, sample-weighted, over the whole period and per day."""
    rows_db = constraints[constraints["database"] == database]
    cols = list(FRACTION_COLUMNS.values())
    rows = []
    groups = [("whole period", rows_db), *rows_db.groupby("date", sort=True)]
    for label, part in groups:
        samples = part["samples"].sum()
        fractions = [
            (part[c] * part["samples"]).sum() / samples if samples else float("nan") for c in cols
        ]
        rows.append([f"<b>{html.escape(str(label))}</b>", f"{samples:,}", *map(_pct, fractions)])
    return _table(["period", "sample times", *[_CONSTRAINT_LABELS[c] for c in cols]], rows)


def worst_table(sites: pd.DataFrame, databases: set[str] | None = None) -> str:
    """Per site, the windows whose worst copy had the highest copy queue."""
    rows = []
    for site, part in sites.groupby("site", sort=True):
        top = part.sort_values(
            ["copy_queue_length_max", "copy_queue_length_mean", "window_start"],
            ascending=[False, False, True],
        ).head(WORST_PER_SITE)
        for _, r in top.iterrows():
            rows.append(
                [
                    html.escape(str(site)),
                    _cell(r["window_start"]),
                    html.escape(f"{r['database']}\\{r['copy']}"),
                    _count(r["copy_queue_length_max"]),
                    _cell(float(r["copy_queue_length_mean"])),
                    _count(r["copy_queue_length_p95"]),
                    _count(r["replay_queue_length_max"]),
                    _cell(float(r["replay_lag_max_s"])),
                    _pct(r["healthy_fraction"]),
                    _pct(r["reachable_fraction"]),
                ]
            )
    return _table(
        [
            "site",
            "window",
            "worst copy",
            "copy queue max",
            "mean",
            "p95",
            "replay queue max",
            "replay lag max (s)",
            "healthy",
            "reachable",
        ],
        rows,
    )


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{margin-bottom:4px} h2{margin-top:36px;border-bottom:2px solid #ddd;padding-bottom:4px}
.meta{color:#555} img{max-width:100%;border:1px solid #eee}
table{border-collapse:collapse;margin:12px 0;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.skipped{color:#8a4b00}
"""


def render(out_dir: Path) -> str:
    """The report's HTML for the aggregate output under `out_dir`."""
    copies = read_output(out_dir, "copies")
    constraints = read_output(out_dir, "constraints")
    sites = read_output(out_dir, "sites")
    if copies.empty:
        raise BadInputError(f"--input {out_dir}: the output holds no windows yet")
    start, end = copies["window_start"].min(), copies["window_end"].max()
    width = describe_window(
        int((copies["window_end"] - copies["window_start"]).iloc[0].total_seconds())
    )
    run = load_run(out_dir)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>Replication history report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Replication history</h1>",
        f"<p class='meta'>Period covered: <b>{_cell(start)}</b> to <b>{_cell(end)}</b> UTC "
        f"&middot; windows of {width} &middot; "
        f"{copies['samples'].sum():,} copy samples "
        f"&middot; generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC</p>",
        "<p class='meta'>A line breaks at a window without a fresh sample of its copy (the "
        "node unreachable, its status stale, or no history at all); a dot is a window alone "
        f"between two such. {MISSING} in a table: no fresh sample of that figure.</p>",
    ]
    skipped = run.skipped if run is not None else []
    if skipped:
        items = "".join(
            f"<li><code>{html.escape(s.path)}</code>: {html.escape(s.reason)}</li>" for s in skipped
        )
        parts.append(
            f"<p class='skipped'>The last aggregation skipped {len(skipped)} history "
            f"file(s):</p><ul class='skipped'>{items}</ul>"
        )
    for database in sorted(copies["database"].unique()):
        parts.append(f"<h2 id='db-{html.escape(database)}'>{html.escape(database)}</h2>")
        parts.append(
            f"<img class='chart' alt='queue length per copy of {html.escape(database)}' "
            f"src='data:image/png;base64,{queue_chart(copies, database)}'>"
        )
        parts.append("<h3>How often each constraint would have been Satisfied</h3>")
        parts.append(constraint_table(constraints, database))
    parts.append("<h2>Worst copies per site</h2>")
    parts.append(
        f"<p class='meta'>Per site, the {WORST_PER_SITE} windows whose worst copy (highest "
        "copy queue) held moves back the most.</p>"
    )
    parts.append(worst_table(sites))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(out_dir: Path, page: Path) -> Path:
    """Write the report of `out_dir` to `page` (atomically) and return its path."""
    text = render(out_dir)
    try:
        page.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(page, text.encode())
    except OSError as exc:
        raise BadInputError(f"--output {page}: {exc}") from exc
    return page.resolve()
