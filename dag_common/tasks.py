"""Stopping tasks without swallowing the stopper's own cancellation.

`task.cancel()` then `with suppress(CancelledError): await task` is the usual idiom, and it
is wrong: a CancelledError raised there may be the *caller's* (its own task cancelled while it
waits), and the suppress swallows it.  The caller then goes on as if nobody had asked it to
stop.  CI caught it: a node's config updater, cancelled by the node's stop while it was
stopping a passive instance, swallowed the cancel, mounted an active copy after the node had
stopped its instances, and went back to its loop; the stop waited on it forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any] | None]) -> None:
    """Cancel `tasks` (None entries skipped) and wait until every one has ended, even if
    the caller is cancelled meanwhile: a stop half done leaves nothing running.  Then the
    caller's own cancellation, if it came, is raised; else the first exception a task ended
    with (other than its cancellation), so that a task that died is not forgotten."""
    waiting = [t for t in tasks if t is not None]
    for task in waiting:
        task.cancel()
    cancelled = False
    pending = {t for t in waiting if not t.done()}
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True  # the caller's: raised once the tasks have ended
    if cancelled:
        raise asyncio.CancelledError
    errors = [t.exception() for t in waiting if not t.cancelled()]
    for error in errors:
        if error is not None:
            raise error
