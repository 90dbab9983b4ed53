"""A caller's deadline, told to the server it calls, and the server's refusal of a request
read after it (issue 48: an admin call to a frozen node hung, then happened).

The caller sends `X-Request-Deadline: <Unix time in seconds>`: when it stops waiting for
the answer, by its own wall clock.  A server reading the request after that time answers
408 and does nothing of it (`deadline_middleware`): its caller has given up and told its
operator the call may not have happened, and an action taken minutes later, unasked by
anyone still waiting, is the surprise to avoid.

Why a wall-clock time and not a budget counted from the request's arrival (gRPC's
`grpc-timeout`): the case to catch is a server that was stopped (SIGSTOP, a paused VM, a
host that stalled) while its kernel accepted the connection and kept the request; the
server reads it when it runs again, and to it the request has only just arrived.  Only a
time both ends can read says how late that reading was.

The price is that the two clocks are compared.  A server whose clock runs behind the
caller's accepts a request late by as much, as if there were no deadline; one whose clock
runs ahead by more than the call's timeout refuses a request it read in time.  The refusal
carries the server's time, and the caller, which sees the answer arrive in time, says that
the clocks disagree and by how much (`skew_sentence`), rather than that the server was
late.  The cluster's hosts keep time by NTP (the leases and the flush check's
`flush_clock_skew` already assume it), so a timeout of seconds leaves a wide margin.

A request without the header (the nodes' own calls, the mover's, a curl) has no deadline.
The servers' middleware is `dag_common.deadline_middleware`; this module is what both ends
share, and imports no HTTP library.
"""

from __future__ import annotations

import math

HEADER = "X-Request-Deadline"
LATE = 408  # Request Timeout: the request was read after its caller stopped waiting


def header(deadline: float) -> dict[str, str]:
    """The request header telling `deadline` (Unix time, seconds)."""
    return {HEADER: f"{deadline:.3f}"}


def parse(value: str) -> float:
    """The deadline a header value tells; ValueError if it tells none."""
    deadline = float(value)
    if not math.isfinite(deadline) or deadline <= 0:
        raise ValueError(f"{value!r} is not a time")
    return deadline


def late_sentence(method: str, path: str, late_by: float) -> str:
    """Why a request read after its deadline was refused."""
    return (
        f"{method} {path} was read {late_by:.1f}s after its caller's deadline (by this "
        "server's clock): its caller had stopped waiting, so nothing of it was done"
    )


def skew_sentence(callee: str, ahead_by: float) -> str:
    """What a caller says when a server refused as late a request it answered in time."""
    return (
        f"{callee} refused the call as read after its deadline, but answered in time: its "
        f"clock is about {ahead_by:.0f}s ahead of this host's; set both by NTP (a longer "
        "--timeout gets past it meanwhile)"
    )
