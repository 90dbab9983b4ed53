"""The per-copy conditions of the Data Guarantee, pure: one copy's frozen snapshot in, a
`CopyVerdict` out, with each condition checked and said in words.

- `judge_active`: the active copy is reachable and mounted.
- `judge_health` (CheckReplicationHealth): a passive copy is Healthy, its replay queue spans
  at most ReplayLagTime + `replay_queue_over_lag`, its copy queue and the caller's average
  copy queue are under their limits.
- `judge_flush` (CheckReplicationFlush): a passive copy that has not failed, counted only
  under the flush's replay-lag limit, following the current stream when the LSN names one,
  has replayed the caller's generation (or past its commit time + the clock skew).

A copy whose status cannot be trusted (its snapshot carries a `problem`) or was never
reported fails Reachable, and every condition after it is left unchecked.  Where a copy is
measurably draining, its verdict predicts when it will meet them (`eta_s`).  How verdicts
make an answer is `policy.py`.
"""

from __future__ import annotations

from datetime import timedelta

from dag_common.guarantee.values import (
    Check,
    CheckOutcome,
    CopyRates,
    CopySnapshot,
    CopyVerdict,
    FlushTarget,
    Limits,
)
from dag_common.model import CopyStatus, CopyStatusReport, Lsn


def seconds(value: float) -> str:
    """A duration in seconds as the reasons say it (3 significant digits below 100 s)."""
    return f"{value:.3g}s" if value < 100 else f"{value:.0f}s"


def _ok(check: Check, passed: bool, detail: str) -> CheckOutcome:
    return CheckOutcome(check, passed, detail)


def _verdict(
    copy: CopySnapshot,
    checks: list[CheckOutcome],
    *,
    average_copy_queue_length: float = 0.0,
    eta_s: float | None = None,
    eta_why: str = "",
) -> CopyVerdict:
    r = copy.report
    return CopyVerdict(
        database=copy.database,
        node=copy.node,
        site=copy.site,
        role=r.role if r else None,
        status=r.status if r else None,
        meets=all(c.passed for c in checks),
        checks=tuple(checks),
        copy_queue_length=r.copy_queue_length if r else 0,
        replay_queue_length=r.replay_queue_length if r else 0,
        last_log_replayed=r.last_log_replayed if r else 0,
        last_replayed_log_time=r.last_replayed_log_time if r else None,
        replay_lag_time=r.replay_lag_time if r else timedelta(0),
        epoch=r.epoch if r else 0,
        healthy=copy.fresh and r is not None and r.status is CopyStatus.HEALTHY,
        average_copy_queue_length=average_copy_queue_length,
        eta_s=eta_s,
        eta_why=eta_why,
    )


def _reachable(copy: CopySnapshot) -> CheckOutcome:
    if copy.report is None and copy.problem is None:
        return _ok(Check.REACHABLE, False, f"node {copy.node} has not reported this copy")
    if copy.problem is not None:
        return _ok(Check.REACHABLE, False, copy.problem)
    return _ok(Check.REACHABLE, True, "status fresh")


def _replay_queue_span(r: CopyStatusReport) -> float | None:
    """Seconds of log time waiting in the replay queue; None if the times are unknown."""
    if r.replay_queue_length <= 0:
        return 0.0
    if r.last_inspected_log_time is None or r.last_replayed_log_time is None:
        return None
    return max(0.0, (r.last_inspected_log_time - r.last_replayed_log_time).total_seconds())


def judge_active(copy: CopySnapshot) -> CopyVerdict:
    """The active copy must be reachable and mounted (AllDatacenters, AllCopies)."""
    reach = _reachable(copy)
    checks = [reach]
    if reach.passed:
        assert copy.report is not None
        mounted = copy.report.status is CopyStatus.MOUNTED
        checks.append(_ok(Check.MOUNTED, mounted, f"status {copy.report.status}"))
    return _verdict(copy, checks)


def judge_health(
    copy: CopySnapshot,
    average: float | None,
    limits: Limits,
    average_clears_in: float | None = None,
) -> CopyVerdict:
    """A passive copy against the four health conditions of the seed; `average_clears_in`:
    seconds until this caller's average falls under its limit as its older queries leave
    the window (`averages.py`), if known."""
    reach = _reachable(copy)
    r = copy.report
    avg = average if average is not None else float(r.copy_queue_length if r else 0)
    if not reach.passed or r is None:
        return _verdict(copy, [reach], average_copy_queue_length=avg)
    healthy = r.status is CopyStatus.HEALTHY
    detail = f"status {r.status}" + (f" ({r.error})" if r.error else "")
    span = _replay_queue_span(r)
    allowed = (r.replay_lag_time + limits.replay_queue_over_lag).total_seconds()
    if span is None:
        replay = _ok(
            Check.REPLAY_QUEUE, False, f"replay queue {r.replay_queue_length} logs, times unknown"
        )
    else:
        replay = _ok(
            Check.REPLAY_QUEUE,
            span <= allowed,
            f"replay queue {r.replay_queue_length} logs spanning {seconds(span)}, limit "
            f"ReplayLagTime {seconds(r.replay_lag_time.total_seconds())} + "
            f"{seconds(limits.replay_queue_over_lag.total_seconds())}",
        )
    cq_limit = limits.max_copy_queue_length
    avg_limit = limits.max_average_copy_queue_length
    checks = [
        reach,
        _ok(Check.HEALTHY, healthy, detail),
        replay,
        _ok(
            Check.COPY_QUEUE,
            r.copy_queue_length < cq_limit,
            f"copy queue {r.copy_queue_length} logs, limit < {cq_limit}",
        ),
        _ok(
            Check.AVERAGE_COPY_QUEUE,
            avg < avg_limit,
            f"average copy queue {avg:.2f} logs over this caller's queries, limit < {avg_limit:g}",
        ),
    ]
    failed = {c.check for c in checks if not c.passed}
    eta, why = _health_eta(r, copy.rates, failed, limits, average_clears_in)
    return _verdict(copy, checks, average_copy_queue_length=avg, eta_s=eta, eta_why=why)


