"""Which copy may become active, and what mounting it would lose: pure policy.

- `generations_at_risk` gathers what is known of the lost active's stream: the highest
  generation holding acknowledged commits, from the cluster store (LastLogGenerated and the
  open generation the active announced before acknowledging its first commit) and from every
  reachable copy's report (what it last heard from the active), and whether that generation
  is the open log E00.log, with the count of its acknowledged commits where a copy heard it.
- `assess_loss` counts the logs a copy would lose (those generations above its
  LastLogInspected, the open log included once it holds an acknowledged commit; an open log
  holding only its header holds nothing to lose), checks them against AutoDatabaseMountDial
  (Lossless 0, GoodAvailability 3, BestAvailability 6; an operator may override the dial for
  one call) and says in one sentence exactly what is lost.
- `mount_decision`: may this copy be mounted at all (the old active gone, the copy fit and
  not activation-suspended), and then `assess_loss`.
- `assess_activation`: all of the above for one activation, from the cluster store's record
  and every copy's report (with what a synchronous copy's block-mode buffer covers).
- `best_copy`: which passive copy an automatic failover mounts (never an activation-suspended
  one, as Exchange's Best Copy Selection); `last_logs_to_copy`: whether the copy taking over
  first copies the old active's last logs.

Invariant: a copy never mounts over more lost logs than the dial allows, counting the open
log; under Lossless no copy mounts over an acknowledged write.  Under Lossless with the old
active's node unreachable, nothing mounts: when that node returns it is still the active in
the cluster store, its crash recovery keeps every acknowledged record of its E00.log, and its
copies catch up from it (README: "Lossless").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dag_common.cluster_store.interface import ActiveRecord
from dag_common.model import AutoDatabaseMountDial, CopyRole, CopyStatus, CopyStatusReport
from replication_node.log.sizes import HEADER_SIZE

# A copy in any other state has no consistent database to mount (seeding, failed) or was
# stopped by an operator for a reason (suspended): resume it first.
MOUNTABLE = frozenset({CopyStatus.HEALTHY, CopyStatus.DISCONNECTED_AND_HEALTHY})


@dataclass(frozen=True, slots=True)
class OpenLog:
    """The lost active's open log E00.log, known to hold acknowledged commits."""

    generation: int
    commits: int | None  # at least this many acknowledged commits (None: count unknown)


@dataclass(frozen=True, slots=True)
class AtRisk:
    """The highest generation known to hold acknowledged commits (closed or open), and the
    open log when that generation is it."""

    generated: int
    open_log: OpenLog | None = None


@dataclass(frozen=True, slots=True)
class LossAssessment:
    """The logs a copy would lose by mounting, within the dial or not, in one sentence."""

    allowed: bool
    lost_logs: int
    lost_open_log: bool
    lost_commits: int | None  # at least this many acknowledged commits of the open log
    sentence: str


@dataclass(frozen=True, slots=True)
class MountDecision:
    """Whether a copy may be mounted, with the logs it would lose and why."""

    allowed: bool
    lost_logs: int
    reason: str
    lost_open_log: bool = False
    lost_commits: int | None = None


def generations_at_risk(
    *, last_log_generated: int, open_generation: int, reports: Iterable[CopyStatusReport]
) -> AtRisk:
    """What is known to hold acknowledged commits, from the cluster store's record (its
    LastLogGenerated and announced open generation) and the copies' reports.

    A report whose `open_commits` > 0 names the open log as its `last_log_generated` (and so
    the generation below it as closed); the store's open generation counts as the open log
    only while no one knows it closed.  Counts heard by copies are lower bounds: the largest
    heard for that generation is taken."""
    closed = last_log_generated
    heard: dict[int, int | None] = {}
    if open_generation > 0:
        heard[open_generation] = None
    for r in reports:
        if r.open_commits > 0:
            closed = max(closed, r.last_log_generated - 1)
            heard[r.last_log_generated] = max(heard.get(r.last_log_generated) or 0, r.open_commits)
        else:
            closed = max(closed, r.last_log_generated)
    newest = max(heard, default=0)
    if newest > closed:
        return AtRisk(newest, OpenLog(newest, heard[newest]))
    return AtRisk(closed)


