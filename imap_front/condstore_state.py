"""CONDSTORE's commands carried out (RFC 7162; the parsing is `condstore.py`): a mixin of
`protocol.FrontState`'s, over pymap's `ConnectionState`, whose SELECT, FETCH, STORE,
SEARCH and STATUS it extends.  A session that has not enabled CONDSTORE is answered
exactly as pymap answers (no MODSEQ anywhere); a modifier it does not know, or a modseq
out of range, is answered BAD before anything is read or written."""

from __future__ import annotations

from typing import Any

from pymap.imap.state import ConnectionState
from pymap.parsing.command.auth import SelectCommand, StatusCommand
from pymap.parsing.command.select import FetchCommand, SearchCommand, StoreCommand
from pymap.parsing.primitives import List, Number
from pymap.parsing.response import (
    CommandResponse,
    ResponseBad,
    ResponseCode,
    ResponseOk,
    UntaggedResponse,
)
from pymap.parsing.response.specials import FetchResponse, StatusResponse
from pymap.parsing.specials import FetchValue

from imap_front.condstore import (
    CONDSTORE,
    BadModseq,
    ModseqAttributes,
    modseq_value,
    node_modseq,
    only_options,
    option_value,
    shown,
)
from imap_front.fetch_bodies import BodiesLines, streamable
from imap_front.fetch_lines import ListedLines, answerable, listed_only, pairs
from imap_front.merged_lines import MergedLines
from imap_front.selected import FLAGS_ATTR, MODSEQ_ATTR, UID_ATTR, CompactMessages

_Ret = tuple[CommandResponse, Any]


def _ids(values: list[int]) -> bytes:
    return b",".join(b"%d" % v for v in sorted(values))


