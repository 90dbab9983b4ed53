"""What goes wrong in the IMAP front, and the IMAP answer each one is.

    ImapFrontError (DagError)
    ├── UsersFileError       the users file cannot be read or is not one (a ConfigError: exit 2)
    └── (answers to a client: pymap's ResponseError)
        ├── Unavailable      the node cannot answer now: NO [UNAVAILABLE]
        ├── Cannot           the node refused the request as bad input: NO [CANNOT]
        └── TooBig           a literal over `imap.max_literal`: NO [TOOBIG]

Only the session's edge (`folders`, `backend`) turns a node's answer into one of these; an
exception that is none of them is a bug, which pymap answers `BYE [SERVERBUG]`.
"""

from __future__ import annotations

from pymap.exceptions import ResponseError
from pymap.parsing.response import ResponseCode, ResponseNo

from dag_common.errors import ConfigError, DagError


class ImapFrontError(DagError):
    """The IMAP front's own failures."""


class UsersFileError(ImapFrontError, ConfigError):
    """The users file cannot be read, or is not a users file (the reason said)."""


class _No(ResponseError):
    code = b""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def get_response(self, tag: bytes) -> ResponseNo:
        text = self.message.encode("utf-8", "replace").replace(b"\r", b" ").replace(b"\n", b" ")
        return ResponseNo(tag, text[:400], ResponseCode.of(self.code))


class Unavailable(_No):
    """The mailbox's database cannot be reached now; the client may try again."""

    code = b"UNAVAILABLE"


class Cannot(_No):
    """The node refused what was asked (a name it does not take, a folder with children)."""

    code = b"CANNOT"


class TooBig(_No):
    """A literal over the front's limit, refused before it was read."""

    code = b"TOOBIG"
