"""A selected folder's state as the client was shown it, kept compact: pymap's
`SelectedMailbox` with its message bookkeeping replaced.

pymap's `SynchronizedMessages` keeps, per session, a set, a sorted list and three dicts over
the folder's UIDs and a cached message object for each, and every command's `fork` keeps a
frozen copy of the UIDs, the sequence map and the flags to diff the next one against: about
3.6 MB per session on a 10,000-message folder (`bench/imap_library.py idle`).  Here a
session holds two arrays: the UIDs shown, sorted (`array('I')`, 4 bytes a message), and each
one's flags as an index into a table of the distinct flag sets the front has met
(`array('H')`, 2 bytes; the table is the process's, shared by every session, since a
mailbox has few distinct flag sets).  The arrays are never changed in place: an update makes
new ones, so the copy `fork` keeps to diff against is the old arrays themselves, not a copy.
Sequence numbers are found by bisection; a message pymap asks for (`get`, `get_all`) is
made on demand (`ShownMessage`: UID and flags; the folder's listing gives the rest).

The invariant pymap's own tests hold its class to, held here by
`tests/imap_front/test_selected.py` run against both: after `add_updates` and `fork`, the
untagged answers (EXPUNGE by the old sequence number, highest first, EXISTS, FETCH of the
flags changed and not silenced) are the same as pymap's for the same updates.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import chain, groupby
from typing import Any

from pymap.interfaces.message import CachedMessage
from pymap.message import BaseLoadedMessage, BaseMessage
from pymap.parsing.command import Command
from pymap.parsing.primitives import List, Number
from pymap.parsing.response import ResponseBye, UntaggedResponse
from pymap.parsing.response.specials import (
    ExistsResponse,
    ExpungeResponse,
    FetchResponse,
    RecentResponse,
)
from pymap.parsing.specials import FetchAttribute, FetchRequirement, FetchValue, SequenceSet
from pymap.parsing.specials.flag import Flag
from pymap.selected import SelectedMailbox, SynchronizedMessages

from imap_front.condstore import ModseqFetchAttribute, shown

FLAGS_ATTR = FetchAttribute(b"FLAGS")
UID_ATTR = FetchAttribute(b"UID")
MODSEQ_ATTR = ModseqFetchAttribute(b"MODSEQ")
_NO_DATE = datetime.fromtimestamp(0, UTC)


class FlagSets:
    """The distinct flag sets met, each given a small number (the process's, shared)."""

    def __init__(self) -> None:
        self._sets: list[frozenset[Flag]] = [frozenset()]
        self._index: dict[frozenset[Flag], int] = {frozenset(): 0}

    def number(self, flags: frozenset[Flag]) -> int:
        """The number of `flags` (given one the first time)."""
        found = self._index.get(flags)
        if found is None:
            if len(self._sets) >= 0xFFFF:
                raise OverflowError("more distinct flag sets than one front keeps")
            found = self._index[flags] = len(self._sets)
            self._sets.append(flags)
        return found

    def __getitem__(self, number: int) -> frozenset[Flag]:
        return self._sets[number]


FLAG_SETS = FlagSets()

_BY_NAMES: dict[tuple[str, ...], frozenset[Flag]] = {}


def flag_set(names: tuple[str, ...]) -> frozenset[Flag]:
    """A listed row's flags (the node's names) as pymap's, made once per distinct set
    (bounded)."""
    found = _BY_NAMES.get(names)
    if found is None:
        if len(_BY_NAMES) > 4096:
            _BY_NAMES.clear()
        found = _BY_NAMES[names] = frozenset(Flag(n.encode()) for n in names)
    return found


class ShownMessage(BaseMessage):
    """A message as the session's state holds it: its UID and flags (pymap asks the folder,
    `MailboxDataInterface.get`, for the message itself)."""

    __slots__ = ()

    def __init__(self, uid: int, flags: frozenset[Flag]) -> None:
        super().__init__(uid, _NO_DATE, flags)

    async def load_content(self, requirement: FetchRequirement) -> BaseLoadedMessage:
        return BaseLoadedMessage(self, requirement, None)


class CompactMessages(SynchronizedMessages):
    """The messages shown to the client: UIDs and flag-set numbers in two arrays."""

    def __init__(self) -> None:  # pymap's containers are not made: nothing uses them
        self.uids = array("I")
        self.flags = array("H")
        self._pending_remove: set[int] = set()
        # CONDSTORE enabled (RFC 7162 3.1.4: an unsolicited FETCH carries MODSEQ), and the
        # node's modseqs of the messages the last updates changed, until the next fork.
        self.condstore = False
        self.modseqs: dict[int, int] = {}

    @property
    def exists(self) -> int:
        return len(self.uids)

    @property
    def max_uid(self) -> int:
        return self.uids[-1] if self.uids else 0

    def index(self, uid: int) -> int | None:
        """The position of `uid` (its sequence number less one), or None."""
        at = bisect_left(self.uids, uid)
        return at if at < len(self.uids) and self.uids[at] == uid else None

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.index(uid) is not None

    def show(self, uids: array[int], flags: array[int]) -> None:
        """Every message of a folder shown at once (SELECT), from the front's rows
        (`listing.Ordered`): the arrays taken as they are, since none is changed in place."""
        if len(uids) != len(flags):
            raise ValueError("as many flag-set numbers as UIDs")
        self.uids, self.flags = uids, flags

    def _rebuild(self, flags_by_uid: dict[int, int]) -> None:
        uids = sorted(flags_by_uid)
        self.uids = array("I", uids)
        self.flags = array("H", [flags_by_uid[u] for u in uids])

    def _update(self, messages: Iterable[CachedMessage]) -> None:
        messages = list(messages)
        news = {m.uid: FLAG_SETS.number(frozenset(m.permanent_flags)) for m in messages}
        if not news:
            return
        if self.condstore:
            self.modseqs.update((m.uid, m.modseq) for m in messages if hasattr(m, "modseq"))
        if all(u in self for u in news):  # flags only: the same UIDs, new flag arrays
            flags = array("H", self.flags)
            for uid, number in news.items():
                flags[self.index(uid)] = number  # type: ignore[index]
            self.flags = flags
            return
        if min(news) > self.max_uid:  # appended after every UID shown (a delivery): joined
            added = sorted(news)  # in C, not merged and sorted again, once per idling session
            self.uids = self.uids + array("I", added)
            self.flags = self.flags + array("H", [news[u] for u in added])
            return
        merged = dict(zip(self.uids, self.flags, strict=True))
        merged.update(news)
        self._rebuild(merged)

    def _remove(self, uids: Iterable[int], pending: bool) -> None:
        if pending:
            self._pending_remove.update(uids)
            return
        gone = set(chain(uids, self._pending_remove))
        self._pending_remove.clear()
        if any(u in self for u in gone):
            self._rebuild({u: f for u, f in zip(self.uids, self.flags, strict=True)
                           if u not in gone})  # fmt: skip

    def get(self, uid: int) -> CachedMessage | None:
        at = self.index(uid)
        return None if at is None else ShownMessage(uid, FLAG_SETS[self.flags[at]])

    def _chosen(self, seq_set: SequenceSet) -> Iterable[tuple[int, int]]:
        """(position, UID) of the messages `seq_set` names."""
        if seq_set.is_all:  # 1:* (by UID or number): every message shown, no set made
            return enumerate(self.uids)
        uids = self.uids
        spans: list[tuple[int, int]] = []  # positions [start, stop) of each element
        for elem in seq_set.value:  # by bisection: a `UID FETCH n` is not a pass over all
            span = SequenceSet._get_range(elem, self.max_uid if seq_set.uid else self.exists)
            if not span:
                continue
            if seq_set.uid:
                spans.append((bisect_left(uids, span[0]), bisect_right(uids, span[-1])))
            else:
                spans.append((max(span[0] - 1, 0), span[-1]))
        spans.sort()
        chosen: list[tuple[int, int]] = []
        upto = 0  # positions below it are chosen already (elements may overlap)
        for start, stop in spans:
            for i in range(max(start, upto), stop):
                chosen.append((i, uids[i]))
            upto = max(upto, stop)
        return chosen

    def get_uids(self, seq_set: SequenceSet) -> Sequence[tuple[int, int]]:
        return [(i + 1, u) for i, u in self._chosen(seq_set)]

    def get_all(self, seq_set: SequenceSet) -> Sequence[tuple[int, CachedMessage]]:
        return [(i + 1, ShownMessage(u, FLAG_SETS[self.flags[i]])) for i, u in
                self._chosen(seq_set)]  # fmt: skip


class _Frozen:
    """What a command left shown, to diff the next against: the arrays themselves (an
    update replaces them, never changes them), the session flags, deleted or not."""

    __slots__ = ("flags", "is_deleted", "recent", "sflags", "uids")

    def __init__(self, selected: CompactSelected) -> None:
        messages = selected.messages
        self.uids = messages.uids
        self.flags = messages.flags
        self.is_deleted = selected._is_deleted
        session_flags = selected.session_flags
        self.recent = frozenset(u for u in session_flags.recent_uids if u in messages)
        self.sflags = frozenset(session_flags.flags.items())


class CompactSelected(SelectedMailbox):
    """pymap's selected mailbox over `CompactMessages`."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("_messages", CompactMessages())
        super().__init__(*args, **kwargs)

    @property
    def messages(self) -> CompactMessages:
        return self._messages  # type: ignore[return-value]

    def set_messages(self, messages: Sequence[CachedMessage]) -> None:
        uids = {m.uid for m in messages}
        self.add_updates(messages, [u for u in self.messages.uids if u not in uids])

    def fork(self, command: Command) -> tuple[SelectedMailbox, Iterable[UntaggedResponse]]:
        frozen = _Frozen(self)
        copy = type(self)(
            self._mailbox_id, self._readonly, self._permanent_flags, self._session_flags,
            self._selected_set, self._lookup, _mod_sequence=self._mod_sequence, _prev=frozen,
            _messages=self._messages,
        )  # fmt: skip
        if self._prev is None:
            self.messages.modseqs = {}
            return copy, []
        answers = list(self._diff(self._prev, frozen, getattr(command, "uid", False)))
        self.messages.modseqs = {}
        return copy, answers

    def _diff(self, before: _Frozen, after: _Frozen, with_uid: bool) -> Iterable[UntaggedResponse]:
        if after.is_deleted:
            yield ResponseBye(b"Selected mailbox no longer exists.")
            return
        same = before.uids is after.uids
        n = len(before.uids)
        if not same and len(after.uids) > n and after.uids[:n] == before.uids:
            yield from self._appended(before, after, with_uid)  # compared in C
            return
        if not same:
            now = set(after.uids)
            gone = [(i, u) for i, u in enumerate(before.uids) if u not in now]
            if not self._hide_expunged:
                for i, _ in reversed(gone):
                    yield ExpungeResponse(i + 1)
            if len(now) > len(before.uids) - len(gone):
                yield ExistsResponse(len(after.uids))
        if len(after.recent) != len(before.recent):
            yield RecentResponse(len(after.recent))
        fetch: list[int] = list(after.recent - before.recent)
        if not same or before.flags is not after.flags:
            was = dict(zip(before.uids, before.flags, strict=True)) if not same else None
            for i, (uid, number) in enumerate(zip(after.uids, after.flags, strict=True)):
                old = was.get(uid) if was is not None else before.flags[i]
                if old != number and (uid, FLAG_SETS[number]) not in self._silenced_flags:
                    fetch.append(uid)
        yield from self._fetches(fetch, before, after, with_uid)

    def _appended(
        self, before: _Frozen, after: _Frozen, with_uid: bool
    ) -> Iterable[UntaggedResponse]:
        """`_diff` when `after` is `before` with UIDs appended: an EXISTS, and the flags of
        the appended and of those whose flags changed, found without a walk in Python of
        every message (a delivery to 1,000 idling sessions of a 10,000-message folder)."""
        n = len(before.uids)
        yield ExistsResponse(len(after.uids))
        if len(after.recent) != len(before.recent):
            yield RecentResponse(len(after.recent))
        fetch: list[int] = list(after.recent - before.recent)
        silenced = self._silenced_flags
        kept = after.flags[:n]
        if kept != before.flags:
            fetch += [u for u, old, new in zip(before.uids, before.flags, kept, strict=True)
                      if old != new and (u, FLAG_SETS[new]) not in silenced]  # fmt: skip
        fetch += [u for u, new in zip(after.uids[n:], after.flags[n:], strict=True)
                  if (u, FLAG_SETS[new]) not in silenced]  # fmt: skip
        yield from self._fetches(fetch, before, after, with_uid)

    def _fetches(
        self, fetch: list[int], before: _Frozen, after: _Frozen, with_uid: bool
    ) -> Iterable[UntaggedResponse]:
        """The FETCH (FLAGS) answers of the UIDs in `fetch` and of the session flags set."""
        fetch.extend(u for u, _ in after.sflags - before.sflags - self._silenced_sflags)
        session_flags = self._session_flags
        for uid, _ in groupby(sorted(fetch)):
            at = bisect_left(after.uids, uid)
            flags = session_flags.get(uid) | FLAG_SETS[after.flags[at]]
            data = [FetchValue.of(FLAGS_ATTR, List(flags, sort=True))]
            if with_uid:
                data.append(FetchValue.of(UID_ATTR, Number(uid)))
            modseq = self.messages.modseqs.get(uid) if self.messages.condstore else None
            if modseq is not None:
                data.append(FetchValue.of(MODSEQ_ATTR, List([Number(shown(modseq))])))
            yield FetchResponse(at + 1, data)
