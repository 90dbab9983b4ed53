"""The commands the front adds to pymap's (which answers them `BAD Unknown command`),
registered beside pymap's own in `FrontConfig.commands` and carried out by `FrontState`'s
`do_<name>` methods, the way pymap dispatches its own:

- **ENABLE** (RFC 5161): `tag ENABLE cap…` in the authenticated state; answered
  `* ENABLED` naming those of `ENABLABLE` asked for (CONDSTORE: `condstore.py`) and
  `tag OK`.  An extension the front does not have is not enabled, as the RFC has it.
- **NAMESPACE** (RFC 2342): one personal namespace, no other users' or shared ones (a user
  sees only their mailbox): `* NAMESPACE (("" "/")) NIL NIL`.
"""

from __future__ import annotations

from pymap.parsing import EndLine, Params, Space
from pymap.parsing.command import CommandAuth, CommandNoArgs
from pymap.parsing.exceptions import NotParseable
from pymap.parsing.primitives import Atom

ENABLABLE: frozenset[bytes] = frozenset({b"CONDSTORE"})  # what ENABLE may turn on
MAX_ENABLE = 32  # capabilities in one ENABLE, at most
NAMESPACE_RESPONSE = b'NAMESPACE (("" "/")) NIL NIL'


class EnableCommand(CommandAuth):
    """`ENABLE capability…`: the capabilities asked for, upper-cased."""

    command = b"ENABLE"

    def __init__(self, tag: bytes, capabilities: tuple[bytes, ...]) -> None:
        super().__init__(tag)
        self.capabilities = capabilities

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple[EnableCommand, memoryview]:
        caps: list[bytes] = []
        while True:
            try:
                _, buf = EndLine.parse(buf, params)
            except NotParseable:
                if len(caps) >= MAX_ENABLE:
                    raise
                _, buf = Space.parse(buf, params)
                atom, buf = Atom.parse(buf, params)
                caps.append(atom.value.upper())
            else:
                break
        if not caps:
            raise NotParseable(buf)
        return cls(params.tag, tuple(caps)), buf


class NamespaceCommand(CommandNoArgs, CommandAuth):
    """`NAMESPACE`: the user's namespaces."""

    command = b"NAMESPACE"


def enabled(asked: tuple[bytes, ...]) -> bytes:
    """The `ENABLED` response's text for an ENABLE asking `asked`."""
    return b" ".join([b"ENABLED", *sorted({c for c in asked if c in ENABLABLE})])


FRONT_COMMANDS = (EnableCommand, NamespaceCommand)