class CondstoreState(ConnectionState):
    """SELECT (CONDSTORE) and HIGHESTMODSEQ, FETCH MODSEQ and CHANGEDSINCE, STORE
    UNCHANGEDSINCE and MODIFIED, SEARCH MODSEQ, STATUS HIGHESTMODSEQ."""

    condstore = False  # enabled for this session (RFC 7162 3.1)

    async def do_command(self, cmd: Any) -> CommandResponse:
        """pymap's, with the FETCH answers the command's update brings merged into a FETCH
        of listing items or of whole bodies (`fetch_lines.ListedLines`,
        `fetch_bodies.BodiesLines`), as pymap merges its own.  A modifier a command does not
        take, or a modseq out of range (`BadModseq`, raised by the command's checks before it
        reads or writes anything), is answered BAD."""
        self._tell_selected()
        try:
            response = await super().do_command(cmd)
        except BadModseq as exc:
            return ResponseBad(cmd.tag, exc.args[0])
        self._tell_selected()
        untagged = getattr(response, "_untagged", None)
        lines = untagged[0] if untagged else None
        if isinstance(lines, MergedLines) and len(untagged) > 1:
            response._untagged = [lines, *lines.absorb(untagged[1:])]  # type: ignore[attr-defined]
            response._mergeable = {}  # type: ignore[attr-defined]
        return response

    def _tell_selected(self) -> None:
        """The selected state told CONDSTORE is on: its unsolicited FETCHes carry MODSEQ."""
        messages = getattr(self._selected, "messages", None)
        if self.condstore and isinstance(messages, CompactMessages):
            messages.condstore = True

    async def do_select(self, cmd: SelectCommand) -> _Ret:  # EXAMINE delegates here
        only_options(cmd.options, [CONDSTORE], cmd.command)
        if cmd.options.has(CONDSTORE):
            self.condstore = True
        response, selected = await super().do_select(cmd)
        if self.condstore and selected is not None and selected.mod_sequence is not None:
            code = ResponseCode.of(b"HIGHESTMODSEQ %d" % shown(selected.mod_sequence.modseq))
            response.add_untagged_ok(b"Highest modseq.", code)
        return response, selected

    async def do_fetch(self, cmd: FetchCommand) -> _Ret:
        only_options(cmd.options, [b"CHANGEDSINCE"], b"FETCH")
        since = option_value(cmd.options, b"CHANGEDSINCE", zero=False)
        attributes = list(cmd.attributes)
        wants = any(a.value == b"MODSEQ" for a in attributes)
        if since is not None or wants:
            self.condstore = True
            if not wants:
                attributes.append(MODSEQ_ATTR)  # CHANGEDSINCE implies MODSEQ
        if not cmd.uid:
            self.selected.hide_expunged = True
        items = listed_only(attributes)
        listed = getattr(self.session, "fetch_listed", None)
        if items is not None and listed is not None:
            rows, updates = await listed(self.selected, cmd.sequence_set)
            if rows is not None and answerable(items, rows):
                floor = None if since is None else node_modseq(since)
                if floor is not None:
                    rows = [(seq, row) for seq, row in pairs(rows) if row.modseq > floor]
                response = ResponseOk(cmd.tag, cmd.command + b" completed.")
                if rows:
                    response.add_untagged(ListedLines(items, rows, self.selected.session_flags))
                return response, updates
        set_seen = not self.selected.readonly and any(a.set_seen for a in attributes)
        messages, updates = await self.session.fetch_messages(
            self.selected, cmd.sequence_set, set_seen
        )
        response = ResponseOk(cmd.tag, cmd.command + b" completed.")
        floor = None if since is None else node_modseq(since)
        if streamable(attributes):  # whole bodies: written as read (`fetch_bodies`)
            chosen = [(seq, msg) for seq, msg in messages
                      if floor is None or getattr(msg, "modseq", 0) > floor]  # fmt: skip
            if any(msg.expunged for _, msg in chosen):
                response.code = ResponseCode.of(b"EXPUNGEISSUED")
            if chosen:
                response.add_untagged(BodiesLines(chosen, attributes, self.selected))
            return response, updates
        for seq, msg in messages:
            if floor is not None and getattr(msg, "modseq", 0) <= floor:
                continue
            if msg.expunged:
                response.code = ResponseCode.of(b"EXPUNGEISSUED")
            values = ModseqAttributes(msg, self.selected, attributes)
            response.add_untagged(FetchResponse(seq, values, writing_hook=values.load_hook()))
        return response, updates

    async def do_store(self, cmd: StoreCommand) -> _Ret:
        only_options(cmd.options, [b"UNCHANGEDSINCE"], b"STORE")
        since = option_value(cmd.options, b"UNCHANGEDSINCE", zero=True)
        if since is None and not self.condstore:
            return await super().do_store(cmd)
        self.condstore = True
        if not cmd.uid:
            self.selected.hide_expunged = True
        if cmd.silent:
            self.selected.silence(cmd.sequence_set, cmd.flag_set, cmd.mode)
        stored, modified, updates = await self.session.store_flags(  # type: ignore[attr-defined]
            self.selected, cmd.sequence_set, cmd.flag_set, cmd.mode,
            unchanged_since=None if since is None else node_modseq(since),
        )  # fmt: skip
        response = ResponseOk(cmd.tag, cmd.command + b" completed.")
        session_flags = self.selected.session_flags
        for seq, msg in stored:
            if msg.expunged:
                response.code = ResponseCode.of(b"EXPUNGEISSUED")
                continue
            data: list[FetchValue] = []
            if not cmd.silent:  # silent: MODSEQ still told (RFC 7162 3.1.3)
                data.append(
                    FetchValue.of(FLAGS_ATTR, List(msg.get_flags(session_flags), sort=True))
                )
            if cmd.uid:
                data.append(FetchValue.of(UID_ATTR, Number(msg.uid)))
            data.append(modseq_value(msg, MODSEQ_ATTR))
            response.add_untagged(FetchResponse(seq, data))
        if modified:  # RFC 7162 3.1.3: those failing UNCHANGEDSINCE, by UID or number
            ids = [uid if cmd.uid else seq for seq, uid in modified]
            response.code = ResponseCode.of(b"MODIFIED " + _ids(ids))
        return response, updates

    async def do_search(self, cmd: SearchCommand) -> _Ret:
        floor = getattr(cmd, "modseq", None)
        if floor is None:
            return await super().do_search(cmd)
        self.condstore = True
        if not cmd.uid:
            self.selected.hide_expunged = True
        messages, updates = await self.session.search_mailbox(self.selected, cmd.keys)
        least = node_modseq(floor)
        hits = [(seq, msg) for seq, msg in messages if getattr(msg, "modseq", 0) >= least]
        response = ResponseOk(cmd.tag, cmd.command + b" completed.")
        text = b"SEARCH"
        if hits:
            ids = [msg.uid if cmd.uid else seq for seq, msg in hits]
            top = max(getattr(msg, "modseq", 0) for _, msg in hits)
            text = b"SEARCH %b (MODSEQ %d)" % (b" ".join(b"%d" % i for i in ids), shown(top))
        response.add_untagged(UntaggedResponse(text))
        return response, updates

    async def do_status(self, cmd: StatusCommand) -> _Ret:
        wanted = [a for a in cmd.status_list if a.value == b"HIGHESTMODSEQ"]
        if not wanted:
            return await super().do_status(cmd)
        self.condstore = True
        response, updates = await super().do_status(cmd)
        highest = await self.session.mailbox_set.highest_modseq(cmd.mailbox)  # type: ignore[attr-defined]
        for untagged in response._untagged:
            if isinstance(untagged, StatusResponse):
                untagged.data[wanted[0]] = Number(shown(highest))
        return response, updates
