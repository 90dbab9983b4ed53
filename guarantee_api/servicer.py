"""The gRPC servicer, kept thin: validate the request, read a snapshot of the live view,
call the pure rules, map the answer to protobuf. Domain errors become gRPC status codes here
and nowhere else; no error path ever answers Satisfied.

A request with a `wait` is judged again at every change of the view until the answer is
Satisfied (or a flush is known lost), or the wait ends: then the answer of that moment goes
out, with `waited`.  The wait is cut to `max_wait` and to the call's deadline (less a margin
for the answer to travel), and the reason says so.  While it waits, the caller's copy-queue
averages take a sample at most once a second, as if it asked that often.  Every answer
given is remembered per (database, method) in `last_answers`, for the status page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.clock import Clock
from dag_common.config import NAME_RULE, is_config_name
from dag_common.echo import quoted
from dag_common.guarantee.policy import evaluate_flush, evaluate_health
from dag_common.guarantee.values import Answer, CopyVerdict, FlushTarget, GuaranteeStatus, Limits
from dag_common.guarantee_wire import GuaranteeRequest, lsn_from_pb
from dag_common.model import CopyRole
from dag_common.model import DataMoveReplicationConstraint as Constraint
from guarantee_api.averages import CopyQueueAverages
from guarantee_api.errors import InvalidRequestError, UnknownDatabaseError
from guarantee_api.last_answers import LastAnswers, Method
from guarantee_api.metrics import Metrics
from guarantee_api.view import LiveView

logger = logging.getLogger(__name__)

_CONSTRAINTS = {
    pb.CONSTRAINT_NONE: Constraint.NONE,
    pb.CONSTRAINT_SECOND_COPY: Constraint.SECOND_COPY,
    pb.CONSTRAINT_SECOND_DATACENTER: Constraint.SECOND_DATACENTER,
    pb.CONSTRAINT_ALL_DATACENTERS: Constraint.ALL_DATACENTERS,
    pb.CONSTRAINT_ALL_COPIES: Constraint.ALL_COPIES,
}
_CONSTRAINT_TO_PB = {v: k for k, v in _CONSTRAINTS.items()}
_STATUS_TO_PB = {
    GuaranteeStatus.RETRY: pb.RETRY,
    GuaranteeStatus.SATISFIED: pb.SATISFIED,
    GuaranteeStatus.NOT_SATISFIED: pb.NOT_SATISFIED,
}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}
_ROLE_TO_PB = {CopyRole.ACTIVE: pb.COPY_ROLE_ACTIVE, CopyRole.PASSIVE: pb.COPY_ROLE_PASSIVE}
MAX_CALLER_ID = 256
# Commit times from 1970 up to the year 9000: any real commit, with room for the clock-skew
# arithmetic (datetime ends at 9999-12-31, and commit time + skew must not overflow).
MAX_COMMIT_SECONDS = 221845392000  # 9000-01-01T00:00:00Z
# Kept back from the call's deadline for the answer itself: a tenth of the time the call
# has, between 0.1 s and 1 s.  A fixed 0.1 s was too little on a loaded host (the answer
# lost to DEADLINE_EXCEEDED at load 30, where the caller should hear NotSatisfied with its
# reason); a tenth keeps a short call's wait useful and a long one's margin generous.
DEADLINE_MARGIN_SHARE, DEADLINE_MARGIN_LEAST, DEADLINE_MARGIN_MOST = 0.1, 0.1, 1.0


def deadline_margin(time_remaining: float) -> float:
    """The seconds kept back from a call's deadline for its answer."""
    share = time_remaining * DEADLINE_MARGIN_SHARE
    return min(DEADLINE_MARGIN_MOST, max(DEADLINE_MARGIN_LEAST, share))


AVERAGE_SAMPLE_EVERY = 1.0  # seconds between a waiting health check's average samples


def requested_wait(
    request: GuaranteeRequest, max_wait: float, time_remaining: float | None
) -> tuple[float, str]:
    """The seconds a request may wait, and what cut it (empty: nothing); InvalidRequestError
    for a wait that is negative or not a valid Duration."""
    if not request.HasField("wait"):
        return 0.0, ""
    wait = request.wait
    if not -999_999_999 <= wait.nanos <= 999_999_999 or (
        wait.seconds and wait.nanos and (wait.seconds < 0) != (wait.nanos < 0)
    ):
        raise InvalidRequestError("wait is not a valid Duration")
    asked = wait.seconds + wait.nanos / 1e9
    if asked < 0:
        raise InvalidRequestError(f"wait must not be negative (got {asked:g}s)")
    seconds, note = asked, ""
    if seconds > max_wait:
        seconds, note = max_wait, f"the wait asked, {asked:g}s, is capped at {max_wait:g}s"
    if time_remaining is not None and seconds > time_remaining - deadline_margin(time_remaining):
        seconds = max(0.0, time_remaining - deadline_margin(time_remaining))
        note = f"the wait asked, {asked:g}s, is cut to the call's deadline ({seconds:.3g}s)"
    return seconds, note


