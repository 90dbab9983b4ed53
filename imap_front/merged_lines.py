"""A command's FETCH lines of several messages written as one untagged response
(`fetch_lines.ListedLines`, `fetch_bodies.BodiesLines`), and the other FETCH answers the same
command brings for those messages (another session's flag change, from the selected state's
update) merged into their lines, as pymap merges a command's FETCH answers of one message
(`FetchResponse.merge`: the later values win, new items go last)."""

from __future__ import annotations

import abc
from collections.abc import Container, Mapping
from typing import Generic, TypeVar

from pymap.parsing.response import UntaggedResponse
from pymap.parsing.response.specials import FetchResponse
from pymap.parsing.specials import FetchAttribute, FetchValue

K = TypeVar("K")
V = TypeVar("V")


class MergedLines(UntaggedResponse, Generic[K, V]):
    """FETCH lines of several messages, each with the items merged into it by `absorb`
    (`_merged`: by sequence number, as each kind of line keeps them)."""

    def __init__(self) -> None:
        super().__init__()
        self._merged: dict[int, dict[K, V]] = {}

    @abc.abstractmethod
    def _seqs(self) -> Container[int]:
        """The sequence numbers of the messages these lines answer."""

    @abc.abstractmethod
    def _take(self, into: dict[K, V], data: Mapping[FetchAttribute, FetchValue]) -> None:
        """Merge a later FETCH answer's `data` into what is kept for its message."""

    def absorb(self, untagged: list[UntaggedResponse]) -> list[UntaggedResponse]:
        """`untagged` less the FETCH answers of messages these lines answer, merged into
        their lines."""
        seqs = self._seqs()
        left: list[UntaggedResponse] = []
        for each in untagged:
            if isinstance(each, FetchResponse) and each.seq in seqs:
                self._take(self._merged.setdefault(each.seq, {}), each.data)
            else:
                left.append(each)
        return left
