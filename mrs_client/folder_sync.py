"""Which folder writes make a move's target hold the source's folders: renamed, removed and
created as on the source, each with the source's UIDVALIDITY (pure: no I/O).

Why by UIDVALIDITY: a folder's UIDVALIDITY is its identity.  A rename keeps it, a folder
removed and made again gets a new, greater one (the node numbers them from the mailbox's
`uidvalidity_next`), so a folder of the target is the source's folder with the same
UIDVALIDITY, whatever its name now.  Comparing the two ends' folder lists at each sync is
all the mover needs: the items listing does not name renames (a rename keeps its items'
change numbers) and names a folder's removal only by its items' tombstones.

The writes, as the node does them (`replication_node.storage.ops.renaming`): a rename takes
the folder's children (`folder/…`) with it and is refused onto a name taken or into itself;
a folder with children is not removed; Inbox is neither renamed nor removed.  So the plan is
made by doing each write to a copy of the target's list, in this order until nothing more
can be done: folders the source does not hold removed (children first), then folders
renamed to their source name; a rename that stays blocked (two folders swapping names) goes
first to a name of its own (`aside`), and on from there.  Folders the source holds and the
target does not are created last, with their counters.

A folder without a UIDVALIDITY (0: a node before them, or a test's fake) is matched by its
name, and only created.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dag_common.store_api import FolderStatus, Mailbox

INBOX = "Inbox"  # where mail is delivered: the node neither renames nor removes it


@dataclass(frozen=True, slots=True)
class Rename:
    folder: str
    to: str

    def describe(self) -> str:
        return f"folder {self.folder!r} renamed to {self.to!r}"


@dataclass(frozen=True, slots=True)
class Remove:
    folder: str

    def describe(self) -> str:
        return f"folder {self.folder!r} removed"


@dataclass(frozen=True, slots=True)
class Create:
    status: FolderStatus  # the source's folder, with its counters (uidvalidity 0: none)

    def describe(self) -> str:
        return f"folder {self.status.folder!r} created (UIDVALIDITY {self.status.uidvalidity})"


FolderWrite = Rename | Remove | Create


class FolderPlanError(Exception):
    """The target's folders cannot be brought to the source's (a bug: never expected)."""


def under(folder: str, parent: str) -> bool:
    """`folder` is `parent` or one of its children (`parent/…`), as the node says it."""
    return folder == parent or folder.startswith(parent + "/")


def aside(folder: str, uidvalidity: int, taken: Iterable[str] = ()) -> str:
    """A name of its own for a folder whose rename is blocked (a swap of two names): one
    no folder in `taken` has or is under."""
    taken = set(taken)
    base = f"{folder.split('/')[0]}.move-{uidvalidity}"
    name, n = base, 1
    while any(under(t, name) for t in taken):
        n += 1
        name = f"{base}-{n}"
    return name


def _renamed(state: dict[str, int], folder: str, to: str) -> dict[str, int] | None:
    """`state` after the node's rename of `folder` to `to` (with its children); None if
    the node would refuse it."""
    if folder == INBOX or folder not in state or under(to, folder):
        return None
    plan = {f: to + f[len(folder) :] for f in state if under(f, folder)}
    if any(new in state and new not in plan for new in plan.values()):
        return None
    after = {f: v for f, v in state.items() if f not in plan}
    for old, new in plan.items():
        after[new] = state[old]
    return after


def plan_folders(
    source: Iterable[FolderStatus], target: Iterable[FolderStatus]
) -> list[FolderWrite]:
    """The writes, in order, that give the target the source's folders (module docstring)."""
    source = list(source)
    wanted = {s.uidvalidity: s.folder for s in source if s.uidvalidity}
    names = {s.folder for s in source}
    state = {t.folder: t.uidvalidity for t in target}
    writes: list[FolderWrite] = []

    def kept(folder: str, uidvalidity: int) -> bool:
        return uidvalidity in wanted if uidvalidity else folder in names

    def misplaced() -> list[str]:
        return sorted(
            f for f, v in state.items() if v and v in wanted and wanted[v] != f and f != INBOX
        )

    def settled(folder: str) -> bool:
        uidvalidity = state[folder]
        return wanted.get(uidvalidity) == folder if uidvalidity else folder in names

    def blocked_first(pending: list[str]) -> list[str]:
        """What to set aside: first a folder standing where a pending rename goes and not
        where it belongs itself (an unwanted parent kept only for a wanted child, say), then
        the pending folders themselves (a swap of two names)."""
        occupants = []
        for folder in pending:
            if state[folder] not in wanted:
                continue
            to = wanted[state[folder]]
            occupants += [
                f for f in state
                if f != INBOX and f not in pending and not settled(f)
                and (under(f, to) or under(to, f)) and not under(f, folder)
            ]  # fmt: skip
        return list(dict.fromkeys(occupants)) + pending

    asides: set[str] = set()  # the names folders were set aside under
    for _ in range(4 * (len(state) + len(wanted)) + 8):
        progress = False
        for folder in sorted(state, key=lambda f: (-f.count("/"), f)):
            children = any(o != folder and under(o, folder) for o in state)
            if folder != INBOX and not kept(folder, state[folder]) and not children:
                writes.append(Remove(folder))
                del state[folder]
                progress = True
        for folder in misplaced():
            after = _renamed(state, folder, wanted[state[folder]])
            if after is not None:
                writes.append(Rename(folder, wanted[state[folder]]))
                state, progress = after, True
                break
        if progress:
            continue
        pending = misplaced()
        if not pending:
            # What is left unwanted is a parent kept for a wanted child: it goes aside with
            # its children, which are then renamed back where they belong, and it is removed.
            pending = [f for f in state if f != INBOX and not kept(f, state[f])]
            pending = [f for f in pending if not any(under(f, p) for p in pending if p != f)]
            if not pending:
                break
        for folder in blocked_first(pending):  # one goes aside, and the rest can follow
            if folder in asides:
                continue  # once is enough
            to = aside(folder, state[folder], names | set(state))
            after = _renamed(state, folder, to)
            if after is not None:
                writes.append(Rename(folder, to))
                asides.add(to)
                state = after
                break
        else:
            raise FolderPlanError(f"the target's folders {sorted(state)} cannot be renamed")
    else:
        raise FolderPlanError(f"no end to renaming the target's folders {sorted(state)}")
    held = set(state.values())
    for s in sorted(source, key=lambda s: s.folder):
        there = s.uidvalidity in held if s.uidvalidity else s.folder in state
        if not there and s.folder not in state:
            writes.append(Create(s))
            state[s.folder] = s.uidvalidity
    return writes


def statuses(box: Mailbox) -> tuple[FolderStatus, ...]:
    """A mailbox's folders with their counters (by name alone from a node before them)."""
    return box.folder_status or tuple(FolderStatus(folder=f) for f in box.folders)