def flush_target(request: pb.CheckReplicationFlushRequest) -> FlushTarget:
    """What a flush asks to be replicated, checked: InvalidRequestError naming the field."""
    which = request.WhichOneof("target")
    if which is None:
        raise InvalidRequestError("one of commit_time or lsn is required")
    if which == "lsn":
        try:
            return FlushTarget(lsn=lsn_from_pb(request.lsn))
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
    ts = request.commit_time
    if not 0 <= ts.nanos < 1_000_000_000 or not 0 < ts.seconds < MAX_COMMIT_SECONDS:
        raise InvalidRequestError(
            "commit_time is not a valid timestamp between 1970 and the year 9000"
        )
    return FlushTarget(commit_time=ts.ToDatetime(tzinfo=UTC))


class DataGuaranteeServicer(pb_grpc.DataGuaranteeServicer):
    """CheckReplicationHealth and CheckReplicationFlush over the cached live view."""

    def __init__(
        self,
        *,
        view: LiveView,
        averages: CopyQueueAverages,
        limits: Limits,
        constraints: dict[str, Constraint],
        clock: Clock,
        metrics: Metrics,
        max_wait: float = 60.0,
        last_answers: LastAnswers | None = None,
    ) -> None:
        self._view = view
        self.last_answers = last_answers if last_answers is not None else LastAnswers()
        self._max_wait = max_wait
        self._averages = averages
        self._limits = limits
        self._constraints = constraints
        self._clock = clock
        self._metrics = metrics
        # Answers are pure functions of (view version, freshness, request, averages): while
        # the view does not change, equal questions get the same response object. This is
        # what keeps an answer cheap under load (see bench/README.md).
        self._cache: dict[tuple[object, ...], pb.GuaranteeResponse] = {}

    def _cached(
        self, key: tuple[object, ...], compute: Callable[[], Answer]
    ) -> tuple[GuaranteeStatus, pb.GuaranteeResponse]:
        # Keys name their database's version: an entry of an older one is never hit again.
        if len(self._cache) > 4096:
            self._cache.clear()
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = to_proto(compute())
        return _STATUS_FROM_PB[hit.status], hit

    def _common(self, request: GuaranteeRequest) -> tuple[str, str, Constraint]:
        database, caller, raw = request.database, request.caller_id, request.constraint
        if not database:
            raise InvalidRequestError("database is required")
        if not is_config_name(database):
            raise InvalidRequestError(f"database {quoted(database)} is not a name ({NAME_RULE})")
        if not caller:
            raise InvalidRequestError("caller_id is required")
        if len(caller) > MAX_CALLER_ID:
            raise InvalidRequestError(f"caller_id is longer than {MAX_CALLER_ID} characters")
        if raw != pb.CONSTRAINT_UNSPECIFIED and raw not in _CONSTRAINTS:
            raise InvalidRequestError(f"constraint {raw} is not a DataMoveReplicationConstraint")
        if database not in self._constraints:
            raise UnknownDatabaseError(f"database {quoted(database)} is not in the cluster config")
        constraint = _CONSTRAINTS.get(raw) or self._constraints[database]
        return database, caller, constraint

    def _health(
        self, request: pb.CheckReplicationHealthRequest, sample: bool = True
    ) -> tuple[GuaranteeStatus, pb.GuaranteeResponse]:
        database, caller, constraint = self._common(request)
        view = self._view.snapshot(database, self._clock.monotonic())
        queues = {c.node: c.report.copy_queue_length for c in view.copies if c.fresh and c.report}
        if sample:
            averages = self._averages.record(caller, database, queues)
        else:
            averages = self._averages.current(caller, database, queues)
        limit = self._limits.max_average_copy_queue_length
        clears = (
            self._averages.clears_in(caller, database, limit)
            if any(a >= limit for a in averages.values())
            else {}
        )
        key = (
            "health", database, self._view.version(database), constraint,
            tuple(c.problem for c in view.copies), tuple(sorted(averages.items())),
            tuple(sorted((node, round(s)) for node, s in clears.items())),
        )  # fmt: skip
        return self._cached(
            key, lambda: evaluate_health(view, constraint, averages, self._limits, clears)
        )

    def _flush(
        self, request: pb.CheckReplicationFlushRequest
    ) -> tuple[GuaranteeStatus, pb.GuaranteeResponse]:
        database, _, constraint = self._common(request)
        target = flush_target(request)
        view = self._view.snapshot(database, self._clock.monotonic())
        key = (
            "flush", database, self._view.version(database), constraint,
            tuple(c.problem for c in view.copies), target,
        )  # fmt: skip
        return self._cached(key, lambda: evaluate_flush(view, constraint, target, self._limits))

    async def _serve(
        self,
        method: Method,
        request: GuaranteeRequest,
        compute: Callable[[bool], tuple[GuaranteeStatus, pb.GuaranteeResponse]],
        context: grpc.aio.ServicerContext,
    ) -> pb.GuaranteeResponse:
        """Answer `request` with `compute(sample)`, judged again at each change of the view
        while it may wait; `sample`: whether this judgement adds to the caller's averages."""
        started = self._clock.monotonic()
        code: grpc.StatusCode | None = None
        try:
            remaining = context.time_remaining()
            wait, note = requested_wait(request, self._max_wait, remaining)
            # The call's deadline is on the real clock, whatever clock the service keeps.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + remaining - deadline_margin(remaining) if remaining else None
            database = request.database
            status, response = compute(True)
            # Read after the judgement, with nothing awaited between: the version it saw.
            version = self._view.version(database)
            sampled = took = self._clock.monotonic()
            took -= started
            while wait and status is not GuaranteeStatus.SATISFIED and not response.lost:
                left = started + wait - self._clock.monotonic()
                real_left = deadline - loop.time() if deadline is not None else None
                if left <= 0 or (real_left is not None and real_left <= 0):
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._view.wait_change(database, version, started + wait, self._clock),
                        real_left,
                    )
                begun = self._clock.monotonic()
                sample = begun - sampled >= AVERAGE_SAMPLE_EVERY
                status, response = compute(sample)
                version = self._view.version(database)
                sampled = begun if sample else sampled
                took = self._clock.monotonic() - begun
            if request.HasField("wait"):
                response = _with_wait(response, self._clock.monotonic() - started, note)
        except InvalidRequestError as exc:
            code, details = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
        except UnknownDatabaseError as exc:
            code, details = grpc.StatusCode.NOT_FOUND, str(exc)
        except Exception:
            logger.exception("%s failed", method)
            self._metrics.unexpected.labels("request").inc()
            code, details = grpc.StatusCode.INTERNAL, "internal error; see the service log"
        if code is not None:
            self._metrics.observe_request(method, code.name, self._clock.monotonic() - started)
            await context.abort(code, details)
        # The latency of the answer itself: the judgement that gave it, not the wait.
        self._metrics.observe_request(method, grpc.StatusCode.OK.name, took, status.value)
        self.last_answers.record(
            database=response.database,
            method=method,
            status=status,
            at=self._clock.now(),
            caller_id=request.caller_id,
            constraint=_CONSTRAINTS[response.constraint],
            reason=response.reason,
        )
        return response

    async def CheckReplicationHealth(self, request, context):
        """Are enough copies healthy and close enough? (CheckReplicationHealth)"""
        return await self._serve(
            Method.HEALTH, request, lambda s: self._health(request, s), context
        )

    async def CheckReplicationFlush(self, request, context):
        """Have enough copies replayed the caller's commit? (CheckReplicationFlush)"""
        return await self._serve(Method.FLUSH, request, lambda _: self._flush(request), context)


