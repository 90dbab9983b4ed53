"""Loaded at start-up by the processes the tests run under libfaketime (its directory is
first on their PYTHONPATH: `cluster_harness.libfaketime_env`), and by nothing else.

Debian's libfaketime 0.9.10 fails `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)` with
EINVAL whenever `FAKETIME_DONT_FAKE_MONOTONIC` is set, and that call is Python 3.11's
`time.sleep`: every sleep raised `OSError: [Errno 22] Invalid argument`.  A node under +2 h
that met the cluster store's file locked at start-up (`cluster_store.engine.set_wal` waits
50 ms and tries again) exited at once with "error: Invalid argument" (CI, the clock skew
test; the lock is met only when two nodes open the file at the same moment, so it was
seldom).  That is the tool's fault, not the product's, which sleeps as any program does: here
`time.sleep` waits on an event instead (a timed wait on a condition, which libfaketime
leaves alone), as long as asked.
"""

import threading
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


time.sleep = _sleep
