"""The one reader of a node's status stream (`GET /v1/status/watch`, `status_watch.py`).

`watch_events` opens the stream and yields its events as they arrive, checked: the first
line is the node's snapshot, every copy after it is of that node, and each line is whole.
However the stream ends (the node closes it, a line is cut or does not decode, a line too
long, silence for `silence` seconds, a refused token, a connection error), it raises
`WatchLost` with one sentence saying why: nothing a stream sent is trusted past its end.
The guarantee service's watchers and `reseed --wait` read through it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp

from dag_common.auth import bearer
from dag_common.status_watch import (
    MAX_LINE,
    Changed,
    Snapshot,
    WatchEvent,
    WatchProtocolError,
    decode,
)


class WatchLost(Exception):
    """The status stream ended; the message says why."""


async def watch_events(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    *,
    node: str,
    heartbeat: float,
    silence: float,
) -> AsyncIterator[WatchEvent]:
    """The events of `node`'s status stream at `url`, each checked, until it ends
    (WatchLost, with why)."""
    started = False
    try:
        async with session.get(
            f"{url}/v1/status/watch",
            params={"heartbeat": f"{heartbeat:g}"},
            headers=bearer(token),
            timeout=aiohttp.ClientTimeout(total=None, connect=silence, sock_read=silence),
            read_bufsize=MAX_LINE,
        ) as resp:
            if resp.status != 200:
                why = "the token is refused" if resp.status == 401 else "no status stream"
                raise WatchLost(f"status stream: HTTP {resp.status} ({why})")
            while True:
                line = await resp.content.readline()
                if not line:
                    raise WatchLost("status stream closed by the node")
                if not line.endswith(b"\n"):
                    raise WatchLost("status stream cut in the middle of a line")
                event = decode(line)
                if isinstance(event, Snapshot):
                    if event.status.node != node:
                        raise WatchProtocolError(f"a snapshot of node {event.status.node!r}")
                    started = True
                elif not started:
                    raise WatchProtocolError("a first line that is not the snapshot")
                elif isinstance(event, Changed) and any(c.node != node for c in event.copies):
                    raise WatchProtocolError("a copy of another node")
                yield event
    except WatchProtocolError as exc:
        raise WatchLost(f"status stream sent {exc}") from None
    except ValueError as exc:  # aiohttp: a line longer than the buffer
        raise WatchLost(f"status stream sent a line too long ({exc})") from None
    except TimeoutError:
        raise WatchLost(f"status stream silent for {silence:g}s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise WatchLost(f"status stream: {exc.__class__.__name__}: {exc}") from None