def _with_wait(response: pb.GuaranteeResponse, waited: float, note: str) -> pb.GuaranteeResponse:
    """A copy of a (shared, cached) response that says how long it waited, and any cut."""
    out = pb.GuaranteeResponse()
    out.CopyFrom(response)
    out.waited.CopyFrom(_duration(waited))
    if note:
        out.reason = f"{out.reason} ({note})"
    return out


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def _verdict_to_proto(v: CopyVerdict) -> pb.CopyVerdict:
    msg = pb.CopyVerdict(
        database=v.database,
        node=v.node,
        site=v.site,
        role=_ROLE_TO_PB.get(v.role, pb.COPY_ROLE_UNSPECIFIED) if v.role else 0,
        copy_status=v.status.value if v.status else "",
        meets=v.meets,
        checks=[
            pb.CheckResult(name=c.check.value, passed=c.passed, detail=c.detail) for c in v.checks
        ],
        copy_queue_length=max(0, v.copy_queue_length),
        average_copy_queue_length=v.average_copy_queue_length,
        replay_queue_length=max(0, v.replay_queue_length),
        last_log_replayed=max(0, v.last_log_replayed),
        replay_lag_time=_duration(v.replay_lag_time.total_seconds()),
        epoch=max(0, v.epoch),
    )
    if v.last_replayed_log_time is not None:
        ts = Timestamp()
        ts.FromDatetime(v.last_replayed_log_time)
        msg.last_replayed_log_time.CopyFrom(ts)
    return msg


def to_proto(answer: Answer) -> pb.GuaranteeResponse:
    """The protobuf form of an answer."""
    return pb.GuaranteeResponse(
        status=_STATUS_TO_PB[answer.status],
        retry_after=_duration(answer.retry_after.total_seconds()),
        reason=answer.reason,
        constraint=_CONSTRAINT_TO_PB[answer.constraint],
        copies=[_verdict_to_proto(v) for v in answer.copies],
        database=answer.database,
        epoch=max(0, answer.epoch),
        lost=answer.lost,
        expected_in=_duration(answer.expected_in.total_seconds())
        if answer.expected_in is not None
        else None,
    )
