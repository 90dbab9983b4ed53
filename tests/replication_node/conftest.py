"""Fixtures of the replication_node tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.replication_node.share import Share, start_share


@pytest.fixture
async def share(tmp_path: Path) -> AsyncIterator[Share]:
    """An active instance of DB1 serving its log share over HTTP (nothing written yet)."""
    s = await start_share(tmp_path)
    yield s
    await s.close()
