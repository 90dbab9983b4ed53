"""`GET /v1/databases/{db}/mailboxes/{mailbox}/changes?since_change=N&wait=S&epoch=E`: a
mailbox's change feed, the long poll an IMAP front's IDLE is fed by (docs/concepts/imap.md).

Answered (`dag_common.store_api.Changes`) at once when the mailbox has a change above N, or
when the copy's epoch is not the E the caller names (a switchover or failover came between);
else as soon as a change of it is committed and visible here; else at the end of the wait
(S seconds, 0..60, 25 by default), unchanged.  The active wakes its waiters where a commit
becomes visible (`active/change_feed.py`): nothing polls for changes.

**Only the mounted active answers; a passive copy answers 409 naming the active**, as a
write does.  An IMAP session reads and writes through the active (the one node client
follows it), so after a wake it reads there: a passive's wake would announce nothing it can
use, and would come late, since a passive replays closed generations (up to a roll interval
behind).  Being told 409 instead, a caller finds the active as every store call does.

**When the copy stops being the mounted active**, every waiter is woken (the feed ends:
`ActiveInstance._end_changes`, at a switchover's hand-over, a failure, a dismount, a
node stopping) and answered as a store call is then: 409 naming the active (`switching_to`
during a switchover; null while the new one is not known), 503 for a dismounted active.  The
node client (`NodeStoreClient.changes`) follows a 409 and asks the new active with the epoch
it knew, which that one does not have: it answers at once, and the front learns the epoch.

**Bounded.**  At most `nodes[].change_waiters` requests wait on one node (503 with
Retry-After past it; `replication_change_waiters` counts them).  A waiter is an
`asyncio.Event`, no thread.  aiohttp does not cancel a handler whose caller went away (the
node leaves `handler_cancellation` off: it would cancel writes mid-commit), so while any
request waits, one sweep (`ChangeWaiters._sweep`) looks at their connections every
`SWEEP_INTERVAL` and wakes those whose caller left: its slot is free within that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from aiohttp import web

from dag_common.clock import Clock, sleep_unless
from dag_common.credentials import Role
from dag_common.echo import quoted
from dag_common.items_query import ItemsQuery
from dag_common.memory import Overloaded
from dag_common.route_roles import add_route
from dag_common.store_api import Changes, MailboxState
from dag_common.tasks import cancel_and_wait
from replication_node.errors import BadRequest, NotActive, NotFound
from replication_node.http.context import mailbox_name, node_of, not_dismounted
from replication_node.http.error_middleware import json_error
from replication_node.interfaces import ActiveHostedCopy, ChangeFeedView, MountedCopy
from replication_node.metrics import NodeMetrics
from replication_node.storage.reader import MailboxRow

logger = logging.getLogger(__name__)

MAX_CHANGE_NUMBER = 2**63 - 1  # SQLite's INTEGER, as the items listing bounds it
MAX_WAIT = 60.0  # seconds a request may wait (`wait`): below any proxy's idle timeout
DEFAULT_WAIT = 25.0
RETRY_AFTER = 5  # seconds, to a request refused past the cap
SWEEP_INTERVAL = 1.0  # seconds between two looks at the waiters' connections
# Changes of the mailbox from before the copy's mount read to name their folders, at most
# (without bodies); past it the answer names none (`folders` absent: look at every folder).
FOLDER_SCAN = 1000


def _gone(request: web.Request) -> bool:
    """The caller closed its connection."""
    transport = request.transport
    return transport is None or transport.is_closing()


class ChangeWaiters:
    """The node's requests waiting on change feeds: how many (against the cap), and their
    connections, swept for callers gone while any waits."""

    def __init__(self, *, metrics: NodeMetrics | None = None) -> None:
        self._metrics = metrics
        self.count = 0  # requests holding a slot (waiting, or about to answer)
        self.stopping = False
        self._watched: dict[asyncio.Event, web.Request] = {}
        self._sweeper: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def slot(self, limit: int) -> Iterator[None]:
        """A slot for one request, held while it runs; Overloaded (503, Retry-After) when
        `limit` are taken."""
        if self.count >= limit:
            if self._metrics is not None:
                self._metrics.change_waiters_refused.inc()
            raise Overloaded(
                f"{limit} requests wait on change feeds on this node already "
                "(nodes[].change_waiters); ask again shortly, or another node's active",
                retry_after=RETRY_AFTER,
            )
        self.count += 1
        self._counted()
        try:
            yield
        finally:
            self.count -= 1
            self._counted()

    def _counted(self) -> None:
        if self._metrics is not None:
            self._metrics.change_waiters.set(self.count)

    def watch(self, request: web.Request, event: asyncio.Event, clock: Clock) -> None:
        """Set `event` should the request's caller go away (or the node stop); `clock`:
        the node's, which the sweep waits on."""
        if self.stopping:
            event.set()
            return
        self._watched[event] = request
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep(clock), name="change-feed waiters sweep"
            )

    def unwatch(self, event: asyncio.Event) -> None:
        self._watched.pop(event, None)

    async def _sweep(self, clock: Clock) -> None:
        """While any request waits: every SWEEP_INTERVAL, wake those whose caller left."""
        while self._watched:
            await clock.sleep(SWEEP_INTERVAL)
            for event, request in list(self._watched.items()):
                if _gone(request):
                    event.set()

    async def stop(self) -> None:
        """The node's HTTP side shuts down: every waiter is woken and answered 503."""
        self.stopping = True
        for event in self._watched:
            event.set()
        if self._sweeper is not None:
            await cancel_and_wait([self._sweeper])


