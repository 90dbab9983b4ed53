"""The invariants' own tests: each is fed a violation and must report it (and is fed the
same story without the violation and must not).  Fast: no process, no network."""

from __future__ import annotations

from dag_common.api_types import item_id_for
from tests.resilience.invariants import (
    SERVICE,
    Epoch,
    FaultWindow,
    MoveOutcome,
    acknowledged_writes_kept,
    converged,
    messages_delivered_once,
    moves_kept,
    no_false_satisfied,
    no_needed_log_truncated,
    no_poison,
    one_writer_per_epoch,
    processes_alive,
    service_kept_answering,
)
from tests.resilience.workload import Answer, GuaranteeAnswer, Submission


def ack(item, node="mbx1", epoch=1, generation=5, sent=0.0, answered=0.1, code=201, offset=0):
    return Answer(item, node, sent, answered, code, epoch, generation, offset)


def names(violations):
    return [v.invariant for v in violations]


FIRST = Epoch(1, "mbx1", 1, None, "FirstMount")


def test_a_write_lost_without_a_failover_is_reported():
    found = acknowledged_writes_kept([ack("a"), ack("b")], {"a"}, [FIRST])
    assert names(found) == ["acknowledged-write-lost"] and "b (epoch 1" in str(found[0])


def test_a_write_refused_or_unanswered_may_be_missing():
    answers = [ack("a", code=503), ack("b", code=0)]
    assert acknowledged_writes_kept(answers, set(), [FIRST]) == []


def test_a_lossy_failover_may_lose_the_tail_within_its_dial():
    history = [FIRST, Epoch(2, "mbx2", 7, "BestAvailability", "AutomaticFailover")]
    answers = [ack("a", generation=6), ack("b", generation=7), ack("c", generation=8)]
    assert acknowledged_writes_kept(answers, {"a"}, history) == []


def test_a_lost_write_below_the_new_stream_start_is_reported():
    history = [FIRST, Epoch(2, "mbx2", 7, "BestAvailability", "AutomaticFailover")]
    found = acknowledged_writes_kept([ack("a", generation=6)], set(), history)
    assert names(found) == ["acknowledged-write-lost"] and "below epoch 2" in str(found[0])


def test_a_block_mode_activation_may_lose_the_open_log_past_the_byte_it_kept():
    kept = Epoch(2, "mbx2", 7, "BestAvailability", "AutomaticFailover", kept_through=4096)
    history = [FIRST, kept]
    assert acknowledged_writes_kept([ack("a", generation=6, offset=4096)], set(), history) == []
    found = acknowledged_writes_kept([ack("b", generation=6, offset=4000)], set(), history)
    assert names(found) == ["acknowledged-write-lost"] and "kept through byte 4096" in str(found)


def test_a_loss_under_lossless_or_a_switchover_is_reported():
    for dial, cause in (("Lossless", "AutomaticFailover"), (None, "Switchover")):
        history = [FIRST, Epoch(2, "mbx2", 7, dial, cause)]
        found = acknowledged_writes_kept([ack("a", generation=7)], set(), history)
        assert names(found) == ["acknowledged-write-lost"], (dial, found)


def test_a_loss_of_more_generations_than_the_dial_is_reported():
    history = [FIRST, Epoch(2, "mbx2", 7, "GoodAvailability", "AutomaticFailover")]
    answers = [ack(f"i{g}", generation=g) for g in range(7, 11)]
    found = acknowledged_writes_kept(answers, set(), history)
    assert names(found) == ["loss-beyond-dial"] and "4 generations" in str(found[0])


def test_two_nodes_acknowledging_in_one_epoch_are_reported():
    found = one_writer_per_epoch([ack("a", "mbx1"), ack("b", "mbx2")])
    assert names(found) == ["two-writers-one-epoch"]


def test_an_old_epoch_acknowledging_after_a_new_one_is_reported():
    answers = [
        ack("a", "mbx1", epoch=1, sent=0, answered=1),
        ack("b", "mbx2", epoch=2, sent=2, answered=3),
        ack("c", "mbx1", epoch=1, sent=4, answered=5),
    ]
    assert names(one_writer_per_epoch(answers)) == ["two-writers-one-epoch"]
    assert one_writer_per_epoch(answers[:2]) == []


