"""The house in layers (issue 33), as a contract over the import graph drawn from the code.

The ground floor, `dag_common`, is shared by every package and imports none of them.  Each
other package (`mrs_client`, `guarantee_api`, `spark_metrics`, `transport`) imports only
the ground floor and itself.  Inside `replication_node` the rooms stand on each other, each
importing only the floors below it and its own room, never one beside it:

    dag_common                                   (the ground floor)
    errors, interfaces, metrics, audit           (the node's vocabulary)
    log          the log stream and its files
    storage      the database, its operations, the mailbox store
    shipping     how generations travel (to build: share, blocks, copy share, client)
    active | passive | backup                    (beside each other: none imports another)
    cluster      activation, failover, the store
    node, rebalance
    http
    cli
    demo         the main job, over everything

Every import a module makes (at its top or inside a function: both run) is read from its
syntax tree.  An import that breaks a rule fails here, unless it is in KNOWN: the breaches
that existed when the contract was written, each to be mended by moving code to the floor
it belongs on (issue 33).  KNOWN may only shrink: an entry that no longer breaks (mended)
fails here too, so the list is always the truth.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.cluster_harness import ROOT

GROUND = "dag_common"
PACKAGES = ("dag_common", "replication_node", "mrs_client", "guarantee_api", "spark_metrics",
            "transport")  # fmt: skip

# replication_node's rooms, bottom up; rooms on one floor stand beside each other.
FLOORS: list[tuple[str, ...]] = [
    ("errors", "interfaces", "metrics", "audit"),
    ("log",),
    ("storage",),
    ("shipping",),
    ("active", "passive", "backup"),
    ("cluster",),
    ("node", "rebalance"),
    ("http",),
    ("cli",),
    ("demo",),
]
FLOOR = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}

# The breaches the contract found when it was written, "importer imported": each is
# issue 33's to mend by moving code to the floor it belongs on.  Only ever remove lines.
KNOWN_TEXT = """
replication_node.active.instance replication_node.backup.coordinator
replication_node.backup.backup replication_node.passive.inspector
replication_node.backup.coordinator replication_node.active.copy
replication_node.backup.restore replication_node.passive.inspector
replication_node.backup.restore replication_node.passive.replayer
replication_node.backup.sources replication_node.active.copy
replication_node.backup.sources replication_node.active.instance
replication_node.backup.sources replication_node.passive.copy
replication_node.backup.status replication_node.active.instance
replication_node.backup.status replication_node.passive.copy
replication_node.interfaces replication_node.log.blocks
replication_node.node replication_node.http.copy_share
replication_node.node replication_node.http.logshare
"""


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if "_generated" in parts:
                continue
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> set[str]:
    """The modules `name` imports (relative imports resolved), ours only."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def room(module: str) -> tuple[str, str | None]:
    """(package, room within replication_node or None)."""
    parts = module.split(".")
    if parts[0] != "replication_node":
        return parts[0], None
    return parts[0], parts[1] if len(parts) > 1 else None


def breach(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported` (None: it may)."""
    (pkg, rm), (to_pkg, to_rm) = room(importer), room(imported)
    if to_pkg == GROUND or (pkg == to_pkg and (rm == to_rm or pkg != "replication_node")):
        return None
    if pkg == GROUND:
        return f"the ground floor imports {to_pkg}"
    if pkg != to_pkg:
        return f"{pkg} imports another package ({to_pkg})"
    if rm is None or to_rm is None:
        return None  # the package's own __init__
    here, there = FLOOR.get(rm), FLOOR.get(to_rm)
    if here is None or there is None:
        return f"a room the drawing does not have ({rm if here is None else to_rm})"
    if there > here:
        return f"{rm} imports upward ({to_rm})"
    if there == here:
        return f"{rm} imports across ({to_rm})"
    return None


def breaches() -> dict[tuple[str, str], str]:
    out = {}
    for name, path in modules().items():
        for imported in imports(name, path):
            why = breach(name, imported)
            if why:
                out[(name, imported)] = why
    return out


def known() -> set[tuple[str, str]]:
    pairs = (line.split()[:2] for line in KNOWN_TEXT.strip().splitlines() if line.strip())
    return {(a, b) for a, b in pairs}


def test_no_import_breaks_a_layer_but_the_known_ones_and_those_only_shrink():
    found = breaches()
    new = {k: v for k, v in found.items() if k not in known()}
    assert not new, "imports that break the layers:\n" + "\n".join(
        f"  {a} -> {b}: {why}" for (a, b), why in sorted(new.items())
    )
    mended = known() - set(found)
    assert not mended, "mended: remove from KNOWN_TEXT:\n" + "\n".join(
        f"  {a} {b}" for a, b in sorted(mended)
    )


def test_the_contract_catches_what_it_says_it_catches():
    assert breach("replication_node.log.writer", "replication_node.storage.ops")
    assert breach("replication_node.active.copy", "replication_node.passive.copy")
    assert breach("dag_common.config", "replication_node.errors")
    assert breach("mrs_client.mover", "replication_node.errors")
    assert not breach("mrs_client.mover", "dag_common.cluster_store")
    assert breach("transport.delivery", "mrs_client.mover")
    assert not breach("transport.delivery", "dag_common.node_client")
    assert not breach("replication_node.http.app", "replication_node.node")
    assert not breach("replication_node.active.copy", "replication_node.log.writer")
    assert not breach("mrs_client.mover", "dag_common.clock")
    assert not breach("replication_node.cluster.activation", "replication_node.cluster.peers")
