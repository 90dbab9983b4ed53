"""What earlier runs did, kept under `OUT_DIR/_state/` (Spark and pyarrow skip `_` names):

- `manifest.json`: the window the output was made with, every history file read (by its
  size and modification time) and every file skipped with its reason;
- `last_run.json`: the last run's summary (what it read, wrote and skipped), which the
  report shows.

Both are written durably (temp file, fsync, rename, directory fsync) and only after the
output partitions are written: a run that dies midway leaves the manifest as it was, and the
next run recomputes the same dates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from dag_common.durable import atomic_write
from spark_metrics.discover import FileInfo, Skipped
from spark_metrics.errors import BadInputError

VERSION = 1


@dataclass(frozen=True, slots=True)
class Manifest:
    """The state one output directory carries from run to run."""

    window_s: int | None = None
    done: dict[str, FileInfo] = field(default_factory=dict)  # by path: read by a run
    skipped: dict[str, Skipped] = field(default_factory=dict)  # by path: not history, why


def state_dir(output: Path) -> Path:
    return output / "_state"


def load_manifest(output: Path) -> Manifest:
    """The output's manifest; an empty one if there is none yet."""
    path = state_dir(output) / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Manifest()
    except (OSError, ValueError) as exc:
        raise BadInputError(f"cannot read {path}: {exc}; remove it to recompute") from exc
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise BadInputError(f"{path} is not a version {VERSION} manifest; remove it to recompute")
    try:
        return Manifest(
            window_s=data.get("window_s"),
            done={
                p: FileInfo(p, s, m, n, datetime.fromisoformat(a), datetime.fromisoformat(b))
                for p, (s, m, n, a, b) in data.get("done", {}).items()
            },
            skipped={p: Skipped(p, r, s, m) for p, (s, m, r) in data.get("skipped", {}).items()},
        )
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"{path} is damaged ({exc}); remove it to recompute") from exc


def save_manifest(output: Path, manifest: Manifest) -> None:
    """Replace the manifest durably."""
    body = {
        "version": VERSION,
        "window_s": manifest.window_s,
        "done": {
            p: [f.size, f.mtime_ns, f.rows, f.first.isoformat(), f.last.isoformat()]
            for p, f in sorted(manifest.done.items())
        },
        "skipped": {p: [k.size, k.mtime_ns, k.reason] for p, k in sorted(manifest.skipped.items())},
    }
    _write(state_dir(output) / "manifest.json", body)


class SkippedFile(BaseModel):
    """A history file the run did not read, and why."""

    path: str
    reason: str


class LastRun(BaseModel):
    """What the last aggregation did (`_state/last_run.json`): the report shows its skips."""

    finished: datetime
    window_s: int
    files_seen: int
    files_read: int
    rows_read: int
    dates_written: list[str]
    rows_written: dict[str, int]
    skipped: list[SkippedFile]
    seconds: float


def save_run(output: Path, run: LastRun) -> None:
    """Replace the last run's summary durably."""
    _write(state_dir(output) / "last_run.json", run.model_dump(mode="json"))


def load_run(output: Path) -> LastRun | None:
    """The last run's summary, if any (None also for one this version cannot read)."""
    try:
        return LastRun.model_validate_json((state_dir(output) / "last_run.json").read_bytes())
    except (OSError, ValueError):
        return None


def _write(path: Path, body: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(body, indent=1, default=str).encode() + b"\n")