def assess_loss(
    *,
    at_risk: AtRisk,
    last_log_inspected: int,
    dial: AutoDatabaseMountDial,
    node: str,
    active_node: str,
) -> LossAssessment:
    """The logs the copy on `node` loses by mounting now: every generation holding
    acknowledged commits above its LastLogInspected, the open log included."""
    inspected = last_log_inspected
    lost = max(0, at_risk.generated - inspected)
    allowed = lost <= dial.max_lost_logs
    open_log = at_risk.open_log
    open_lost = lost > 0 and open_log is not None and open_log.generation > inspected
    commits = open_log.commits if open_lost and open_log is not None else None
    if lost == 0:
        what = (
            f"0 log(s) lost ({node} has inspected through generation {inspected}; the highest "
            f"holding acknowledged commits is {at_risk.generated})"
        )
    else:
        first, last = inspected + 1, at_risk.generated
        span = f"generation {last}" if first == last else f"generations {first}-{last}"
        if open_lost:
            count = (
                f"at least {commits} acknowledged commit(s)"
                if commits
                else f"acknowledged commits (count unknown: {active_node} is unreachable)"
            )
            being = "the open log" if first == last else f"{last} being the open log"
            span += f", {being} E00.log with {count}"
        what = f"{lost} log(s) lost: {span} (inspected through {inspected} on {node})"
    if allowed:
        verdict = f"within the {dial.max_lost_logs} {dial} allows"
    else:
        verdict = (
            f"more than {dial} allows ({dial.max_lost_logs}); the copy stays passive until "
            f"{active_node} returns with its logs, unless an operator accepts the loss "
            "(--mount-dial)"
        )
    return LossAssessment(allowed, lost, open_lost, commits, f"{what}: {verdict}")


def mount_decision(
    *,
    node: str,
    copy: CopyStatusReport | None,
    at_risk: AtRisk,
    dial: AutoDatabaseMountDial,
    active_reachable: bool,
    active_node: str,
) -> MountDecision:
    """May the copy on `node` become active?  Refusals change nothing."""
    if active_reachable:
        return MountDecision(
            False, 0, f"the active copy on {active_node} is running; move it with a switchover"
        )
    if copy is None:
        return MountDecision(False, 0, f"the copy on {node} cannot be reached")
    if copy.role is CopyRole.ACTIVE:
        return MountDecision(False, 0, f"the copy on {node} is already active")
    if copy.status not in MOUNTABLE:
        why = f": {copy.error}" if copy.error else ""
        return MountDecision(False, 0, f"the copy on {node} is {copy.status}{why}")
    if copy.activation_suspended:
        return MountDecision(False, 0, activation_suspended_reason(copy))
    loss = assess_loss(
        at_risk=at_risk,
        last_log_inspected=copy.last_log_inspected,
        dial=dial,
        node=node,
        active_node=active_node,
    )
    return MountDecision(
        loss.allowed, loss.lost_logs, loss.sentence, loss.lost_open_log, loss.lost_commits
    )


def activation_suspended_reason(copy: CopyStatusReport) -> str:
    """Why an activation-suspended copy is not activated, and what lifts it."""
    why = copy.note.removeprefix("activation suspended") if copy.note else ""
    return (
        f"the copy on {copy.node} is activation-suspended{why}; resume it first "
        f"(replication-node db resume {copy.database} --node {copy.node} --activation-only)"
    )


def buffered(copy: CopyStatusReport) -> int:
    """How far a copy holds the open generation after its LastLogInspected in its block-mode
    buffer (bytes; 0: nothing beyond its last inspected generation)."""
    generation, offset = copy.block
    if generation == copy.last_log_inspected + 1 and offset > HEADER_SIZE:
        return offset
    return 0


def synchronously_held(
    *,
    copy: CopyStatusReport,
    reports: dict[str, CopyStatusReport | None],
    old_active: str,
    synchronous_copies: int,
    open_generation: int,
) -> tuple[bool, str]:
    """Whether `copy`'s block-mode buffer holds every commit the lost `old_active`
    acknowledged in its open generation, and why (a sentence; empty without synchronous
    copies).  Each was held by `synchronous_copies` passive copies before it was answered;
    with fewer of them unreachable than that, a reachable copy holds each one, and the copy
    holding the most of the open log holds them all."""
    if synchronous_copies < 1:
        return False, ""
    if not buffered(copy) or copy.block.generation != open_generation:
        return False, (
            f"{copy.node}'s block-mode buffer does not hold the open generation {open_generation}"
        )
    passives = {node: r for node, r in reports.items() if node != old_active}
    unreachable = sorted(node for node, r in passives.items() if r is None)
    if len(unreachable) >= synchronous_copies:
        return False, (
            f"{len(unreachable)} passive copies cannot be asked ({', '.join(unreachable)}), "
            f"as many as the {synchronous_copies} synchronous copies a commit needed"
        )
    mine = (copy.last_log_inspected, buffered(copy))
    ahead = sorted(
        node
        for node, r in passives.items()
        if r is not None and (r.last_log_inspected, buffered(r)) > mine
    )
    if ahead:
        return False, f"{', '.join(ahead)} hold(s) more of the open log than {copy.node}"
    return True, (
        f"every acknowledged commit was held by {synchronous_copies} synchronous cop(ies) "
        f"and {copy.node} holds the most of the open log (through byte {buffered(copy)})"
    )


