"""What the demo reads of the cluster's copies: their statuses as the nodes report them, the
copies still behind, where each database is mounted, and each active's header after the
stop."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from dag_common.auth import bearer
from dag_common.model import CopyRole, CopyStatus
from demo.waits import wait_for
from replication_node.storage import tools as db_tools
from replication_node.storage.header import DatabaseState


def statuses(config_path: Path, nodes: list[str] | None = None) -> list[dict[str, Any]]:
    """Every copy's status, from each node of the config (or those of `nodes`)."""
    config = yaml.safe_load(config_path.read_text())
    token = (config_path.parent / "token").read_text().strip()
    copies = []
    for node in config["nodes"]:
        if nodes is not None and node["name"] not in nodes:
            continue
        request = urllib.request.Request(f"{node['url']}/v1/status", headers=bearer(token))
        with urllib.request.urlopen(request, timeout=30) as resp:
            copies.extend(json.load(resp)["copies"])
    return copies


def wait_copy(config_path: Path, database: str, node: str, role: str, timeout: float = 60) -> None:
    """Wait until `node` reports its copy of `database` in `role`, Healthy or Mounted."""

    def there() -> bool | None:
        try:
            copy = next(c for c in statuses(config_path, [node]) if c["database"] == database)
        except (OSError, ValueError, KeyError, StopIteration):
            return None
        return True if copy["role"] == role and copy["status"] in ("Healthy", "Mounted") else None

    if wait_for(there, timeout) is None:
        raise SystemExit(f"{database} on {node} did not become {role} within {timeout:g}s")


def last_generated(copies: list[dict[str, Any]]) -> dict[str, int]:
    """Each database's last generation, as the copies' statuses report it (the open log
    counted once it holds an acknowledged commit)."""
    out: dict[str, int] = {}
    for c in copies:
        out[c["database"]] = max(out.get(c["database"], 0), c["last_log_generated"])
    return out


def copies_behind(copies: list[dict[str, Any]]) -> list[str]:
    """The passive copies not yet Healthy and replayed through their database's last
    generation, each with where it is: empty once every copy has caught up."""
    generated = last_generated(copies)
    return [
        f"{c['database']}\\{c['node']}: {c['status']}, replayed {c['last_log_replayed']} of "
        f"{generated[c['database']]} (CopyQueue {c['copy_queue_length']}, "
        f"ReplayQueue {c['replay_queue_length']})" + (f": {c['error']}" if c.get("error") else "")
        for c in sorted(copies, key=lambda c: (c["database"], c["node"]))
        if c["role"] != CopyRole.ACTIVE
        and not (
            c["status"] == CopyStatus.HEALTHY and c["last_log_replayed"] >= generated[c["database"]]
        )
    ]


def wait_caught_up(config_path: Path, timeout: float = 60) -> None:
    """Wait for every passive copy to be Healthy and replayed through its database's last
    generation; say what is left of them if they are not within `timeout` (the demo goes on)."""
    started = time.monotonic()
    copies = statuses(config_path)
    targets = ", ".join(f"{db} {g}" for db, g in sorted(last_generated(copies).items()))
    print(f"waiting up to {timeout}s for each to be Healthy and replayed through its "
          f"database's last generation ({targets})")  # fmt: skip
    left: list[str] = []

    def caught_up() -> bool | None:
        nonlocal left
        left = copies_behind(statuses(config_path))
        return None if left else True

    if wait_for(caught_up, timeout):
        print(f"every passive copy caught up in {time.monotonic() - started:.1f}s")
    else:
        print(f"gave up after {timeout}s; not caught up:")
        print("\n".join(f"  {line}" for line in left))


def active_copies(config_path: Path) -> dict[str, str]:
    """The node each database is mounted on, as the nodes report it."""
    return {
        c["database"]: c["node"]
        for c in statuses(config_path)
        if c["role"] == CopyRole.ACTIVE and c["status"] == CopyStatus.MOUNTED
    }


def not_clean(base: Path, mounted: dict[str, str]) -> list[str]:
    """Print the header of each copy in `mounted` (database: node) after the stop; a line
    for each one not in Clean Shutdown, naming the node's log."""
    dirty = []
    for database, node in sorted(mounted.items()):
        info = db_tools.db_header(base / node / database / f"{database}.sqlite")
        print(db_tools.render_db_header(info))
        if info["state"] != DatabaseState.CLEAN_SHUTDOWN:
            dirty.append(
                f"error: {database}\\{node} is in {info['state']} after its stop, not Clean "
                f"Shutdown: see {base / f'{node}.log'}"
            )
    return dirty
