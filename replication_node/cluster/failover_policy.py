"""The automatic failover's decisions (pure): when a passive copy asks, and what it decides
from the cluster store's active record and every copy's status.

Safety: a copy never decides to activate while the recorded active answers its peers
mounted, nor over an operator's dismount, nor while an operator has paused automatic
failover (`cluster pause`: the cluster store refuses it too, atomically), nor when another
copy is the best one to mount
(`activation.best_copy`: the most inspected, then the lowest activation preference), nor
when another copy was activated since it lost its active.  What it may lose is bounded
afterwards by the activation itself (AutoDatabaseMountDial), and the cluster store's
compare-and-set on the epoch lets only one activation win.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from dag_common.model import CopyStatus, CopyStatusReport, FailoverPause
from replication_node.cluster.mount_policy import MOUNTABLE, best_copy


class FailoverVerdict(StrEnum):
    NO_ACTIVE = "NoActiveToReplace"  # no record, or this node is the recorded active
    FOLLOWS_NEW_ACTIVE = "FollowsNewActive"  # another copy was activated since
    ACTIVE_ANSWERS = "ActiveAnswers"  # the active is mounted and answers its peers
    OPERATOR_DISMOUNT = "OperatorDismount"  # maintenance, not a failure
    PAUSED = "FailoverPaused"  # an operator paused automatic failover
    NOT_BEST = "NotBestCopy"  # another copy is the one to mount
    ACTIVATE = "Activate"  # this node's copy is the best: activate it


@dataclass(frozen=True, slots=True)
class FailoverDecision:
    verdict: FailoverVerdict
    sentence: str
    lost: str = ""  # what happened to the active, said in the sentences that follow
    active_unreachable: bool = False  # the active's node did not answer at all


def failover_due(
    *,
    status: CopyStatus,
    disconnected_since: float | None,
    now: float,
    after: timedelta | None,
    lease_live: bool = True,
) -> bool:
    """Whether a passive copy in `status`, without its active since `disconnected_since`
    (monotonic seconds; None: connected), asks for a failover at `now`: at once if the
    active's lease is no longer live in the cluster store (it acknowledges nothing more: a
    hung or dead active is known by its lease, not by slow calls), else after `after`."""
    if after is None or status not in MOUNTABLE or disconnected_since is None:
        return False
    return not lease_live or now - disconnected_since >= after.total_seconds()


def needs_lease_check(
    *, status: CopyStatus, disconnected_since: float | None, after: timedelta | None
) -> bool:
    """Whether the active's lease is worth reading: the copy is without its active, and
    could be mounted (one store read per pass, only then)."""
    return after is not None and status in MOUNTABLE and disconnected_since is not None


def decide_failover(
    *,
    database: str,
    node: str,
    active_node: str | None,
    active_epoch: int,
    following: str | None,
    reports: dict[str, CopyStatusReport | None],
    paused: FailoverPause | None = None,
) -> FailoverDecision:
    """What this `node`'s copy of `database` does, its active (as the cluster store names it,
    at `active_epoch`) lost for long enough; `following` is the active it last followed,
    `reports` every copy's status by node (None: that node did not answer), and `paused`
    the pause of automatic failover in force (None: not paused)."""
    if active_node is None or active_node == node:
        return FailoverDecision(FailoverVerdict.NO_ACTIVE, f"{database}: no active to replace")
    if active_node != following:
        # Another copy was activated since this one lost its active: the lost one is
        # replaced already.  The new active may still be mounting; this copy follows it at
        # its next reconcile, and only a loss of *that* active is a reason to fail over.
        return FailoverDecision(
            FailoverVerdict.FOLLOWS_NEW_ACTIVE,
            f"{database}: {following} was lost and {active_node} is active now (epoch "
            f"{active_epoch}); this copy follows it, no failover",
        )
    old = reports.get(active_node)
    if old is not None and old.status is CopyStatus.MOUNTED:
        return FailoverDecision(
            FailoverVerdict.ACTIVE_ANSWERS,
            f"{database}: the active on {active_node} answers its peers; no failover",
        )
    if old is not None and old.status is CopyStatus.DISMOUNTED and old.held_for is None:
        # An operator's dismount is maintenance, not a failure (Exchange does not fail over
        # an administrative dismount either); `db mount` or an activation ends it.  A copy
        # back after a crash that holds its last logs for a copy is not that.
        return FailoverDecision(
            FailoverVerdict.OPERATOR_DISMOUNT,
            f"{database}: dismounted on {active_node} by an operator; no failover",
        )
    lost = (
        f"{active_node} is lost" if old is None else f"the active on {active_node} is {old.status}"
    )
    if paused is not None:
        # Said whichever copy is the best, without a word of who that is: the sentence
        # stands unchanged while the pause does (logged once).
        return FailoverDecision(
            FailoverVerdict.PAUSED,
            f"{database}: {lost}; {paused.sentence()}: no copy is activated automatically "
            "(`replication-node cluster resume`, or an operator's `db activate`)",
            lost,
            old is None,
        )
    chosen, why = best_copy([r for r in reports.values() if r is not None])
    if chosen != node:
        return FailoverDecision(
            FailoverVerdict.NOT_BEST,
            f"{database}: {lost}; {why}: not this node's to mount",
            lost,
            old is None,
        )
    return FailoverDecision(
        FailoverVerdict.ACTIVATE, f"{database}: {lost}; {why}", lost, old is None
    )
