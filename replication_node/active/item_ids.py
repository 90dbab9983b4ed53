"""The ids the active gives items written without one: UUIDv7 (RFC 9562), as 32 hex digits.

The first 48 bits are the Unix time in milliseconds and the next 12 a counter within the
millisecond, so the ids one active gives follow each other in the order it gave them; the
last 62 bits are random, so two actives (before and after a failover, or a clock set back)
never give the same id.  The order is what the database's primary-key index is keyed on:
ids in order go in at its right edge, on the same few pages, where random ids (uuid4, before
issue 33) land on a page anywhere in the index, and every copy's replay and the active's LLR
paid for it in pages read and written (bench/shipping.py: the same 59,600 upserts 0.34-0.43 s
with ids in order against 0.45-0.53 s random, at 32 KB pages, and the gap grows with the
index).  Exchange's item ids are ordered for the same reason: a global counter of the
database.  An id stays opaque: nothing reads a time out of it, and ids given by a mover or
a client keep whatever shape they have.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

_VERSION = 0x7
_VARIANT = 0b10
_COUNTER_MAX = 0xFFF


class ItemIds:
    """Gives ids in increasing order within a process (thread-safe).  `now_ms`: the wall
    clock in milliseconds (tests pass their own)."""

    def __init__(self, now_ms: Callable[[], int] | None = None) -> None:
        self._now_ms = now_ms or _wall_ms
        self._lock = threading.Lock()
        self._ms = 0
        self._counter = 0

    def new(self) -> str:
        with self._lock:
            ms = self._now_ms()
            if ms > self._ms:
                # a fresh millisecond: the counter starts low but not at 0 (RFC 9562 6.2)
                self._ms, self._counter = ms, int.from_bytes(os.urandom(1), "big")
            elif self._counter < _COUNTER_MAX:
                self._counter += 1
            else:  # 4,096 ids in one millisecond (or the clock went back): the next one
                self._ms, self._counter = self._ms + 1, 0
            ms, counter = self._ms, self._counter
        rand = int.from_bytes(os.urandom(8), "big") >> 2
        value = (ms << 80) | (_VERSION << 76) | (counter << 64) | (_VARIANT << 62) | rand
        return f"{value:032x}"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


# The active's ids (one sequence per process: every database's store shares it).
new_item_id = ItemIds().new
