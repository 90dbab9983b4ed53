"""The read side of a copy's store, as the API's GET routes see it: the active copy (its LLR
overlay merged in) or a passive copy's database file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class MailboxReader(Protocol):
    """The read side of a copy's store: the active copy (its LLR overlay merged in) or a
    passive copy's database file."""

    def mailboxes(self) -> list[dict[str, Any]]: ...

    def mailbox(self, name: str) -> dict[str, Any] | None: ...

    def folders(self, mailbox: str) -> list[str]: ...

    def items(self, mailbox: str, since_change: int = 0) -> list[dict[str, Any]]: ...

    def items_page(self, mailbox: str, since_change: int, limit: int) -> ItemsPage: ...

    def live_count(self, mailbox: str, since_change: int) -> int: ...

    def digest_rows(self, mailbox: str) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class ItemsPage:
    """Part of a mailbox's changes after a change number, in change-number order.

    `through`: every change numbered up to it is in the page (or was superseded by a later
    one), so the next page asks for the changes after it; `complete`: nothing is after it.
    """

    items: list[dict[str, Any]]
    through: int
    complete: bool
