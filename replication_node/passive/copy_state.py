"""A passive copy's durable state, `copy-state.json` beside its database: whether it is
suspended (by an operator or by a failure), and whether its file was found damaged.  Kept
across restarts, so that a node restart never quietly resumes a copy someone stopped, nor
reads from a file a scrub found corrupt.  Activation suspension (`activation_suspended`,
with its own reason) is kept apart from suspension: a copy can replicate and still be
barred from activation, and resuming it changes nothing else."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from dag_common.durable import atomic_write

STATE_FILE = "copy-state.json"


@dataclass(frozen=True, slots=True)
class CopyState:
    suspended: bool = False
    failed: bool = False  # suspended by a failure (FailedAndSuspended)
    corrupt: bool = False  # the file failed a check: no reads until a reseed
    reason: str | None = None
    activation_suspended: bool = False  # replicates, but is never activated
    activation_reason: str | None = None

    @classmethod
    def load(cls, root: Path) -> CopyState:
        """The state saved under `root`; none saved is a running copy.  An unreadable file
        must not let a stopped copy run: it reads as suspended, saying why."""
        try:
            state = json.loads((root / STATE_FILE).read_text())
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            return cls(suspended=True, reason=f"unreadable {STATE_FILE}: {exc}")
        return cls(
            suspended=bool(state.get("suspended")),
            failed=bool(state.get("failed")),
            corrupt=bool(state.get("corrupt")),
            reason=state.get("reason") or None,
            activation_suspended=bool(state.get("activation_suspended")),
            activation_reason=state.get("activation_reason") or None,
        )

    def save(self, root: Path) -> None:
        atomic_write(root / STATE_FILE, json.dumps(asdict(self)).encode())
