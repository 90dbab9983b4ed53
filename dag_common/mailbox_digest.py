"""The mailbox digest: one hash over a mailbox's live items (pure).

A mover compares the two ends of a move with one request each instead of a second copy: the
node computes the digest of the mailbox as the answering copy serves it, the mover compares
the source's with the target's.  Equal digests mean the same live item ids, each in the same
folder with the same content.

    content hash = SHA-256(subject, body)
    digest       = SHA-256 over the live items sorted by item id, each contributing
                   (item id, folder, content hash)

Every field is length-prefixed, so no two different mailboxes hash the same byte string
(a subject ending where a body begins cannot pass for another split of the same text).
Deleted items (tombstones) are not part of the digest; they still count for
`last_change_number`, the highest change number the mailbox's items have reached, which is
where a sync cursor may go on from once the digests agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def _field(value: str) -> bytes:
    data = value.encode()
    return len(data).to_bytes(8, "big") + data


def content_hash(subject: str, body: str) -> str:
    """SHA-256 (hex) of an item's content: its subject and body."""
    return hashlib.sha256(_field(subject) + _field(body)).hexdigest()


@dataclass(frozen=True, slots=True)
class MailboxDigest:
    """What a copy holds of one mailbox, in three numbers."""

    item_count: int
    digest: str
    last_change_number: int

    def matches(self, other: MailboxDigest) -> bool:
        """The same live items (ids, folders, contents); change numbers are not compared."""
        return (self.item_count, self.digest) == (other.item_count, other.digest)


def mailbox_digest(items: Iterable[Mapping[str, Any]]) -> MailboxDigest:
    """The digest of a mailbox's items (rows with item_id, folder, subject, body, deleted and
    change_number, tombstones included)."""
    live: list[tuple[str, str, str]] = []
    last = 0
    for item in items:
        last = max(last, int(item["change_number"]))
        if not item["deleted"]:
            live.append(
                (item["item_id"], item["folder"], content_hash(item["subject"], item["body"]))
            )
    live.sort()
    h = hashlib.sha256()
    for item_id, folder, content in live:
        h.update(_field(item_id) + _field(folder) + _field(content))
    return MailboxDigest(item_count=len(live), digest=h.hexdigest(), last_change_number=last)
