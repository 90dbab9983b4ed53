"""The invariants every resilience scenario is held to, as pure functions over what the
workload recorded (`workload.py`) and what every copy held once the faults were healed.

Each returns the violations it found, as `Violation`s naming the invariant; none reads a
clock, a file or a socket, so each is unit-tested by feeding it a violation
(`test_invariants.py`).  The invariants, as the design states them:

- acknowledged writes: none lost, except within the mount dial of a lossy activation, and
  then only at or above the generation where the new active's stream began;
- one writer per epoch: never two copies acknowledging writes in one epoch, nor an older
  epoch's copy acknowledging after a newer epoch's copy did;
- convergence: every copy holds the active's content after healing;
- moves: no move completed whose data is not on the constraint's copies; a failed move
  leaves its source whole (not soft-deleted);
- truncation: no copy ever needed a log the active had already deleted;
- guarantee answers: no Flush answered Satisfied for a write that was then lost; no Health
  answered Satisfied while the faults left fewer copies up than the constraint needs;
- processes: nothing crashed or exited that the scenario did not stop;
- messages: every message the transport accepted is in its mailbox exactly once after the
  queue drained (a lossy failover's loss made whole by the dumpster), none it refused is,
  one never answered may be or not, but once; none ended in the poison queue.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dag_common.api_types import item_id_for
from dag_common.model import AutoDatabaseMountDial
from tests.resilience.workload import Answer, GuaranteeAnswer, Submission


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass(frozen=True)
class Epoch:
    """One record of a database's history (GET /v1/databases/{db}/history)."""

    epoch: int
    node: str
    start_generation: int
    mount_dial: str | None = None
    cause: str | None = None
    kept_through: int | None = None  # the generation before the start: kept through this byte

    @classmethod
    def from_json(cls, row: Mapping[str, object]) -> Epoch:
        return cls(
            int(row["epoch"]),  # type: ignore[arg-type]
            str(row["node"]),
            int(row["start_generation"] or 0),  # type: ignore[arg-type]
            row.get("mount_dial"),  # type: ignore[arg-type]
            row.get("cause"),  # type: ignore[arg-type]
            row.get("kept_through"),  # type: ignore[arg-type]
        )

    def forked_below(self, generation: int, offset: int) -> bool:
        """Whether a write at (generation, offset) of the previous stream is in the tail
        this epoch's activation did not keep: at or above its start, or past the byte the
        generation before it was kept through: the record at that
        byte and past it (block mode)."""
        if generation >= self.start_generation:
            return True
        return (
            generation == self.start_generation - 1
            and self.kept_through is not None
            and offset >= self.kept_through
        )


@dataclass(frozen=True)
class FaultWindow:
    """A fault and the copies it took out (`down`: a node, every copy on it, or `DB\\node`,
    one copy), from `started` to `ended` (monotonic)."""

    name: str
    down: frozenset[str]
    started: float
    ended: float

    def down_copies(self, database: str) -> set[str]:
        """The nodes whose copy of `database` this fault took out."""
        return {
            entry.partition("\\")[2] if "\\" in entry else entry
            for entry in self.down
            if "\\" not in entry or entry.partition("\\")[0] == database
        }


@dataclass(frozen=True)
class MoveOutcome:
    """A move as the requests store ended it, with the source's state after healing."""

    id: str
    state: str  # Completed | Failed | ...
    source_soft_deleted: bool


def _short(items: Iterable[str], n: int = 5) -> str:
    items = sorted(items)
    more = f" (+{len(items) - n} more)" if len(items) > n else ""
    return ", ".join(items[:n]) + more


def acknowledged_writes_kept(
    answers: list[Answer], on_active: set[str], history: list[Epoch]
) -> list[Violation]:
    """Every acknowledged write is on the active after healing, unless a lossy activation
    of a later epoch forked the stream below it, within that activation's dial."""
    out: list[Violation] = []
    lost_by_fork: dict[int, set[int]] = defaultdict(set)
    for a in answers:
        if not a.acked or a.item in on_active:
            continue
        fork = next((e for e in history if e.epoch > a.epoch), None)
        if fork is None:
            out.append(
                Violation(
                    "acknowledged-write-lost",
                    f"{a.item} (epoch {a.epoch}, "
                    f"generation {a.generation}, by {a.node}) with no failover after it",
                )
            )
            continue
        dial = AutoDatabaseMountDial(fork.mount_dial) if fork.mount_dial else None
        if dial is None or dial.max_lost_logs == 0:
            out.append(
                Violation(
                    "acknowledged-write-lost",
                    f"{a.item} (epoch {a.epoch}, "
                    f"generation {a.generation}) lost by epoch {fork.epoch}'s "
                    f"{fork.cause or 'activation'} with dial {fork.mount_dial}",
                )
            )
            continue
        if not fork.forked_below(a.generation, a.offset):
            kept = f" (kept through byte {fork.kept_through})" if fork.kept_through else ""
            out.append(
                Violation(
                    "acknowledged-write-lost",
                    f"{a.item} at generation {a.generation} byte {a.offset}, below epoch "
                    f"{fork.epoch}'s start {fork.start_generation}{kept}: not a lost tail",
                )
            )
            continue
        lost_by_fork[fork.epoch].add(a.generation)
    for epoch, generations in sorted(lost_by_fork.items()):
        fork = next(e for e in history if e.epoch == epoch)
        allowed = AutoDatabaseMountDial(fork.mount_dial).max_lost_logs  # type: ignore[arg-type]
        if len(generations) > allowed:
            out.append(
                Violation(
                    "loss-beyond-dial",
                    f"epoch {epoch} lost acknowledged writes "
                    f"of {len(generations)} generations, the dial {fork.mount_dial} allows "
                    f"{allowed}",
                )
            )
    return out


