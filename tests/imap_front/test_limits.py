"""The front's limits as policy (`imap_front/limits.py`) and its added commands' parsing
(`imap_front/commands.py`), with a manual clock."""

from __future__ import annotations

import pytest
from pymap.parsing import Params
from pymap.parsing.exceptions import NotParseable

from dag_common.clock import ManualClock
from imap_front.commands import MAX_ENABLE, EnableCommand, NamespaceCommand, enabled
from imap_front.limits import Limit, LoginThrottle, Sessions, ThrottlePolicy


def test_a_failed_login_waits_longer_for_each_failure_from_its_address_up_to_the_cap():
    policy = ThrottlePolicy(base=0.5, cap=8.0, forget_after=900.0, max_addresses=2)
    assert [policy.delay(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 8, 8]
    assert ThrottlePolicy(base=0).delay(5) == 0.0
    clock = ManualClock()
    throttle = LoginThrottle(policy, clock)
    assert throttle.failed("192.0.2.1") == (1, 0.5)
    assert throttle.failed("192.0.2.1") == (2, 1.0)
    assert throttle.failed("192.0.2.2") == (1, 0.5), "another address starts on its own"
    assert throttle.failures("192.0.2.1") == 2 and throttle.failures_total == 3


async def test_an_address_quiet_long_enough_starts_again_and_the_table_stays_bounded():
    clock = ManualClock()
    throttle = LoginThrottle(ThrottlePolicy(base=1, forget_after=60, max_addresses=2), clock)
    throttle.failed("a")
    throttle.failed("a")
    await clock.advance(61)
    assert throttle.failures("a") == 0
    assert throttle.failed("a") == (1, 1), "forgotten after a quiet minute"
    throttle.failed("b")
    throttle.failed("c")
    assert throttle.failures("a") == 0, "the oldest address dropped, the table bounded"
    assert throttle.failures("c") == 1 and throttle.failures_total == 5


def test_sessions_are_bounded_per_front_and_per_user_and_given_back():
    sessions = Sessions(max_sessions=2, max_per_user=1)
    assert sessions.connect() and sessions.connect()
    assert not sessions.connect(), "the front is full"
    sessions.disconnect()
    assert sessions.connect()
    assert sessions.login("alice") and not sessions.login("alice") and sessions.login("bob")
    sessions.logout("alice")
    assert sessions.of("alice") == 0 and sessions.login("alice")
    assert sessions.refusals == {Limit.FRONT_SESSIONS: 1, Limit.USER_SESSIONS: 1}


def parse(command: type, line: bytes):
    cmd, _ = command.parse(memoryview(line), Params(tag=b"t1"))
    return cmd


def test_enable_and_namespace_parse():
    cmd = parse(EnableCommand, b" condstore X-FOO\r\n")
    assert cmd.capabilities == (b"CONDSTORE", b"X-FOO")
    assert enabled(cmd.capabilities) == b"ENABLED CONDSTORE", "CONDSTORE alone is enablable"
    assert enabled((b"X-FOO",)) == b"ENABLED"
    assert isinstance(parse(NamespaceCommand, b"\r\n"), NamespaceCommand)
    for bad in [b"\r\n", b" \r\n", b" (X)\r\n", b" X" * (MAX_ENABLE + 1) + b"\r\n"]:
        with pytest.raises(NotParseable):
            parse(EnableCommand, bad)
    with pytest.raises(NotParseable):
        parse(NamespaceCommand, b" x\r\n")
