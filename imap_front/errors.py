"""What goes wrong in the IMAP front, and the IMAP answer each one is.

    ImapFrontError (DagError)
    ├── UsersFileError       the users file cannot be read or is not one (a ConfigError: exit 2)
    └── (answers to a client: pymap's ResponseError)
        ├── Unavailable      the node cannot answer now: NO [UNAVAILABLE]
        ├── Cannot           the node refused the request as bad input: NO [CANNOT]
        ├── TooBig           a literal over `imap.max_literal`: NO [TOOBIG]
        └── Bye              the session cannot go on (its mailbox moved to a folder with
                             another UIDVALIDITY): * BYE [UNAVAILABLE], the connection closed

Only the session's edge (`folders`, `backend`) turns a node's answer into one of these; an
exception that is none of them is a bug, which pymap answers `BYE [SERVERBUG]`.
"""

from __future__ import annotations

from pymap.exceptions import ResponseError
from pymap.parsing.response import ResponseBye, ResponseCode, ResponseNo

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

    def _text(self) -> bytes:
        text = self.message.encode("utf-8", "replace").replace(b"\r", b" ").replace(b"\n", b" ")
        return text[:400]

    def get_response(self, tag: bytes) -> ResponseNo:
        return ResponseNo(tag, self._text(), ResponseCode.of(self.code))


class Unavailable(_No):
    """The mailbox's database cannot be reached now; the client may try again."""

    code = b"UNAVAILABLE"


class Cannot(_No):
    """The node refused what was asked (a name it does not take, a folder with children)."""

    code = b"CANNOT"


class TooBig(_No):
    """A literal over the front's limit, refused before it was read."""

    code = b"TOOBIG"


class Bye(_No):
    """The session cannot carry on (its mailbox moved and the selected folder's UIDVALIDITY
    is not the one the client was shown): `* BYE [UNAVAILABLE]`, the connection closed, and
    the client's reconnect lands where the directory points."""

    code = b"UNAVAILABLE"

    def bye(self) -> ResponseBye:
        return ResponseBye(self._text(), ResponseCode.of(self.code))

    def get_response(self, tag: bytes) -> ResponseNo:
        answer = super().get_response(tag)
        answer.add_untagged(self.bye())  # terminal: pymap closes the connection after it
        return answer