WAITERS: web.AppKey[ChangeWaiters] = web.AppKey("change_waiters", ChangeWaiters)


def _integer(request: web.Request, name: str, most: int) -> int | None:
    """The query parameter `name` as an integer within 0..most (None: not given)."""
    if name not in request.query:
        return None
    raw = request.query[name]
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {quoted(raw)}") from None
    if not 0 <= value <= most:
        raise BadRequest(f"{name} must be within 0..{most}, not {value}")
    return value


def _wait(request: web.Request) -> float:
    raw = request.query.get("wait", str(DEFAULT_WAIT))
    try:
        seconds = float(raw)
    except ValueError:
        raise BadRequest(f"wait must be a number of seconds, not {quoted(raw)}") from None
    if not 0 <= seconds <= MAX_WAIT:  # NaN fails it too
        raise BadRequest(f"wait must be within 0..{MAX_WAIT:g} seconds, not {quoted(raw)}")
    return seconds


def _mounted(
    request: web.Request,
) -> tuple[ActiveHostedCopy, MountedCopy, ChangeFeedView]:
    """This node's mounted active copy of the request's database and its change feed; as a
    write is told otherwise: NotFound (no copy here), NotActive (409: passive, changing
    role, switching over, or no longer the mounted active), LogStreamStopped (503:
    dismounted)."""
    node = node_of(request)
    db = request.match_info["db"]
    if node.instance(db) is None:
        if any(d.name == db for d in node.config.databases_on(node.name)):
            raise NotActive(f"the copy of {db} on {node.name} is changing role; ask the active")
        raise NotFound(f"no copy of database {quoted(db)} on node {node.name}")
    instance = node.active_here(db)
    not_dismounted(instance, db, node.name)
    if instance is None:
        raise NotActive(
            f"the copy of {db} on {node.name} is passive: a mailbox's changes are followed "
            "on the active copy"
        )
    if instance.switching_to is not None:
        raise NotActive(f"{db} is being switched over to {instance.switching_to}; ask there")
    feed, copy = instance.changes, instance.copy
    if feed is None or feed.ended or copy is None:
        raise NotActive(f"the copy of {db} on {node.name} is no longer the mounted active")
    return instance, copy, feed


def _state(row: MailboxRow | None) -> MailboxState:
    if row is None:
        return MailboxState.GONE
    if row.soft_deleted:
        return MailboxState.SOFT_DELETED
    return MailboxState.LOCKED if row.locked else MailboxState.LIVE


def look(copy: MountedCopy, feed: ChangeFeedView, mailbox: str, since: int, epoch: int) -> Changes:
    """What the copy can say now of the mailbox's changes above `since` (NotFound: no such
    mailbox, and none removed above `since`).  Changes since the mount are the feed's; the
    store is asked only about a number from before it (`FOLDER_SCAN`)."""
    row = copy.mailbox(mailbox)
    changed = feed.last_seen(mailbox) > since
    folders: set[str] | None = feed.folders_above(mailbox, since)
    if since < feed.floor:
        page = copy.items_page(mailbox, ItemsQuery(since, FOLDER_SCAN, bodies=False))
        changed = changed or bool(page.items) or (row is not None and row.change_number > since)
        if page.complete and folders is not None:
            folders.update(r.folder for r in page.items)
        else:
            folders = None
    if row is None and not changed:
        raise NotFound(f"no mailbox {mailbox!r}")
    return Changes(
        mailbox=mailbox,
        since_change=since,
        last_change_number=feed.visible if changed else max(since, feed.visible),
        changed=changed,
        epoch=epoch,
        state=_state(row),
        folders=(tuple(sorted(folders)) if changed else ()) if folders is not None else None,
    )


async def get_changes(request: web.Request) -> web.StreamResponse:
    node = node_of(request)
    mailbox = mailbox_name(request)
    since = _integer(request, "since_change", MAX_CHANGE_NUMBER) or 0
    known_epoch = _integer(request, "epoch", MAX_CHANGE_NUMBER)
    wait = _wait(request)
    waiters = request.app[WAITERS]
    try:
        limit = node.config.node(node.name).change_waiters
    except KeyError:  # this node left the config (a refresh): no waiting here
        limit = 0
    clock = node.clock
    with waiters.slot(limit):
        until = clock.monotonic() + wait
        while True:
            instance, copy, feed = _mounted(request)
            answer = look(copy, feed, mailbox, since, instance.epoch)
            remaining = until - clock.monotonic()
            moved = known_epoch is not None and known_epoch != instance.epoch
            if answer.changed or moved or remaining <= 0:
                return web.json_response(answer.wire())
            event = feed.register(mailbox)
            waiters.watch(request, event, clock)
            try:
                await sleep_unless(clock, remaining, event)
            finally:
                feed.unregister(mailbox, event)
                waiters.unwatch(event)
            if _gone(request):
                logger.debug("change feed of %s: the caller went away", mailbox)
                return web.Response(status=499, reason="Client Closed Request")
            if waiters.stopping:
                stopped = json_error(503, f"node {node.name} is stopping; ask the active again")
                stopped.headers["Retry-After"] = str(RETRY_AFTER)
                return stopped


def add_changes_routes(app: web.Application, *, metrics: NodeMetrics) -> None:
    """The change feed of each mailbox (role `store`), its waiters ended at shutdown."""
    waiters = ChangeWaiters(metrics=metrics)
    app[WAITERS] = waiters

    async def stopping(app: web.Application) -> None:
        await waiters.stop()

    app.on_shutdown.append(stopping)
    add_route(app, "GET", "/v1/databases/{db}/mailboxes/{mailbox}/changes", get_changes, Role.STORE)
