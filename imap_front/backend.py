"""The IMAP front's backend for pymap: a login finds the user (`users`), their mailbox's
database in the directory, and opens a session whose folders are the node's (`folders`).

STORE, COPY and MOVE act on many messages in one node write (a thousand UIDs at a time),
where pymap's base session makes one call per message.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Protocol

from pymap.backend.session import BaseSession
from pymap.config import IMAPConfig
from pymap.exceptions import InvalidAuth, MailboxReadOnly
from pymap.flags import FlagOp, PermanentFlags, SessionFlags
from pymap.health import HealthStatus
from pymap.interfaces.backend import BackendInterface
from pymap.interfaces.login import IdentityInterface, LoginInterface
from pymap.mailbox import MailboxSnapshot
from pymap.parsing.response.code import CopyUid
from pymap.parsing.specials import SequenceSet
from pymap.parsing.specials.flag import Flag, Seen
from pymap.selected import SelectedMailbox
from pymap.token import AllTokens

from dag_common.clock import Clock
from dag_common.errors import ClusterStoreError
from dag_common.node_client import NodeStoreClient
from dag_common.store_api import Changes, Listed
from imap_front.errors import Unavailable
from imap_front.feed_polls import FeedPolls
from imap_front.fetch_lines import Chosen
from imap_front.fetching import Bodies
from imap_front.folder_set import Folders
from imap_front.folders import Folder, Message, Shown
from imap_front.listing import Rows, RowsCache
from imap_front.metrics import FrontMetrics
from imap_front.node_api import FAILOVER_WAIT, MOVE_LOCK_WAIT, MailboxApi, Stored
from imap_front.read_ahead import ReadAhead
from imap_front.selected import CompactMessages, CompactSelected
from imap_front.users import User, Users


class Directory(Protocol):
    async def mailbox_database(self, mailbox: str) -> str | None: ...


class Session(BaseSession[Message]):
    """One logged-in user's session: their mailbox's folders."""

    def __init__(self, user: User, config: IMAPConfig, folders: Folders) -> None:
        super().__init__(user.name)
        self._config = config
        self._folders = folders
        self._ahead = ReadAhead()  # single-message body FETCHes in a run (mbsync's)

    @property
    def config(self) -> IMAPConfig:
        return self._config

    @property
    def mailbox_set(self) -> Folders:
        return self._folders

    async def select_mailbox(
        self, name: str, readonly: bool = False
    ) -> tuple[MailboxSnapshot, SelectedMailbox]:
        """pymap's SELECT, with the compact selected state (`selected.CompactSelected`):
        from the front's rows of the folder and one poll of the change feed when they are
        current (`Folder.select_kept`), else the folder looked up and its rows read."""
        self._ahead.leave()
        kept = self._folders.kept(name)
        if kept is not None:
            updated = await kept.select_kept(self._selecting(kept, name, readonly))
            if updated is not None:
                self._folders.looked_up(name, kept)
                return await kept.snapshot(), updated
        mbx = await self._get_mailbox(name)
        assert isinstance(mbx, Folder)
        updated = await mbx.update_selected(self._selecting(mbx, name, readonly))
        return await mbx.snapshot(), updated  # the counts from the rows the update read

    async def check_mailbox(
        self, selected: SelectedMailbox, *, wait_on: Any = None, housekeeping: bool = False
    ) -> SelectedMailbox:
        """pymap's update of the selected state (NOOP, CHECK, IDLE).  IDLE's, before each
        wait, takes the folder from the front's rows when they are current as of what the
        session was shown (`Folders.current`): pymap looks it up on the node, a state GET
        for each idler a change woke.  NOOP and CHECK look it up as pymap does (a folder
        gone, or a parent renamed away, is answered NO there).  An idler whose folder is
        gone is told `* BYE [NONEXISTENT]` (`protocol.FrontConnection.handle_updates`)."""
        self._ahead.leave()
        folder = None if wait_on is None else self._folders.current(
            selected.lookup, selected.mod_sequence
        )  # fmt: skip
        metrics = self._folders.metrics
        if metrics is not None and wait_on is not None:
            metrics.folder_lookups.labels("node" if folder is None else "rows").inc()
        if folder is None:
            return await super().check_mailbox(selected, wait_on=wait_on, housekeeping=housekeeping)
        return await folder.update_selected(selected, wait_on=wait_on)

    @staticmethod
    def _selecting(mbx: Folder, name: str, readonly: bool) -> CompactSelected:
        return CompactSelected(
            mbx.mailbox_id, readonly or mbx.readonly, PermanentFlags(mbx.permanent_flags),
            SessionFlags(mbx.session_flags), selected_set=mbx.selected_set, lookup=name,
        )  # fmt: skip

    async def _listed_folder(self, selected: SelectedMailbox) -> Folder:
        """The selected folder, for a command that reads its rows first: as this session
        looked it up last (no store call; the rows checked against it), else looked up."""
        folder = self._folders.known(selected.lookup)
        if folder is None:
            return await self._selected_folder(selected)
        await folder.refresh()
        return folder

    async def _reading_folder(
        self, selected: SelectedMailbox
    ) -> tuple[Folder, bool, Changes | None]:
        """The selected folder for a command that reads and writes nothing, its rows read:
        with `Folder.quiet`, one poll of the change feed when nothing changed (True), else
        the rows read after that poll (False, the poll's answer for `update_selected`)."""
        folder = self._folders.known(selected.lookup)
        if folder is None:
            folder = await self._selected_folder(selected)
            await folder._listed()
            return folder, False, None
        quiet, feed = await folder.quiet(selected)
        return folder, quiet, feed

    async def _selected_folder(self, selected: SelectedMailbox) -> Folder:
        folder = await self._get_selected(selected)
        assert isinstance(folder, Folder)
        return folder

    async def fetch_messages(
        self, selected: SelectedMailbox, sequence_set: SequenceSet, set_seen: bool
    ) -> tuple[Iterable[tuple[int, Message]], SelectedMailbox]:
        """pymap's FETCH: \\Seen set on the range in one write, and the messages' bodies
        read ahead as they are written (`fetching.Bodies`: none unless a body is asked)."""
        quiet, feed = False, None
        known = self._folders.known(selected.lookup)
        if set_seen:
            folder = await self._listed_folder(selected)
        elif known is not None and self._ahead.continues() and _kept_rows(known, selected):
            folder, quiet = known, True  # a pipelined run: the feed polled at its end
        else:
            folder, quiet, feed = await self._reading_folder(selected)
        chosen = selected.messages.get_all(sequence_set)
        stored = Stored({})
        if set_seen:
            stored = await folder.store([c.uid for _, c in chosen], frozenset({Seen}), FlagOp.ADD)
        answer: list[tuple[int, Message]] = []
        for seq, cached in chosen:
            msg = await folder.get(cached.uid, cached)
            if cached.uid in stored.flags:
                msg.permanent_flags = frozenset(Flag(f.encode()) for f in stored.flags[cached.uid])
                msg.modseq = stored.modseq or msg.modseq  # the flag write's (CONDSTORE's MODSEQ)
            answer.append((seq, msg))
        live = [m for _, m in answer if not m.expunged and m.item_id]
        if len(live) > 1:
            self._ahead.leave()
            bodies = Bodies([(m.item_id, m.size) for m in live], folder._api.messages,
                            folder._api.message)  # fmt: skip
            for msg in live:
                msg.bodies = bodies
        elif live:
            live[0].bodies = _InRun(self._ahead, selected, folder, (await folder._listed()).by_uid,
                                    live[0].uid)  # fmt: skip
        if quiet:
            return answer, selected
        return answer, await folder.update_selected(selected, polled=feed)

    async def fetch_listed(
        self, selected: SelectedMailbox, sequence_set: SequenceSet
    ) -> tuple[Chosen | None, SelectedMailbox]:
        """A FETCH of listing items only (`fetch_lines`): each chosen message's listed row
        and the update, or None (nothing asked of the node after the listing) when a message
        chosen is no longer listed: pymap's path answers that one."""
        folder, quiet, feed = await self._reading_folder(selected)
        listed = await folder._listed()
        shown = selected.messages
        if not isinstance(shown, CompactMessages):
            raise TypeError("a folder of the front is selected through CompactSelected")
        rows = _chosen_rows(shown, listed, sequence_set)
        if rows is None:
            return None, selected
        if quiet:
            return rows, selected
        return rows, await folder.update_selected(selected, polled=feed)

    async def update_flags(
        self, selected: SelectedMailbox, sequence_set: SequenceSet, flag_set: frozenset[Flag],
        mode: FlagOp = FlagOp.REPLACE,
    ) -> tuple[Iterable[tuple[int, Message]], SelectedMailbox]:  # fmt: skip
        answer, _, updated = await self.store_flags(selected, sequence_set, flag_set, mode)
        return answer, updated

    async def store_flags(
        self, selected: SelectedMailbox, sequence_set: SequenceSet, flag_set: frozenset[Flag],
        mode: FlagOp = FlagOp.REPLACE, *, unchanged_since: int | None = None,
    ) -> tuple[list[tuple[int, Message]], list[tuple[int, int]], SelectedMailbox]:  # fmt: skip
        """A STORE; with `unchanged_since` (the node's modseq) a conditional one: the
        messages changed, the (sequence number, UID) of those left (MODIFIED), the update."""
        if selected.readonly:
            raise MailboxReadOnly()
        folder = await self._listed_folder(selected)
        permanent = selected.permanent_flags & flag_set
        chosen = selected.messages.get_all(sequence_set)
        stored = await folder.store([c.uid for _, c in chosen], permanent, mode, unchanged_since)
        left = set(stored.modified)
        answer: list[tuple[int, Message]] = []
        modified: list[tuple[int, int]] = []
        for seq, cached in chosen:
            if cached.uid in left:
                modified.append((seq, cached.uid))
                continue
            msg = await folder.get(cached.uid, cached)
            if cached.uid in stored.flags:
                msg.permanent_flags = frozenset(Flag(f.encode()) for f in stored.flags[cached.uid])
                msg.modseq = stored.modseq
                selected.session_flags.update(cached.uid, flag_set, mode)
            answer.append((seq, msg))
        updated = await folder.update_selected(selected)
        shown: Shown | None = updated.mod_sequence
        if stored.epoch and (shown is None or shown.epoch != stored.epoch):
            # Another active listed since the one that took the STORE (its answer came
            # late, after a switchover or a failover, which may have lost it): the flags
            # told are those listed, which the session now holds, not the answer's.
            for _, msg in answer:
                now = updated.messages.get(msg.uid)
                if now is not None and not msg.expunged:
                    msg.permanent_flags = now.permanent_flags
        return answer, modified, updated

    async def _transfer(
        self, selected: SelectedMailbox, sequence_set: SequenceSet, mailbox: str, *, copy: bool
    ) -> tuple[CopyUid | None, SelectedMailbox]:
        folder = await self._selected_folder(selected)
        dest = await self._get_mailbox(mailbox, try_create=True)
        assert isinstance(dest, Folder)
        uids = [uid for _, uid in selected.messages.get_uids(sequence_set)]
        if not uids:
            return None, await folder.update_selected(selected)
        validity, pairs = await folder._api.transfer(folder.name, uids, dest.name, copy=copy)
        copy_uid = CopyUid(validity, pairs) if pairs else None
        return copy_uid, await folder.update_selected(selected)

    async def copy_messages(
        self, selected: SelectedMailbox, sequence_set: SequenceSet, mailbox: str
    ) -> tuple[CopyUid | None, SelectedMailbox]:
        return await self._transfer(selected, sequence_set, mailbox, copy=True)

    async def move_messages(
        self, selected: SelectedMailbox, sequence_set: SequenceSet, mailbox: str
    ) -> tuple[CopyUid | None, SelectedMailbox]:
        return await self._transfer(selected, sequence_set, mailbox, copy=False)


class Identity(IdentityInterface):
    """A user whose password was checked; `new_session` opens their mailbox."""

    def __init__(self, user: User, login: Login) -> None:
        self._user = user
        self._login = login

    @property
    def name(self) -> str:
        return self._user.name

    @property
    def roles(self) -> frozenset[str]:
        return frozenset()

    @asynccontextmanager
    async def new_session(self) -> AsyncIterator[Session]:
        mailbox = self._user.mailbox
        try:
            database = await self._login.directory.mailbox_database(mailbox)
        except ClusterStoreError as exc:
            raise Unavailable(f"the mailbox directory cannot be read now: {exc}") from exc
        if database is None:
            raise Unavailable(f"mailbox {mailbox!r} is not in the directory")
        metrics = self._login.metrics
        followed = None if metrics is None else metrics.follows.labels("move").inc
        api = MailboxApi(
            self._login.nodes, database, mailbox, locate=self._login.directory.mailbox_database,
            clock=self._login.clock, on_follow=followed, lock_wait=self._login.move_lock_wait,
            failover_wait=self._login.failover_wait, feeds=self._login.feeds,
        )  # fmt: skip
        folders = Folders(api, clock=self._login.clock, metrics=metrics, rows=self._login.rows)
        if metrics is None:
            yield Session(self._user, self._login.config, folders)
            return
        open_now = metrics.sessions.labels("authenticated")
        open_now.inc()
        try:
            yield Session(self._user, self._login.config, folders)
        finally:
            open_now.dec()

    async def new_token(self, *, expiration: Any = None) -> None:
        return None

    async def get(self) -> Any:
        raise NotImplementedError

    async def set(self, metadata: Any) -> None:
        raise NotImplementedError

    async def delete(self) -> None:
        raise NotImplementedError


class Login(LoginInterface):
    """Checks a login's password against the users file; a failed one waits before its NO."""

    def __init__(
        self, *, config: IMAPConfig, users: Users, directory: Directory, nodes: NodeStoreClient,
        clock: Clock, failure_delay: float, metrics: FrontMetrics | None = None,
        move_lock_wait: float = MOVE_LOCK_WAIT, failover_wait: float = FAILOVER_WAIT,
        feeds: FeedPolls | None = None,
    ) -> None:  # fmt: skip
        """`feeds`: IDLE's long polls, shared by the sessions (`feed_polls`)."""
        self.config = config
        self.feeds = feeds
        self.metrics = metrics
        self.clock = clock
        self.users = users
        self.directory = directory
        self.nodes = nodes
        self._clock = clock
        self._failure_delay = failure_delay
        self.move_lock_wait = move_lock_wait
        self.failover_wait = failover_wait
        self._tokens = AllTokens(config)
        self.rows = RowsCache()  # the folders' rows, shared by the front's sessions

    @property
    def tokens(self) -> AllTokens:
        return self._tokens

    async def authenticate(self, credentials: Any) -> Identity:
        told = _Told()
        credentials.verify(told)  # pysasl hands the secret to its Identity protocol
        user = None
        if told.secret:
            user = await self.users.verify(credentials.authcid, told.secret)
        if user is None:
            await self._clock.sleep(self._failure_delay)
            raise InvalidAuth()
        return Identity(user, self)

    async def authorize(self, authenticated: IdentityInterface, authzid: str) -> Identity:
        if authzid != authenticated.name or not isinstance(authenticated, Identity):
            raise InvalidAuth()
        return authenticated


class _Told:
    """What pysasl's credentials say of themselves (its Identity protocol): the secret is
    checked here, against argon2 hashes, in the users' bounded pool, not in pysasl."""

    secret = ""

    def compare_authcid(self, authcid: str) -> bool:
        return True

    def compare_secret(self, value: str) -> bool:
        self.secret = value
        return False

    def get_clear_secret(self) -> None:
        return None


class Backend(BackendInterface):
    """What pymap's server asks of a backend: its login, its config, its health."""

    def __init__(self, login: Login, config: IMAPConfig) -> None:
        self._login = login
        self._config = config
        self._status = HealthStatus()

    @property
    def login(self) -> Login:
        return self._login

    @property
    def config(self) -> IMAPConfig:
        return self._config

    @property
    def status(self) -> HealthStatus:
        return self._status

    @classmethod
    def add_subparser(cls, name: str, subparsers: Any) -> Any:
        raise NotImplementedError  # started by `imap_front serve`, not pymap's command line

    @classmethod
    async def init(cls, args: Any, **overrides: Any) -> Any:
        raise NotImplementedError

    async def start(self, stack: AsyncExitStack) -> None:
        pass


def _chosen_rows(shown: CompactMessages, listed: Rows, sequence_set: SequenceSet) -> Chosen | None:
    """(sequence number, listed row) of each message `sequence_set` chooses of those shown;
    None if one is no longer listed.  When the UIDs shown are the rows' own (a SELECT's,
    or the same since) the rows are taken by position, with no lookup of each UID, and all
    of them (`1:*`) as they are (`listing.Ordered`)."""
    ordered = listed.ordered()
    if shown.uids is ordered.uids or shown.uids.tobytes() == ordered.uids.tobytes():
        if sequence_set.is_all:  # every row, in order: rendered from the arrays
            return ordered
        return [(seq, ordered.rows[seq - 1]) for seq, _ in shown.get_uids(sequence_set)]
    by_uid = listed.by_uid
    rows: list[tuple[int, Listed]] = []
    for seq, uid in shown.get_uids(sequence_set):
        row = by_uid.get(uid)
        if row is None:
            return None
        rows.append((seq, row))
    return rows


def _kept_rows(folder: Folder, selected: SelectedMailbox) -> bool:
    """The front's rows of `folder` taken as they are for a FETCH continuing a pipelined run
    (`ReadAhead.continues`), if kept, of this folder (its UIDVALIDITY) where the session was
    shown it: no node call."""
    rows = folder._listings.kept(folder.name)
    shown = selected.mod_sequence
    if rows is None or shown is None or rows.uidvalidity != folder.uid_validity:
        return False
    if rows.database != folder._api.database or shown.database != rows.database:
        return False
    if not shown.epoch or rows.epoch not in (0, shown.epoch) or rows.cursor_epoch != shown.epoch:
        return False  # listed under another active than the one the run was shown
    folder._rows = rows
    return True


class _InRun:
    """A single message's body, taken from the session's read-ahead when the FETCH continues
    a run in the folder's order (`read_ahead.ReadAhead`), else read alone; asked only when an
    item needs the body."""

    __slots__ = ("_ahead", "_by_uid", "_folder", "_selected", "_uid")

    def __init__(
        self, ahead: ReadAhead, selected: SelectedMailbox, folder: Folder,
        by_uid: dict[int, Listed], uid: int,
    ) -> None:  # fmt: skip
        self._ahead = ahead
        self._selected = selected
        self._folder = folder
        self._by_uid = by_uid
        self._uid = uid

    async def get(self, item_id: str) -> bytes | memoryview | None:
        uids = self._selected.messages.uids
        at = bisect_left(uids, self._uid)
        after = uids[at + 1] if at + 1 < len(uids) else None
        by_uid = self._by_uid

        def coming(n: int) -> list[tuple[int, str, int]]:
            rows = (by_uid.get(u) for u in uids[at : at + n])
            return [(r.uid, r.item_id, r.size) for r in rows if r is not None and r.item_id]

        api = self._folder._api
        key = (self._selected.lookup, self._folder.uid_validity, api.mailbox)
        bodies = self._ahead.source(key, self._uid, item_id, after, coming, api.messages,
                                    api.message)  # fmt: skip
        return await (api.message if bodies is None else bodies.get)(item_id)
