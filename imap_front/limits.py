"""How many sessions a front and a user may hold, and how long a failed login from an
address waits: the policy, kept apart from the sockets (`protocol.py` asks it).

- **Sessions.** A connection takes a place in the front (`max_sessions`) before its
  greeting; a login one in its user's (`max_sessions_per_user`).  Full, the connection is
  refused `* BYE [LIMIT]` and the login `NO [LIMIT]` (RFC 5530's code for "an
  implementation limit", the session going on unauthenticated).  Places are given back
  when the connection ends, whatever ended it.
- **Failed logins.** Each failure from an address is answered after `base * 2^(n-1)`
  seconds (n: the address's failures, this one included; at most `cap`); an address
  quiet for `forget_after` starts again, and only the `max_addresses` most recent are
  remembered (a flood of addresses costs a bounded table, not the front's memory).  A good
  login does not clear its address: one account of one's own must not reset the count for
  guessing another's.  Every failure is counted (`failures_total`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from enum import StrEnum

from dag_common.clock import Clock

LOGIN_FAILURES_PER_CONNECTION = 3  # then the connection is closed (BYE)


class Limit(StrEnum):
    """A bound a client ran into."""

    FRONT_SESSIONS = "front_sessions"
    USER_SESSIONS = "user_sessions"
    LOGIN_FAILURES = "login_failures"
    IDLE_TIMEOUT = "idle_timeout"


class Sessions:
    """The front's connections and each user's logged-in sessions, bounded."""

    def __init__(self, *, max_sessions: int, max_per_user: int) -> None:
        self.max_sessions = max_sessions
        self.max_per_user = max_per_user
        self.open = 0
        self._users: Counter[str] = Counter()
        self.refusals: Counter[Limit] = Counter()

    def connect(self) -> bool:
        """A connection's place in the front; False (and counted) when it is full."""
        if self.open >= self.max_sessions:
            self.refusals[Limit.FRONT_SESSIONS] += 1
            return False
        self.open += 1
        return True

    def disconnect(self) -> None:
        self.open -= 1

    def login(self, user: str) -> bool:
        """A session's place among its user's; False (and counted) when they are all taken."""
        if self._users[user] >= self.max_per_user:
            self.refusals[Limit.USER_SESSIONS] += 1
            return False
        self._users[user] += 1
        return True

    def logout(self, user: str) -> None:
        self._users[user] -= 1
        if self._users[user] <= 0:
            del self._users[user]

    def of(self, user: str) -> int:
        return self._users[user]


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """How long a failed login waits before its NO."""

    base: float  # the first failure's wait, seconds (0: none)
    cap: float = 8.0
    forget_after: float = 900.0
    max_addresses: int = 10_000

    def delay(self, failures: int) -> float:
        """The wait for an address's `failures`-th failure (1 for the first)."""
        if self.base <= 0 or failures < 1:
            return 0.0
        return min(self.cap, self.base * 2 ** min(failures - 1, 32))


class LoginThrottle:
    """Failed logins by client address, and the wait each one gets."""

    def __init__(self, policy: ThrottlePolicy, clock: Clock) -> None:
        self.policy = policy
        self._clock = clock
        self._seen: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self.failures_total = 0

    def failed(self, address: str) -> tuple[int, float]:
        """Counts a failure from `address`: (its failures now, the seconds to wait)."""
        now = self._clock.monotonic()
        count, last = self._seen.pop(address, (0, now))
        if now - last > self.policy.forget_after:
            count = 0
        count += 1
        self._seen[address] = (count, now)
        while len(self._seen) > self.policy.max_addresses:
            self._seen.popitem(last=False)
        self.failures_total += 1
        return count, self.policy.delay(count)

    def failures(self, address: str) -> int:
        count, last = self._seen.get(address, (0, 0.0))
        return count if self._clock.monotonic() - last <= self.policy.forget_after else 0