def one_writer_per_epoch(answers: list[Answer]) -> list[Violation]:
    """Never two copies acknowledging in one epoch; never an older epoch's acknowledgement
    sent after a newer epoch's was answered."""
    out: list[Violation] = []
    by_epoch: dict[int, set[str]] = defaultdict(set)
    for a in answers:
        if a.acked:
            by_epoch[a.epoch].add(a.node)
    for epoch, nodes in sorted(by_epoch.items()):
        if len(nodes) > 1:
            out.append(
                Violation("two-writers-one-epoch", f"epoch {epoch} acknowledged by {_short(nodes)}")
            )
    first_answered: dict[int, float] = {}
    for a in answers:
        if a.acked:
            first_answered[a.epoch] = min(first_answered.get(a.epoch, a.answered), a.answered)
    for a in answers:
        newer = [t for e, t in first_answered.items() if e > a.epoch]
        if a.acked and newer and a.sent > min(newer):
            out.append(
                Violation(
                    "two-writers-one-epoch",
                    f"{a.item} acknowledged by {a.node} "
                    f"in epoch {a.epoch} after a newer epoch had acknowledged",
                )
            )
            break
    return out


def converged(held: Mapping[str, Mapping[str, object]], active: str) -> list[Violation]:
    """Every copy's items (item id -> what it holds of it) equal the active's."""
    out: list[Violation] = []
    want = held[active]
    for node, items in sorted(held.items()):
        if node == active:
            continue
        missing = set(want) - set(items)
        extra = set(items) - set(want)
        differ = {k for k in set(want) & set(items) if want[k] != items[k]}
        if missing or extra or differ:
            out.append(
                Violation(
                    "not-converged",
                    f"{node} vs active {active}: missing "
                    f"[{_short(missing)}] extra [{_short(extra)}] differ [{_short(differ)}]",
                )
            )
    return out


def moves_kept(
    moves: list[MoveOutcome],
    source_live: Mapping[str, object],
    target_held: Mapping[str, Mapping[str, object]],
    needed: int,
) -> list[Violation]:
    """A completed move's mailbox is whole on at least `needed` copies of the target (the
    constraint's count); a failed one left its source not soft-deleted."""
    out: list[Violation] = []
    for move in moves:
        if move.state == "Completed":
            whole = [n for n, live in target_held.items() if dict(live) == dict(source_live)]
            if len(whole) < needed:
                partial = {n: len(v) for n, v in target_held.items()}
                out.append(
                    Violation(
                        "move-complete-without-data",
                        f"move {move.id}: "
                        f"{len(source_live)} live items at the source, whole on {whole} "
                        f"only (held: {partial}), {needed} copies needed",
                    )
                )
        elif move.state == "Failed" and move.source_soft_deleted:
            out.append(
                Violation(
                    "failed-move-lost-source", f"move {move.id} failed with its source soft-deleted"
                )
            )
    return out


GONE = "is no longer on the active"


def no_needed_log_truncated(errors: Mapping[str, str]) -> list[Violation]:
    """No copy (status error or node log, by where it was read) reports needing a generation
    its active had already deleted."""
    return [
        Violation("needed-log-truncated", f"{where}: {line.strip()[:200]}")
        for where, text in sorted(errors.items())
        for line in text.splitlines()
        if GONE in line
    ][:5]