def best_copy(copies: list[CopyStatusReport]) -> tuple[str | None, str]:
    """Which passive copy an automatic failover mounts: of the copies that can be mounted,
    the one that has inspected the most (fewest logs lost), then holds the most of the open
    log in its block-mode buffer, then the lowest activation preference.  The mount dial is
    checked on it by `mount_decision` afterwards.  An activation-suspended copy is never
    chosen, however far ahead it is."""
    fit = [c for c in copies if c.role is CopyRole.PASSIVE and c.status in MOUNTABLE]
    eligible = [c for c in fit if not c.activation_suspended]
    barred = sorted(c.node for c in fit if c.activation_suspended)
    if not eligible:
        if barred:
            return None, (
                "no passive copy that is Healthy or DisconnectedAndHealthy may be activated "
                f"({', '.join(barred)}: activation suspended)"
            )
        return None, "no passive copy is Healthy or DisconnectedAndHealthy"
    best = min(
        eligible, key=lambda c: (-c.last_log_inspected, -buffered(c), c.activation_preference)
    )
    held = (
        f" and generation {best.block.generation} through byte {buffered(best)} in block mode"
        if buffered(best)
        else ""
    )
    skipped = f" ({', '.join(barred)}: activation suspended)" if barred else ""
    return best.node, (
        f"{best.node} has inspected through generation {best.last_log_inspected}{held} "
        f"(activation preference {best.activation_preference}) of "
        f"{', '.join(c.node for c in eligible)}{skipped}"
    )


def last_logs_to_copy(old: CopyStatusReport | None, copy: CopyStatusReport | None) -> bool:
    """Whether the copy taking over should first copy the old active's last logs: the old
    active's node answers, its copy is not mounted, and the copy could be mounted."""
    return (
        old is not None
        and old.role is CopyRole.ACTIVE
        and old.status is not CopyStatus.MOUNTED
        and copy is not None
        and copy.role is CopyRole.PASSIVE
        and copy.status in MOUNTABLE
    )


@dataclass(frozen=True, slots=True)
class ActivationAssessment:
    """What activating a copy now would lose and whether it may: the generations at risk,
    whether its block-mode buffer counts as holding the open generation (synchronous
    copies), why it does or does not (empty without synchronous copies), and the decision."""

    at_risk: AtRisk
    covered: bool
    held: str
    decision: MountDecision


def assess_activation(
    *,
    node: str,
    old: ActiveRecord,
    reports: dict[str, CopyStatusReport | None],
    dial: AutoDatabaseMountDial,
    synchronous_copies: int,
) -> ActivationAssessment:
    """May the copy on `node` take over from the lost active `old`, as the cluster store
    knows it (its node, its last closed generation, and its open one, announced before the
    open log's first acknowledgement), with every copy's report by node (None: no answer)?"""
    old_active = old.node
    # The store's LastLogGenerated is published just after each roll and may miss the last
    # one; any copy that was told of a later generation by the active's notifications knows
    # better.  The higher figure counts: lost logs are never underestimated from what is known.
    at_risk = generations_at_risk(
        last_log_generated=old.last_log_generated,
        open_generation=old.open_generation,
        reports=[r for r in reports.values() if r is not None],
    )
    copy, old_report = reports.get(node), reports.get(old_active)
    # Synchronous copies: every commit the lost active acknowledged was held by that many
    # copies in block mode; if this copy's buffer must hold them all, it counts as the open
    # generation held (kept before the role moves).
    covered, held = (
        synchronously_held(
            copy=copy,
            reports=reports,
            old_active=old_active,
            synchronous_copies=synchronous_copies,
            open_generation=at_risk.generated,
        )
        if copy is not None
        else (False, "")
    )
    decision = mount_decision(
        node=node,
        copy=(
            copy.model_copy(update={"last_log_inspected": at_risk.generated})
            if covered and copy is not None
            else copy
        ),
        at_risk=at_risk,
        dial=dial,
        active_reachable=old_report is not None and old_report.status is CopyStatus.MOUNTED,
        active_node=old_active,
    )
    return ActivationAssessment(at_risk, covered, held, decision)
