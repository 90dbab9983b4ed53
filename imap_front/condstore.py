"""CONDSTORE (RFC 7162, its CONDSTORE part), as commands registered over pymap's FETCH,
UID FETCH, SEARCH, UID SEARCH and STATUS (pymap parses no MODSEQ anywhere), and the checks
of the modifiers pymap parses and ignores (SELECT's, FETCH's and STORE's `(…)` options:
an option the front does not know is answered BAD, never silently dropped).

**The numbers a client sees are the node's modseqs plus one** (`shown`, `node_modseq`): the
node numbers a folder's first change 1 and a folder never changed holds HIGHESTMODSEQ 0,
which RFC 7162's grammar does not allow (mod-sequence-value is 1..2^63-1) and which a
client could not then send back as CHANGEDSINCE.  The mapping is one to one, so every
comparison (CHANGEDSINCE n: modseq > n; UNCHANGEDSINCE n: modseq <= n; SEARCH MODSEQ n:
modseq >= n) means what the RFC says.

What enables CONDSTORE for a session (RFC 7162 3.1): `ENABLE CONDSTORE`, `SELECT`/`EXAMINE
(CONDSTORE)`, and a FETCH of MODSEQ or with CHANGEDSINCE, a STORE with UNCHANGEDSINCE, a
SEARCH MODSEQ, a STATUS of HIGHESTMODSEQ.  Before that a session sees no MODSEQ anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from pymap.parsing import EndLine, Params, Space
from pymap.parsing.command.auth import StatusCommand
from pymap.parsing.command.select import FetchCommand, SearchCommand
from pymap.parsing.exceptions import NotParseable
from pymap.parsing.primitives import List, Number
from pymap.parsing.specials import (
    ExtensionOptions,
    FetchAttribute,
    FetchValue,
    SearchKey,
    SequenceSet,
)
from pymap.parsing.specials.fetchattr import FetchRequirement
from pymap.parsing.specials.mailbox import Mailbox
from pymap.parsing.specials.statusattr import StatusAttribute

from imap_front.fetch_values import FrontAttributes

MAX_MODSEQ = 2**63 - 1  # RFC 7162: a mod-sequence-value is 1..2^63-1
CONDSTORE = b"CONDSTORE"
_MODSEQ_KEY = re.compile(rb' *MODSEQ(?: +"[^"\r\n]{1,200}" +(?:PRIV|SHARED|ALL))? +(\d{1,20})',
                         re.I)  # fmt: skip


class BadModseq(ValueError):
    """A modseq or an option a client sent that the front does not take (answered BAD)."""


def shown(node_modseq: int) -> int:
    """The modseq a client is shown for the node's."""
    return min(node_modseq + 1, MAX_MODSEQ)


def node_modseq(client_value: int) -> int:
    """The node's modseq for one a client sent (-1: below every message's, for 0)."""
    return client_value - 1


def option_value(options: ExtensionOptions, name: bytes, *, zero: bool) -> int | None:
    """The number given with option `name` (None: not given); BadModseq if it is not a
    number within 1..2^63-1 (0..2^63-1 with `zero`)."""
    arg = options.get(name)
    if arg is None:
        return None
    values = arg.value
    if len(values) != 1 or not isinstance(values[0], Number):
        raise BadModseq(b"%b needs a number." % name)
    return checked(values[0].value, name, zero=zero)


def checked(value: int, name: bytes, *, zero: bool) -> int:
    if not (0 if zero else 1) <= value <= MAX_MODSEQ:
        raise BadModseq(b"%b must be within %d..2^63-1." % (name, 0 if zero else 1))
    return value


def only_options(options: ExtensionOptions, known: Sequence[bytes], command: bytes) -> None:
    """BadModseq if `options` names one not in `known`, or gives CONDSTORE an argument."""
    for name, arg in options.value.items():
        if name not in known:
            raise BadModseq(b"%b: option %b is not supported." % (command, name))
        if name == CONDSTORE and arg.value:
            raise BadModseq(b"%b: CONDSTORE takes no argument." % command)


class ModseqFetchAttribute(FetchAttribute):
    """pymap's fetch attribute, MODSEQ among them (metadata: no body loaded for it)."""

    @property
    def requirement(self) -> FetchRequirement:
        if self.attribute == b"MODSEQ":
            return FetchRequirement.METADATA
        return super().requirement

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[FetchAttribute, memoryview]:
        match = cls._attrname_pattern.match(buf)
        if match is not None and match.group(1).upper() == b"MODSEQ":
            return cls(b"MODSEQ"), buf[match.end(0) :]
        return super().parse(buf, params)


