"""`spark-metrics report`: one self-contained HTML page over an aggregation's output.

Per database: a chart over time of the copy queue and the replay queue of each copy (PNG
drawn by matplotlib, embedded as a data URI: the page is one file, openable anywhere), the
fraction of the time each constraint would have been Satisfied (over the whole period and
per day), and per site the windows with the worst copy queue. The page says the period it
covers, the window width, and which history files the last run skipped and why.

The output is small (already aggregated), so it is read with pyarrow, without Spark.
"""

from __future__ import annotations

import base64
import html
import io
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from dag_common.durable import atomic_write
from spark_metrics.constraints import FRACTION_COLUMNS
from spark_metrics.errors import BadInputError
from spark_metrics.manifest import load_run
from spark_metrics.options import describe_window

WORST_PER_SITE = 10
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


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96)
    return base64.b64encode(buf.getvalue()).decode()


def queue_chart(copies: pd.DataFrame, database: str) -> str:
    """Copy and replay queue length of each copy of `database` over time, as a PNG (base64)."""
    fig = Figure(figsize=(11, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    rows = copies[copies["database"] == database].sort_values("window_start")
    for copy, part in rows.groupby("copy", sort=True):
        site = part["site"].iloc[0]
        for ax, col in ((top, "copy_queue_length"), (bottom, "replay_queue_length")):
            line = ax.plot(
                part["window_start"], part[f"{col}_mean"], lw=1.6, label=f"{copy} ({site}) mean"
            )[0]
            ax.plot(
                part["window_start"],
                part[f"{col}_max"],
                lw=0.8,
                ls=":",
                color=line.get_color(),
                label=f"{copy} max",
            )
    top.set_ylabel("copy queue (logs)")
    bottom.set_ylabel("replay queue (logs)")
    top.set_title(f"{database}: queue length per copy and window (mean solid, max dotted)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))  # all-zero queues: 0..1 logs
    locator = AutoDateLocator()
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    top.legend(loc="upper left", fontsize=8, ncols=3)
    return _png(fig)


def _pct(value: float) -> str:
    return "" if pd.isna(value) else f"{100 * value:.1f}%"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:,.2f}"
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
                    str(r["copy_queue_length_max"]),
                    _cell(float(r["copy_queue_length_mean"])),
                    str(r["copy_queue_length_p95"]),
                    str(r["replay_queue_length_max"]),
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
