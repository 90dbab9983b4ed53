"""The folder writes a move makes: done the node's way, they give the target the source's
folders, each with its UIDVALIDITY (table-driven, no mocks)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dag_common.store_api import FolderStatus
from mrs_client.folder_sync import (
    INBOX,
    Create,
    Remove,
    Rename,
    _renamed,
    plan_folders,
    under,
)


def folders(**named: int) -> list[FolderStatus]:
    return [FolderStatus(folder=k.replace("__", "/"), uidvalidity=v) for k, v in named.items()]


def apply(target: list[FolderStatus], writes) -> dict[str, int]:
    """The target's folders after the writes, done as the node does them (a refused write
    fails the test)."""
    state = {t.folder: t.uidvalidity for t in target}
    for w in writes:
        match w:
            case Rename(folder, to):
                after = _renamed(state, folder, to)
                assert after is not None, f"the node refuses {w}"
                state = after
            case Remove(folder):
                assert folder != INBOX and folder in state
                assert not any(o != folder and under(o, folder) for o in state), w
                del state[folder]
            case Create(status):
                assert status.folder not in state, w
                state[status.folder] = status.uidvalidity
    return state


CASES = {
    "equal": (folders(Inbox=10, Sent=11), folders(Inbox=10, Sent=11), 0),
    "created": (folders(Inbox=10, Sent=11, Work=12), folders(Inbox=10, Sent=11), 1),
    "removed": (folders(Inbox=10), folders(Inbox=10, Sent=11, Old=12), 2),
    "renamed": (folders(Inbox=10, Projets=11), folders(Inbox=10, Projects=11), 1),
    "renamed with children": (
        folders(Inbox=10, B=11, B__c=12),
        folders(Inbox=10, A=11, A__c=12),
        1,
    ),
    "a child renamed away, then its parent": (
        folders(Inbox=10, B=11, X__c=12),
        folders(Inbox=10, A=11, A__c=12),
        2,
    ),
    "swapped": (folders(Inbox=10, A=12, B=11), folders(Inbox=10, A=11, B=12), 3),
    "removed and made again": (folders(Inbox=10, Work=15), folders(Inbox=10, Work=12), 2),
    "renamed, and the old name made again": (
        folders(Inbox=10, Old=11, Work=13),
        folders(Inbox=10, Work=11),
        2,
    ),
    "renamed into its own old name's child": (
        folders(Inbox=10, A=14, A__B=11),
        folders(Inbox=10, A=11),
        3,
    ),
    # found by test_any_two_folder_lists: the planner went on setting one folder aside
    # under a longer name each time ("B.move-13.move-13…"), or kept the unwanted parent
    "an unwanted parent kept for its wanted child, its name wanted by another": (
        folders(Inbox=10, A=13, A__x=12),
        folders(Inbox=10, A=11, B=13, C=14, A__x=12),
        5,
    ),
    "an unwanted parent kept for its wanted child, its name made again": (
        folders(Inbox=10, A=15, A__x=12),
        folders(Inbox=10, A=11, B=13, C=14, A__x=12),
        6,
    ),
    "the name to set aside under is a folder of the source's": (
        [*folders(Inbox=10, A__x=11), FolderStatus(folder="A.move-11", uidvalidity=12)],
        folders(Inbox=10, A=11),
        3,
    ),
    "a removed parent with its children": (
        folders(Inbox=10),
        folders(Inbox=10, A=11, A__b=12, A__b__c=13),
        3,
    ),
}


@pytest.mark.parametrize("source,target,count", CASES.values(), ids=list(CASES))
def test_the_writes_give_the_target_the_sources_folders(source, target, count):
    writes = plan_folders(source, target)
    assert apply(target, writes) == {s.folder: s.uidvalidity for s in source}
    assert len(writes) == count, writes


def test_created_folders_carry_the_sources_counters():
    source = [FolderStatus(folder="Work", uidvalidity=7, uid_next=40, highest_modseq=99)]
    assert plan_folders(source, []) == [Create(source[0])]


def test_folders_without_uidvalidity_are_matched_by_name_and_only_created():
    writes = plan_folders(folders(Inbox=0, Sent=0), folders(Inbox=0, Old=0))
    assert writes == [Remove("Old"), Create(FolderStatus(folder="Sent"))]


names = st.sampled_from(["A", "B", "C", "A/x", "B/x", "A/x/y", "D", "A.move-11"])


@given(
    st.dictionaries(names, st.integers(11, 30), max_size=6),
    st.dictionaries(names, st.integers(11, 30), max_size=6),
)
def test_any_two_folder_lists(source, target):
    """Whatever the two ends hold (distinct UIDVALIDITYs on each), the writes bring the
    target to the source, each write one the node takes."""
    if len(set(source.values())) < len(source) or len(set(target.values())) < len(target):
        return
    src = [FolderStatus(folder=k, uidvalidity=v) for k, v in {INBOX: 10, **source}.items()]
    dst = [FolderStatus(folder=k, uidvalidity=v) for k, v in {INBOX: 10, **target}.items()]
    assert apply(dst, plan_folders(src, dst)) == {s.folder: s.uidvalidity for s in src}
