"""The compact selected state (`imap_front.selected`) against pymap's own: for any run of
updates, silences and forks, the same untagged answers; and what pymap's commands ask of the
state (sequence sets by number and by UID, a message by UID) answered alike.  pymap ships
no tests; these hold its `SelectedMailbox` as the reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymap.flags import FlagOp, PermanentFlags, SessionFlags
from pymap.parsing.specials import ObjectId, SequenceSet
from pymap.parsing.specials.flag import Deleted, Flag, Flagged, Seen
from pymap.selected import SelectedMailbox

from imap_front.selected import CompactSelected, ShownMessage

FLAGS = [Seen, Flagged, Deleted, Flag(b"work")]


class Command:
    def __init__(self, uid: bool) -> None:
        self.uid = uid


def pair() -> tuple[SelectedMailbox, SelectedMailbox]:
    made = []
    for cls in (SelectedMailbox, CompactSelected):
        made.append(cls(ObjectId(b"F1"), False, PermanentFlags(FLAGS), SessionFlags(frozenset())))
    return made[0], made[1]


def answers(untagged) -> list[bytes]:
    return [bytes(u) for u in untagged]


flag_sets = st.frozensets(st.sampled_from(FLAGS), max_size=3)
uids = st.integers(1, 40)
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("update"),
            st.lists(st.tuples(uids, flag_sets), max_size=12),
            st.lists(uids, max_size=6),
        ),
        st.tuples(st.just("set"), st.lists(st.tuples(uids, flag_sets), max_size=20)),
        st.tuples(st.just("silence"), uids, flag_sets, st.sampled_from(list(FlagOp))),
        st.tuples(st.just("hide"), st.booleans()),
        st.tuples(st.just("fork"), st.booleans()),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_the_compact_state_answers_as_pymaps_does(steps):
    ours, theirs = None, None
    reference, compact = pair()
    for step in steps:
        for selected in (reference, compact):
            match step:
                case ("update", msgs, gone):
                    selected.add_updates([ShownMessage(u, f) for u, f in msgs], gone)
                case ("set", msgs):
                    by_uid = dict(msgs)
                    selected.set_messages([ShownMessage(u, by_uid[u]) for u in sorted(by_uid)])
                case ("silence", uid, flags, op):
                    selected.silence(SequenceSet.build([uid], uid=True), flags, op)
                case ("hide", hide):
                    selected.hide_expunged = hide
        if step[0] == "fork":
            reference, theirs = reference.fork(Command(step[1]))
            compact, ours = compact.fork(Command(step[1]))
            assert answers(ours) == answers(theirs), step
        assert compact.messages.exists == reference.messages.exists
        assert compact.messages.max_uid == reference.messages.max_uid


@pytest.mark.parametrize("spec", ["1:*", "2,5:7", "*", "3:2"])
@pytest.mark.parametrize("by_uid", [False, True])
def test_sequence_sets_name_the_same_messages(spec, by_uid):
    reference, compact = pair()
    msgs = [ShownMessage(u, frozenset({Seen}) if u % 3 else frozenset()) for u in (2, 3, 5, 8, 9)]
    for selected in (reference, compact):
        selected.add_updates(msgs, [])
    seq_set = _parse(spec, by_uid)
    assert compact.messages.get_uids(seq_set) == reference.messages.get_uids(seq_set)
    got = [(s, m.uid, m.permanent_flags) for s, m in compact.messages.get_all(seq_set)]
    want = [(s, m.uid, m.permanent_flags) for s, m in reference.messages.get_all(seq_set)]
    assert got == want
    for uid in (1, 2, 8, 10):
        a, b = compact.messages.get(uid), reference.messages.get(uid)
        assert (a is None) == (b is None)
        if a is not None:
            assert (a.uid, a.permanent_flags) == (b.uid, b.permanent_flags)


def _parse(spec: str, by_uid: bool) -> SequenceSet:
    from pymap.parsing import Params

    parsed, _ = SequenceSet.parse(spec.encode() + b" ", Params())
    return SequenceSet(parsed.value, uid=by_uid)
