"""A Prometheus collector whose families are made when they are scraped, from state kept
elsewhere (a node's status, a move's record, a worker's counters, the process's memory)."""

from __future__ import annotations

import abc
from collections.abc import Iterator

from prometheus_client.core import Metric


class ScrapeCollector(abc.ABC):
    """Families read at each scrape.  It describes none, so that a registry that describes
    its collectors (`auto_describe`) does not collect this one as it is registered, before
    what it reads exists: its names are known only when it is collected."""

    def describe(self) -> list[Metric]:
        return []

    @abc.abstractmethod
    def collect(self) -> Iterator[Metric]:
        """The families as they stand now."""
