"""The report's queue chart: each copy's copy and replay queue per window, drawn by
matplotlib into a PNG, from the aggregate's `copies/` rows; no I/O.

A line joins only neighbouring windows that both have a value, as Grafana draws a series
with nulls: each copy's figures are laid on every window of the period, so a window without
any sample (the service was down) or without a fresh sample of the copy (its node
unreachable, its status stale: the aggregate's queue figures are null) breaks the line
rather than being bridged by one. A window with a value alone between two without has no
segment to draw, so it is drawn as a dot.
"""

from __future__ import annotations

import base64
import io

import pandas as pd
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure


def png(fig: Figure) -> str:
    """`fig` as a PNG, base64 (for a data URI)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96)
    return base64.b64encode(buf.getvalue()).decode()


def window_grid(rows: pd.DataFrame) -> pd.DatetimeIndex:
    """Every window from the first to the last of `rows` (their width is the rows' own)."""
    width = (rows["window_end"] - rows["window_start"]).iloc[0]
    return pd.date_range(rows["window_start"].min(), rows["window_start"].max(), freq=width)


def on_grid(part: pd.DataFrame, column: str, grid: pd.DatetimeIndex) -> pd.Series:
    """One copy's `column` on every window of `grid`, NaN where it has no value."""
    return part.set_index("window_start")[column].reindex(grid)


def lone(values: pd.Series) -> list[bool]:
    """Which values have no value on either side: a line has no segment to draw for them."""
    present = values.notna()
    before = present.shift(1, fill_value=False)
    after = present.shift(-1, fill_value=False)
    return (present & ~before & ~after).tolist()


def queue_figure(copies: pd.DataFrame, database: str) -> Figure:
    """Copy and replay queue length of each copy of `database` over time."""
    fig = Figure(figsize=(11, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    rows = copies[copies["database"] == database]
    grid = window_grid(rows)
    for copy, part in rows.groupby("copy", sort=True):
        site = part["site"].iloc[0]
        for ax, col in ((top, "copy_queue_length"), (bottom, "replay_queue_length")):
            mean = on_grid(part, f"{col}_mean", grid)
            line = ax.plot(
                grid, mean, lw=1.6, marker="o", ms=4, markevery=lone(mean),
                label=f"{copy} ({site}) mean",
            )[0]  # fmt: skip
            most = on_grid(part, f"{col}_max", grid)
            ax.plot(
                grid, most, lw=0.8, ls=":", marker="o", ms=2.5, markevery=lone(most),
                color=line.get_color(), label=f"{copy} max",
            )  # fmt: skip
    top.set_ylabel("copy queue (logs)")
    bottom.set_ylabel("replay queue (logs)")
    top.set_title(f"{database}: queue length per copy and window (mean solid, max dotted)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))  # all-zero queues: 0..1 logs
    locator = AutoDateLocator()
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    # Beside the axes, not on them: a legend inside hides the windows it lies over.
    fig.legend(*top.get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    return fig


def queue_chart(copies: pd.DataFrame, database: str) -> str:
    """`queue_figure` as a PNG (base64)."""
    return png(queue_figure(copies, database))
