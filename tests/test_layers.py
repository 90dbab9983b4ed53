"""The house in layers (issue 33), as a contract over the import graph drawn from the code.

The ground floor, `dag_common`, is shared by every package and imports none of them; what
one package alone uses lives in that package, not on the ground floor.  Above it, no module
imports an engine of the cluster store (`embedded`, `etcd`): `open_cluster_store` chooses one,
and what a store kept beside them shares is public in `dag_common.cluster_store.engine`.  Each
other package (`mrs_client`, `guarantee_api`, `spark_metrics`, `transport`,
`imap_front`) imports only
the ground floor and itself.  Inside `replication_node` the rooms stand on each other, each
importing only the floors below it and its own room, never one beside it:

    dag_common                                   (the ground floor)
    admin_api, taskdump                          (the admin answers; a hung process's tasks)
    errors, metrics, audit                       (the node's vocabulary)
    log          the log stream, its files, the operations it carries
    storage      the database, the rows operations make, a copy's paths, its read side
    shipping     how generations travel: share, client, blocks, frames, copy share
    active | passive                             (beside each other: neither imports the other)
    backup       backups and restores, taken from either
    cluster, interfaces   activation, failover; what the node asks of a copy it hosts
    node, rebalance
    http         (the copies only through `interfaces`: no active or passive module)
    cli

Beside the product stand the programs that use it: the demo (`demo/`, `make demo`), the
benches, the build tools, the documentation's scripts and the tests.  The product imports
none of them (they are not in its image), and they may import any of it.

Every import a module makes (at its top, inside a function, or for type checking only: all
count) is read from its syntax tree, and one that breaks a rule fails here.  An import inside
a function (a command's module loaded when chosen, an engine when the config names it) never
closes a cycle: what it imports does not import its importer back.  The contract
started with 57 breaches, then 23 once the cluster store was on the ground floor; each was
mended by moving code to the floor it belongs on (issue 33), and none is allowed now.  The
README's drawing is this one, checked below.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests.cluster_harness import ROOT

GROUND = "dag_common"
PACKAGES = ("dag_common", "replication_node", "mrs_client", "guarantee_api", "spark_metrics",
            "transport", "imap_front")  # fmt: skip
# The cluster store's engines: chosen by `open_cluster_store`, never imported from above the
# ground floor; what a store kept beside them shares (the mover's move store) is public in
# `dag_common.cluster_store.engine`.
ENGINES = ("dag_common.cluster_store.embedded", "dag_common.cluster_store.etcd")
# Beside the product, not in it: what the product must never import.
BESIDE = ("demo", "bench", "tools", "docs", "tests", "examples")

# replication_node's rooms, bottom up; rooms on one floor stand beside each other.
FLOORS: list[tuple[str, ...]] = [
    ("admin_api", "taskdump"),
    ("errors", "metrics", "audit"),
    ("log",),
    ("storage",),
    ("shipping",),
    ("active", "passive"),
    ("backup",),
    ("cluster", "interfaces"),
    ("node", "rebalance"),
    ("http",),
    ("cli",),
]
FLOOR = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}
# Rooms that reach some rooms below only through a seam: the HTTP API asks the copies it
# serves through `replication_node.interfaces` (HostedCopy, ActiveHostedCopy), never an
# active or passive module, so a change of rooms there does not reach the routes.
SEAMED = {"http": ("active", "passive")}


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


def _targets(package: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if node.level:
        base = package.split(".")
        base = base[: len(base) - node.level + 1]
        target = ".".join([*base, *(node.module.split(".") if node.module else [])])
    else:
        target = node.module or ""
    # `from package import module` imports the module too
    folder = ROOT.joinpath(*target.split("."))
    return {target} | {
        f"{target}.{a.name}"
        for a in node.names
        if (folder / f"{a.name}.py").is_file() or (folder / a.name / "__init__.py").is_file()
    }


def imports(name: str, path: Path, where: str = "all") -> set[str]:
    """The modules `name` imports (relative imports resolved), ours only: `where` "all", or
    "top" (run when the module is imported) or "lazy" (inside a function) alone."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def visit(node: ast.AST, lazy: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                kind = "lazy" if lazy else "typing" if typing_only else "top"
                if where in ("all", kind):
                    found.update(_targets(package, child))
                continue
            in_function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            checking = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            visit(child, lazy or in_function, typing_only or checking)

    visit(tree, False, False)
    return {m for m in found if m.split(".")[0] in (*PACKAGES, *BESIDE)}


