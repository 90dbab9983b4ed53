"""The HTML report: one self-contained page with a chart per database, the constraint
table, the worst copies per site and the period; and, in a real browser, charts that render.
A history with holes (a copy without a fresh sample for a window, a window without any
sample) draws what there is, breaks the lines where nothing is, and prints no `nan`."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import date2num
from matplotlib.figure import Figure
from PIL import Image

from spark_metrics.aggregate import aggregate
from spark_metrics.chart import queue_figure
from spark_metrics.cli import main
from spark_metrics.options import AggregateOptions
from spark_metrics.progress import Progress
from spark_metrics.report import read_output, worst_table, write_report
from tests.browser import chromium
from tests.spark_metrics.history import T0, hour_path, row, write_file
from tests.spark_metrics.scenarios import sample_rows

# matplotlib's first three line colours: mbx1, mbx2 and mbx3's lines
LINE_COLOURS = {"mbx1": (31, 119, 180), "mbx2": (255, 127, 14), "mbx3": (44, 160, 44)}


@pytest.fixture(scope="module")
def output(spark, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("report")
    rows = sample_rows(120, step=timedelta(seconds=31))
    rows = [
        {**r, "copy_queue_length": (i // 9) % 6 if r["reachable"] else None}
        for i, r in enumerate(rows)
    ]
    rows += [{**r, "database": "DB2"} for r in sample_rows(40, step=timedelta(seconds=45))]
    write_file(hour_path(base / "history", T0, "a"), rows)
    (base / "history" / "date=2026-11-22" / "hour=09").mkdir()
    options = AggregateOptions(input=base / "history", output=base / "out")
    aggregate(spark, options, Progress(io.StringIO()))
    return base / "out"


def test_the_page_holds_charts_tables_and_period(output, tmp_path):
    page = write_report(output, tmp_path / "report.html")
    text = page.read_text()
    assert len(re.findall(r"<img class='chart'[^>]*src='data:image/png;base64,", text)) == 2
    assert "src='http" not in text and "<script" not in text  # self-contained
    assert "Period covered: <b>2026-11-22 10:00:00</b> to <b>2026-11-22 11:02:00</b>" in text
    for header in ("SecondCopy", "SecondDatacenter", "AllDatacenters", "AllCopies", "Worst copies"):
        assert header in text
    assert "hour=09</code>: empty partition" in text  # the last run's skipped files


def test_report_cli_exit_codes(output, tmp_path, capsys):
    assert main(["report", "--input", str(output), "--output", str(tmp_path / "r.html")]) == 0
    assert "report written to" in capsys.readouterr().out
    assert main(["report", "--input", str(tmp_path / "absent"), "--output", "x.html"]) == 2
    assert "no copies/ dataset" in capsys.readouterr().err
    assert main(["report", "--input", str(output)]) == 2


def _screenshot(page: Path, shot: Path, profile: Path) -> Image.Image:
    chromium(page.as_uri(), "--window-size=1280,2200", f"--screenshot={shot}", profile=profile)
    return Image.open(shot).convert("RGB")


def _count(image: Image.Image, colour: tuple[int, int, int]) -> int:
    """Pixels within a small distance of `colour` (anti-aliasing blends line edges)."""
    pixels = np.asarray(image, dtype=np.int32)
    return int((np.abs(pixels - np.array(colour)).sum(axis=2) < 40).sum())


@pytest.mark.slow
def test_charts_render_in_a_real_browser(output, tmp_path):
    page = write_report(output, tmp_path / "report.html")
    image = _screenshot(page, tmp_path / "shot.png", tmp_path / "profile")
    counts = {copy: _count(image, colour) for copy, colour in LINE_COLOURS.items()}
    assert all(n > 300 for n in counts.values()), counts  # every copy's line was drawn
    # Control: the same page with its images broken shows none of those lines.
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace("data:image/png;base64,", "data:image/png;base64,x"))
    control = _screenshot(broken, tmp_path / "control.png", tmp_path / "profile2")
    assert all(_count(control, c) < 50 for c in LINE_COLOURS.values())


def _window(i: int):
    return T0 + timedelta(minutes=i)


@pytest.fixture(scope="module")
def holes(spark, tmp_path_factory) -> Path:
    """One-minute windows 0..6 of DB1: mbx3 (dublin, the site's only copy) has no fresh sample
    in windows 1 and 3 (unreachable) and a queue of 6 in window 2 between them; window 4 has
    no sample at all (the service was down); mbx2's queue is 3 throughout."""
    base = tmp_path_factory.mktemp("holes")
    rows = []
    for i in (0, 1, 2, 3, 5, 6):
        for s in (0, 20, 40):
            at = _window(i) + timedelta(seconds=s)
            mbx3 = row(at, "mbx3", cq=6 if i == 2 else 1, reachable=i not in (1, 3))
            rows += [row(at, "mbx1", role="Active"), row(at, "mbx2", cq=3), mbx3]
    write_file(hour_path(base / "history", T0, "a"), rows)
    aggregate(
        spark,
        AggregateOptions(input=base / "history", output=base / "out"),
        Progress(io.StringIO()),
    )
    return base / "out"


def _drawn(fig: Figure, ax: Axes, window: float, value: float, copy: str) -> bool:
    """Whether `copy`'s colour is drawn within 3 pixels of (window `window`, `value`) on `ax`."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3].astype(np.int32)
    x, y = ax.transData.transform((date2num(T0 + timedelta(minutes=window)), value))
    row_, col = round(pixels.shape[0] - y), round(x)
    patch = pixels[row_ - 3 : row_ + 4, col - 3 : col + 4]
    return bool((np.abs(patch - np.array(LINE_COLOURS[copy])).sum(axis=2) < 40).any())


def test_the_chart_draws_a_lone_window_and_breaks_at_a_missing_one(holes):
    fig = queue_figure(read_output(holes, "copies"), "DB1")
    copy_queue = fig.axes[0]
    assert _drawn(fig, copy_queue, 5.5, 3, "mbx2") and _drawn(fig, copy_queue, 5.5, 1, "mbx3")
    assert _drawn(fig, copy_queue, 2, 6, "mbx3")  # between two windows without a fresh sample
    assert not _drawn(fig, copy_queue, 4, 3, "mbx2")  # no line across the window without samples
    assert not _drawn(fig, copy_queue, 3.5, 3.5, "mbx3")


def _rows(table: str) -> list[list[str]]:
    return [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)]


def test_the_worst_copies_say_when_a_window_had_no_fresh_sample(holes):
    table = worst_table(read_output(holes, "sites"))
    assert "nan" not in table.lower()
    dublin = {r[1]: r for r in _rows(table) if r and r[0] == "dublin"}
    assert dublin["2026-11-22 10:02:00"][2:] == [
        "DB1\\mbx3", "6", "6.00", "6", "0", "0.00", "100.0%", "100.0%",
    ]  # fmt: skip
    assert dublin["2026-11-22 10:01:00"][2:] == [
        "DB1\\mbx3", "—", "—", "—", "—", "—", "0.0%", "0.0%",
    ]  # fmt: skip
    assert "2026-11-22 10:04:00" not in dublin