def _health_eta(
    r: CopyStatusReport,
    rates: CopyRates,
    failed: set[Check],
    limits: Limits,
    average_clears_in: float | None,
) -> tuple[float | None, str]:
    """Seconds until a draining healthy copy meets the conditions, if measurable."""
    if not failed:
        return 0.0, ""
    if failed == {Check.AVERAGE_COPY_QUEUE} and average_clears_in is not None:
        window = seconds(limits.average_window_time.total_seconds())
        return average_clears_in, (
            f"its average copy queue falls under the limit as this caller's older queries "
            f"leave the {window} window"
        )
    # Only a draining copy queue is predictable; the average follows the queue down, so it
    # does not block a prediction when the queue itself is also over the limit.
    if not failed <= {Check.COPY_QUEUE, Check.AVERAGE_COPY_QUEUE} or Check.COPY_QUEUE not in failed:
        return None, ""
    rate = rates.copy_queue_per_s
    if rate is None or rate >= 0:
        return None, ""
    excess = r.copy_queue_length - (limits.max_copy_queue_length - 1)
    eta = excess / -rate
    return eta, (
        f"copy queue draining at {-rate:.2f} logs/s as measured, {excess} logs over the limit"
    )


def held_in_block_mode(r: CopyStatusReport, lsn: Lsn) -> bool:
    """Whether a passive copy holds the record at the target LSN in its block-mode buffer:
    fsync'd before it acknowledged it, kept across a restart of its process, and kept as
    that generation by an activation of the copy (the epoch then records how far), so the
    record survives the loss of the active as a replayed one does.  The buffer grows by
    whole group commits: holding a byte past the record's start holds the whole record."""
    return (
        lsn.record_offset is not None
        and r.block.generation == lsn.generation == r.last_log_inspected + 1
        and r.block > lsn.position
    )


def judge_flush(
    copy: CopySnapshot, target: FlushTarget, limits: Limits, epoch: int = 0
) -> CopyVerdict:
    """A passive copy against CheckReplicationFlush: has it replayed the caller's commit?

    `epoch` is the database's current stream epoch; when the target names an epoch, only a
    copy following the current epoch counts (the write is on the current stream: the caller
    checked it was not lost)."""
    reach = _reachable(copy)
    r = copy.report
    if not reach.passed or r is None:
        return _verdict(copy, [reach])
    lag = r.replay_lag_time.total_seconds()
    lag_limit = limits.flush_max_replay_lag.total_seconds()
    # A suspended copy's replayed data counts (an operator paused it); a failed copy's does
    # not: it failed because its data cannot be trusted (corrupt, diverged) or not replayed.
    failed = r.status in (CopyStatus.FAILED, CopyStatus.FAILED_AND_SUSPENDED)
    checks = [
        reach,
        _ok(
            Check.HEALTHY,
            not failed,
            f"status {r.status}" + (f" ({r.error})" if r.error else ""),
        ),
        _ok(
            Check.LAG_FOR_FLUSH,
            lag < lag_limit,
            f"ReplayLagTime {seconds(lag)}, counted only under {seconds(lag_limit)}",
        ),
    ]
    lsn = target.lsn
    if lsn is not None and lsn.epoch:
        checks.append(
            _ok(
                Check.STREAM,
                r.epoch == epoch,
                f"follows the stream of epoch {r.epoch or 'unknown'}, the database is at "
                f"epoch {epoch}",
            )
        )
    eta: float | None = None
    why = ""
    if lsn is not None:
        replayed = r.last_log_replayed >= lsn.generation
        held = held_in_block_mode(r, lsn)
        done = replayed or held
        checks.append(
            _ok(
                Check.REPLAYED,
                done,
                f"holds generation {lsn.generation} through byte {r.block.offset} in block "
                f"mode, past the record at byte {lsn.offset} (durable there, and kept as "
                "that generation if the active is lost)"
                if held and not replayed
                else f"last log replayed {r.last_log_replayed}, needs generation {lsn.generation}",
            )
        )
        rate = copy.rates.replayed_per_s
        if not done and rate and rate > 0:
            missing = lsn.generation - r.last_log_replayed
            eta, why = missing / rate, f"replaying {rate:.2f} logs/s, {missing} logs to go"
    else:
        assert target.commit_time is not None
        needed = target.commit_time + limits.flush_clock_skew
        have = r.last_replayed_log_time
        done = have is not None and have > needed
        checks.append(
            _ok(
                Check.REPLAYED,
                done,
                f"last replayed log time {have.isoformat() if have else 'none'}, needs later "
                f"than commit time + {seconds(limits.flush_clock_skew.total_seconds())} "
                f"= {needed.isoformat()}",
            )
        )
        rate = copy.rates.replayed_log_time_per_s
        if not done and have is not None and rate and rate > 0:
            behind = (needed - have).total_seconds()
            eta = behind / rate
            why = f"replayed log time advancing {rate:.2f}s/s, {seconds(behind)} behind"
    verdict = _verdict(copy, checks)
    if verdict.meets:
        return _verdict(copy, checks, eta_s=0.0)
    if not all(c.passed for c in checks if c.check is not Check.REPLAYED):
        return verdict
    return _verdict(copy, checks, eta_s=eta, eta_why=why)