def room(module: str) -> tuple[str, str | None]:
    """(package, room within replication_node or None)."""
    parts = module.split(".")
    if parts[0] != "replication_node":
        return parts[0], None
    return parts[0], parts[1] if len(parts) > 1 else None


def breach(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported` (None: it may)."""
    (pkg, rm), (to_pkg, to_rm) = room(importer), room(imported)
    if to_pkg in BESIDE:
        return f"the product imports {to_pkg}, which stands beside it"
    if imported in ENGINES and pkg != GROUND:
        return (
            "an engine of the cluster store, not its interface or dag_common.cluster_store.engine"
        )
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
    if rm in SEAMED and to_rm in SEAMED[rm]:
        return f"{rm} reaches past its seam into {to_rm} (replication_node.interfaces)"
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


def test_no_import_breaks_a_layer():
    found = breaches()
    assert not found, "imports that break the layers:\n" + "\n".join(
        f"  {a} -> {b}: {why}" for (a, b), why in sorted(found.items())
    )


def test_no_import_in_a_function_closes_a_cycle():
    """An import inside a function is for what a process loads (a command's module, an
    engine), never to break a cycle: what it imports does not import the importer back."""
    found = modules()
    top = {name: imports(name, path, "top") & found.keys() for name, path in found.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(top.get(name, ()))
        return False

    closing = sorted(
        f"  {name} -> {target}"
        for name, path in found.items()
        for target in imports(name, path, "lazy") & found.keys()
        if reaches(target, name)
    )
    assert not closing, "imports in a function that close a cycle:\n" + "\n".join(closing)


def test_the_readme_draws_the_floors_the_contract_enforces():
    text = (ROOT / "README.md").read_text()
    drawing = text.split("**The layers.**", 1)[1].split("```", 2)[1]
    rows = [line.split("  ")[0].strip() for line in drawing.strip().splitlines()]
    rows = rows[: rows.index(next(r for r in rows if r.startswith("─")))]
    drawn = [tuple(re.split(r"[,|] *", row.replace(" ", "").replace("|", ","))) for row in rows]
    assert drawn[::-1] == [tuple(f) for f in FLOORS]


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
    assert breach("replication_node.shipping.logshare", "replication_node.active.share")
    assert not breach("replication_node.passive.copier", "replication_node.shipping.interfaces")
    assert not breach("replication_node.cluster.activation", "replication_node.cluster.peers")
    assert breach("replication_node.cli.main", "demo.main")
    assert breach("mrs_client.move_store.embedded", "dag_common.cluster_store.embedded")
    assert not breach("mrs_client.move_store.embedded", "dag_common.cluster_store.engine")
    assert not breach("dag_common.cluster_store", "dag_common.cluster_store.etcd")
    assert breach("dag_common.config", "tools.ports")
    assert breach("replication_node.http.context", "replication_node.active.instance")
    assert breach("replication_node.http.app", "replication_node.passive.copy")
    assert not breach("replication_node.http.context", "replication_node.interfaces")
    assert not breach("replication_node.node", "replication_node.active.instance")


def test_what_stands_beside_the_product_is_neither_installed_nor_in_the_image():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.rstrip("*") for p in find["packages"]["find"]["include"]} == set(PACKAGES)
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    let_in = {line[1:].strip("/") for line in ignore if line.startswith("!")}
    assert let_in - {"pyproject.toml", "README.md"} == set(PACKAGES)
    assert (ROOT / "demo" / "__main__.py").is_file()