class ModseqFetchCommand(FetchCommand):
    """FETCH with MODSEQ among its attributes (pymap's parse, our attribute)."""

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[FetchCommand, memoryview]:
        _, buf = Space.parse(buf, params)
        seq_set, buf = SequenceSet.parse(buf, params)
        _, buf = Space.parse(buf, params)
        attr_list: Sequence[FetchAttribute] = []
        with suppress(NotParseable):
            attr_list, buf = cls._check_macros(buf, params)
        try:
            attr, buf = ModseqFetchAttribute.parse(buf, params)
            attr_list = [attr]
        except NotParseable:
            pass
        if not attr_list:
            parsed, buf = List.parse(buf, params.copy(expected=[ModseqFetchAttribute]))
            attr_list = parsed.get_as(ModseqFetchAttribute)
        if params.uid:
            attr_list = [*attr_list, FetchAttribute(b"UID")]
        options, buf = ExtensionOptions.parse(buf, params)
        _, buf = EndLine.parse(buf, params)
        return cls(params.tag, seq_set, attr_list, options), buf


class UidModseqFetchCommand(ModseqFetchCommand):
    command = b"UID FETCH"
    delegate = ModseqFetchCommand
    uid = True

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[FetchCommand, memoryview]:
        return super().parse(buf, params.copy(uid=True))


def modseq_value(msg: Any, attr: FetchAttribute | None = None) -> FetchValue:
    """A message's `MODSEQ (n)` FETCH item: its listed modseq as a client is shown it."""
    value = List([Number(shown(getattr(msg, "modseq", 0)))])
    return FetchValue.of(attr or ModseqFetchAttribute(b"MODSEQ"), value)


class ModseqAttributes(FrontAttributes):
    """A message's FETCH data (`fetch_values.FrontAttributes`), MODSEQ given from the
    message's listed modseq."""

    __slots__ = ()

    def _get(self, attr: FetchAttribute) -> FetchValue:
        if attr.value == b"MODSEQ":
            return modseq_value(self.message, attr)
        return super()._get(attr)


class ModseqSearchCommand(SearchCommand):
    """SEARCH with `MODSEQ [entry type] n` among its top-level keys (ANDed with the others):
    `modseq` holds the greatest such n (the node's), None without one."""

    modseq: int | None = None

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[SearchCommand, memoryview]:
        options, buf = cls._parse_options(buf, params)
        charset, buf = cls._parse_charset(buf, params)
        keys: list[SearchKey] = []
        floor: int | None = None
        while True:
            try:
                _, after = Space.parse(buf, params)
            except NotParseable:
                break
            match = _MODSEQ_KEY.match(after)
            if match is not None:
                try:
                    value = checked(int(match.group(1)), b"MODSEQ", zero=True)
                except BadModseq as exc:
                    raise NotParseable(after) from exc
                floor = value if floor is None else max(floor, value)
                buf = after[match.end(0) :]
                continue
            try:
                key, buf = SearchKey.parse(after, params.copy(charset=charset))
            except NotParseable:
                break
            keys.append(key)
        if not keys and floor is None:
            raise NotParseable(buf)
        _, buf = EndLine.parse(buf, params)
        cmd = cls(params.tag, keys or [SearchKey(b"ALL")], charset, options)
        cmd.modseq = floor
        return cmd, buf


class UidModseqSearchCommand(ModseqSearchCommand):
    command = b"UID SEARCH"
    delegate = ModseqSearchCommand
    uid = True

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[SearchCommand, memoryview]:
        return super().parse(buf, params.copy(uid=True))


class ModseqStatusAttribute(StatusAttribute):
    valid_statuses = {*StatusAttribute.valid_statuses, b"HIGHESTMODSEQ"}


class ModseqStatusCommand(StatusCommand):
    """STATUS, HIGHESTMODSEQ among its attributes."""

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[StatusCommand, memoryview]:
        _, buf = Space.parse(buf, params)
        mailbox, buf = Mailbox.parse(buf, params)
        _, buf = Space.parse(buf, params)
        parsed, after = List.parse(buf, params.copy(expected=[ModseqStatusAttribute]))
        if not parsed.value:
            raise NotParseable(buf)
        _, buf = EndLine.parse(after, params)
        return cls(params.tag, mailbox, parsed.get_as(ModseqStatusAttribute)), buf


CONDSTORE_COMMANDS = (
    ModseqFetchCommand,
    UidModseqFetchCommand,
    ModseqSearchCommand,
    UidModseqSearchCommand,
    ModseqStatusCommand,
)
