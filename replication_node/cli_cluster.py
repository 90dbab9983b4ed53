"""The `replication-node` commands that run or talk to nodes: serve, cluster, status, admin."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the node commands to the parser (filled in as the node grows)."""