def no_false_satisfied(
    answers: list[GuaranteeAnswer],
    *,
    lost_items: set[str],
    faults: list[FaultWindow],
    copies: Mapping[str, frozenset[str]],
    needed: int,
    grace: float,
) -> list[Violation]:
    """No Flush Satisfied for a write then lost; no Health Satisfied for a database while
    faults had kept more of its copies down than the constraint can spare, for longer than
    `grace` seconds (the service's view of a copy is that old at most)."""
    out: list[Violation] = []
    for a in answers:
        if a.status != "SATISFIED":
            continue
        if a.kind == "Flush" and a.item in lost_items:
            out.append(
                Violation(
                    "false-satisfied",
                    f"Flush of {a.item} answered Satisfied and the write was lost",
                )
            )
        if a.kind == "Health":
            down = set().union(
                *(f.down_copies(a.database) for f in faults if f.started + grace <= a.at <= f.ended)
            ) & set(copies[a.database])
            up = len(copies[a.database]) - len(down)
            if up < needed:
                out.append(
                    Violation(
                        "false-satisfied",
                        f"Health of {a.database} answered "
                        f"Satisfied with {_short(down)} down ({up} of {needed} needed "
                        "copies up)",
                    )
                )
    return out[:5]


SERVICE = "guarantee-api"  # in a fault's `down`: the fault strikes the guarantee service


def service_kept_answering(
    answers: list[GuaranteeAnswer], faults: list[FaultWindow], *, until: float, limit: float
) -> list[Violation]:
    """The guarantee service never went `limit` seconds without answering a call (the
    recorder asks several times a second), up to `until` (when it stopped asking), but during
    a fault that struck the service itself (SERVICE in its `down`) and `limit` after: a
    node down, a partition, a full disk or a skewed clock gets a Retry or a NotSatisfied
    from it, never silence."""
    times = sorted(a.at for a in answers if a.status != "ERROR")
    if not answers:
        return []
    if not times:
        return [Violation("service-silent", f"none of {len(answers)} calls was answered")]
    excused = [(f.started, f.ended + limit) for f in faults if SERVICE in f.down]
    out: list[Violation] = []
    for before, after in zip(times, [*times[1:], until], strict=True):
        if after - before <= limit or any(s <= after and before <= e for s, e in excused):
            continue
        failed = [a for a in answers if a.status == "ERROR" and before < a.at <= after]
        reasons = sorted({a.reason for a in failed})
        out.append(
            Violation(
                "service-silent",
                f"no answer for {after - before:.1f}s ({len(failed)} calls failed: "
                f"{_short(reasons)})",
            )
        )
    return out[:5]


def processes_alive(exits: Mapping[str, int | None]) -> list[Violation]:
    """Every process the scenario did not stop is still running (no crash, no crash loop)."""
    return [
        Violation("process-exited", f"{name} exited with {code}")
        for name, code in sorted(exits.items())
        if code is not None
    ]


def messages_delivered_once(
    submissions: list[Submission], items: Mapping[str, str]
) -> list[Violation]:
    """The mailbox's items (item id -> subject; the sender's subject is the message id),
    read on the active once the transport's queue drained, against what was submitted:
    every accepted message under its item id (`item_id_for`), no message in two items, no
    item for a message never accepted.  A message whose submissions were never answered
    (and none accepted) may have been queued: present or absent, but once."""
    accepted = {s.message_id for s in submissions if s.accepted}
    maybe = {s.message_id for s in submissions if not s.refused} - accepted
    out: list[Violation] = []
    missing = [m for m in accepted if items.get(item_id_for(m)) != m]
    if missing:
        out.append(
            Violation(
                "accepted-message-missing",
                f"{len(missing)} of {len(accepted)} accepted messages: {_short(missing)}",
            )
        )
    holders: dict[str, list[str]] = defaultdict(list)
    for item_id, subject in items.items():
        holders[subject].append(item_id)
    twice = {m: ids for m, ids in holders.items() if len(ids) > 1}
    if twice:
        out.append(
            Violation(
                "message-delivered-twice",
                f"{len(twice)} messages: "
                + _short(f"{m} as {' and '.join(sorted(ids))}" for m, ids in twice.items()),
            )
        )
    stray = [f"{i} ({s})" for i, s in items.items() if s not in accepted | maybe]
    if stray:
        out.append(
            Violation(
                "message-never-accepted",
                f"{len(stray)} items for messages not accepted: {_short(stray)}",
            )
        )
    return out


def no_poison(count: int, poisoned: list[Mapping[str, object]]) -> list[Violation]:
    """No delivery ended in the transport's poison queue (nothing the suite sends is a bad
    message): `count` from its queue's states, `poisoned` its poison queue, with why."""
    if not count and not poisoned:
        return []
    why = [f"{p.get('message_id')} -> {p.get('recipient')}: {p.get('reason')}" for p in poisoned]
    return [Violation("message-poisoned", f"{max(count, len(poisoned))} deliveries: {_short(why)}")]