def test_a_copy_missing_differing_or_extra_is_reported():
    held = {"mbx1": {"a": 1, "b": 2}, "mbx2": {"a": 1, "b": 2}, "mbx3": {"a": 9, "c": 3}}
    found = converged(held, "mbx1")
    assert names(found) == ["not-converged"]
    assert "mbx3" in str(found[0]) and "missing [b]" in str(found[0])
    assert "extra [c]" in str(found[0]) and "differ [a]" in str(found[0])


def test_a_completed_move_short_of_its_copies_is_reported():
    source = {"m1": "x", "m2": "y"}
    held = {"mbx2": dict(source), "mbx3": {"m1": "x"}}
    found = moves_kept([MoveOutcome("mv1", "Completed", True)], source, held, needed=2)
    assert names(found) == ["move-complete-without-data"]
    assert moves_kept([MoveOutcome("mv1", "Completed", True)], source, held, needed=1) == []


def test_a_failed_move_that_soft_deleted_its_source_is_reported():
    found = moves_kept([MoveOutcome("mv1", "Failed", True)], {}, {}, needed=2)
    assert names(found) == ["failed-move-lost-source"]
    assert moves_kept([MoveOutcome("mv1", "Failed", False)], {}, {}, needed=2) == []


def test_a_copy_needing_a_deleted_log_is_reported():
    errors = {"mbx2 log": "ok\nDB1: 00000007.log is no longer on the active: gone\n"}
    assert names(no_needed_log_truncated(errors)) == ["needed-log-truncated"]
    assert no_needed_log_truncated({"mbx2 log": "fine"}) == []


def test_a_satisfied_flush_of_a_lost_write_is_reported():
    answers = [GuaranteeAnswer("Flush", "DB1", 1.0, "SATISFIED", item="w3")]
    found = no_false_satisfied(
        answers, lost_items={"w3"}, faults=[], copies={"DB1": frozenset()}, needed=2, grace=1
    )
    assert names(found) == ["false-satisfied"]


def test_a_satisfied_health_while_too_many_copies_were_down_is_reported():
    copies = {"DB2": frozenset({"mbx2", "mbx3"})}
    fault = FaultWindow("kill mbx3", frozenset({"mbx3"}), 10.0, 20.0)
    early = GuaranteeAnswer("Health", "DB2", 10.5, "SATISFIED")  # within the grace
    late = GuaranteeAnswer("Health", "DB2", 15.0, "SATISFIED")
    no = GuaranteeAnswer("Health", "DB2", 15.0, "NOT_SATISFIED")
    kw = {"lost_items": set(), "faults": [fault], "copies": copies, "needed": 2, "grace": 2}
    assert no_false_satisfied([early, no], **kw) == []
    assert names(no_false_satisfied([late], **kw)) == ["false-satisfied"]


def test_a_process_that_exited_is_reported():
    assert names(processes_alive({"mbx1": None, "guarantee-api": 1})) == ["process-exited"]


def test_a_copy_taken_out_counts_for_its_database_only():
    copies = {"DB1": frozenset({"mbx1", "mbx3"}), "DB2": frozenset({"mbx2", "mbx3"})}
    fault = FaultWindow("suspend DB2 on mbx3", frozenset({"DB2\\mbx3"}), 10.0, 20.0)
    kw = {"lost_items": set(), "faults": [fault], "copies": copies, "needed": 2, "grace": 2}
    db1 = GuaranteeAnswer("Health", "DB1", 15.0, "SATISFIED")
    db2 = GuaranteeAnswer("Health", "DB2", 15.0, "SATISFIED")
    assert no_false_satisfied([db1], **kw) == []
    assert names(no_false_satisfied([db2], **kw)) == ["false-satisfied"]


def answered(*times, status="SATISFIED"):
    return [GuaranteeAnswer("Health", "DB1", t, status) for t in times]


