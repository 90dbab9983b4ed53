"""The HTML report: one self-contained page with a chart per database, the constraint
table, the worst copies per site and the period; and, in a real browser, charts that render."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spark_metrics.aggregate import aggregate
from spark_metrics.cli import main
from spark_metrics.options import AggregateOptions
from spark_metrics.progress import Progress
from spark_metrics.report import write_report
from tests.browser import chromium
from tests.spark_metrics.history import T0, hour_path, write_file
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