def test_a_service_silent_past_the_limit_is_reported_with_its_failed_calls():
    calls = answered(1.0, 2.0, 9.0, 10.0) + answered(4.0, 6.0, status="ERROR")
    calls[-1] = GuaranteeAnswer("Health", "DB1", 6.0, "ERROR", reason="DEADLINE_EXCEEDED")
    found = service_kept_answering(calls, [], until=10.5, limit=5)
    assert names(found) == ["service-silent"]
    assert "7.0s" in found[0].detail and "2 calls failed" in found[0].detail
    assert service_kept_answering(answered(1.0, 5.0, 9.0), [], until=10, limit=5) == []


def test_a_service_that_stops_answering_for_good_or_never_answers_is_reported():
    assert names(service_kept_answering(answered(1.0, 2.0), [], until=20, limit=5)) == [
        "service-silent"
    ]
    never = answered(1.0, 2.0, status="ERROR")
    assert names(service_kept_answering(never, [], until=3, limit=5)) == ["service-silent"]
    assert service_kept_answering([], [], until=3, limit=5) == []


def test_silence_during_a_fault_of_the_service_itself_is_not_reported():
    calls = answered(1.0, 2.0, 20.0)
    stopped = FaultWindow("SIGSTOP guarantee-api", frozenset({SERVICE}), 3.0, 16.0)
    other = FaultWindow("kill -9 mbx1", frozenset({"mbx1"}), 3.0, 16.0)
    assert service_kept_answering(calls, [stopped], until=20, limit=5) == []
    assert names(service_kept_answering(calls, [other], until=20, limit=5)) == ["service-silent"]


def sub(message_id, *codes):
    """A message's submissions, one per answer code in turn (0: no answer)."""
    return [Submission(message_id, float(n), n + 0.1, code) for n, code in enumerate(codes)]


def held(*message_ids):
    """A mailbox holding each message once, as the transport names its item."""
    return {item_id_for(m): m for m in message_ids}


def test_every_accepted_message_once_and_nothing_else_is_clean():
    # accepted at once; accepted on the second try (200: the unanswered first one was queued)
    submissions = sub("a", 201) + sub("b", 0, 200) + sub("c", 503, 201)
    assert messages_delivered_once(submissions, held("a", "b", "c")) == []


def test_an_accepted_message_missing_is_reported():
    found = messages_delivered_once(sub("a", 201) + sub("b", 201), held("a"))
    assert names(found) == ["accepted-message-missing"] and "1 of 2" in found[0].detail
    assert found[0].detail.endswith(": b")


def test_an_accepted_message_under_another_subject_is_missing():
    found = messages_delivered_once(sub("a", 201), {item_id_for("a"): "z"})
    assert "accepted-message-missing" in names(found)


def test_a_message_in_two_items_is_reported():
    items = held("a") | {"m-0123456789": "a"}  # a second item under another id
    found = messages_delivered_once(sub("a", 201), items)
    assert names(found) == ["message-delivered-twice"] and "m-0123456789" in found[0].detail


def test_an_unanswered_message_may_be_there_or_not_but_once():
    submissions = sub("a", 0, 0, 0) + sub("b", 0, 0, 0) + sub("c", 0, 503, 503)
    assert messages_delivered_once(submissions, held("b", "c")) == []
    assert messages_delivered_once(submissions, {}) == []
    twice = held("b") | {"m-1": "b"}
    assert names(messages_delivered_once(submissions, twice)) == ["message-delivered-twice"]


def test_a_refused_message_delivered_is_reported():
    submissions = sub("a", 400) + sub("b", 503, 503, 503) + sub("c", 201)
    found = messages_delivered_once(submissions, held("a", "b", "c") | {"m-x": "never sent"})
    assert names(found) == ["message-never-accepted"] and "3 items" in found[0].detail
    assert messages_delivered_once(submissions, held("c")) == []


def test_a_poisoned_delivery_is_reported_with_its_reason():
    poisoned = [{"message_id": "a", "recipient": "carol", "reason": "too large"}]
    found = no_poison(1, poisoned)
    assert names(found) == ["message-poisoned"] and "a -> carol: too large" in found[0].detail
    assert names(no_poison(2, [])) == ["message-poisoned"]
    assert no_poison(0, []) == []
