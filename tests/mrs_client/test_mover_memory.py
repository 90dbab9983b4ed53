"""The mover in process, over in-memory fakes: what it holds of item bodies (issue 52).

A reconcile compares both ends listed without bodies and reads with bodies only the items it
puts, from the first of them on; a body the source cannot read is found by that read and
skipped as a bad item (its term known from the listing); every move of a process holds its
pages within the process's budget, waits past it, and gives everything back when it ends,
whether it completes or fails."""

from __future__ import annotations

from dataclasses import replace

from dag_common.store_api import Item
from mrs_client.item_limits import SkipReason
from mrs_client.policy import MoveState, MoveStep
from tests.mrs_client.fakes import MOVER_SETTINGS, MoverEnv


def put(env: MoverEnv, item_id: str, body: str) -> int:
    """A user writes `item_id` to the source; its change number."""
    db = env.nodes.dbs["DB1"]
    cn = db.next_cn()
    db.commit([("put", ("alice", Item(item_id, "Inbox", "subject", body, cn)))])
    return cn


async def test_a_reconcile_after_a_lossy_failover_reads_bodies_only_of_what_it_puts(tmp_path):
    """The target's active loses the last writes of the initial sync: the reconcile lists
    both ends without bodies, then reads with bodies from the first lost item on only."""
    env = MoverEnv(tmp_path, items=300)
    lost: list[int] = []

    def failover():
        env.nodes.dbs["DB2"].failover(lose=3)
        held = env.target()
        source = env.nodes.dbs["DB1"].boxes["alice"].items.values()
        lost.extend(i.change_number for i in source if not i.deleted and i.item_id not in held)
        lost.append(len(env.nodes.listings))  # where the reconcile's listings begin

    env.at_step(4, failover)
    record = await env.move()
    env.assert_completed_equal(record)
    assert record.reconciles >= 1 and record.items_repaired > 0
    *missing, begun = lost
    assert missing, "the failover lost items"
    after = env.nodes.listings[begun:]
    assert ("DB1", 0, False) in after and ("DB2", 0, False) in after, "both ends, no bodies"
    with_bodies = [since for db, since, bodies in after if db == "DB1" and bodies]
    assert with_bodies and min(with_bodies) >= min(missing) - 1, (min(missing), with_bodies)


async def test_a_body_the_source_cannot_read_is_skipped_as_a_bad_item_by_sync_and_reconcile(
    tmp_path,
):
    """A row whose body alone is damaged lists well without it (its hash kept beside it),
    and the node hashes the mailbox by that hash: the sync skips it as a bad item, the
    verification leaves it out, and a reconcile after the target lost it finds it again,
    named, by the read of the items it puts."""
    env = MoverEnv(tmp_path, items=60)
    damaged = put(env, "broken", "a body the disk no longer holds")
    put(env, "after", "readable")
    env.nodes.damaged_bodies.add(("DB1", damaged))
    env.limits = {"bad_item_limit": 1}
    env.at_step(5, lambda: env.nodes.dbs["DB2"].failover(lose=4))
    record = await env.move()
    assert record.state is MoveState.COMPLETED, record.failure
    assert env.target() == {k: v for k, v in env.source().items() if k != "broken"}
    assert record.reconciles >= 1
    ((skipped),) = record.skipped
    assert (skipped.item_id, skipped.change_number, skipped.reason) == (
        "broken",
        damaged,
        SkipReason.BAD,
    ), "named by the reconcile's listing"
    assert skipped.term, "its term known: the source's digest less it is compared"


async def test_a_bad_body_found_by_the_sync_stays_skipped_through_the_verification(tmp_path):
    env = MoverEnv(tmp_path, items=60)
    damaged = put(env, "broken", "unreadable")
    put(env, "after", "readable")
    env.nodes.damaged_bodies.add(("DB1", damaged))
    env.limits = {"bad_item_limit": 1}
    record = await env.move()
    assert record.state is MoveState.COMPLETED, record.failure
    assert record.reconciles == 0, "verified at once, the bad item left out of the sum"
    assert [(s.item_id, s.change_number) for s in record.skipped] == [("broken", damaged)]
    assert "broken" not in env.target()


async def test_the_moves_of_a_process_hold_their_pages_within_its_budget(tmp_path):
    """A budget smaller than two pages: pages are read one after the other, the move still
    completes, and what the process holds stays within the budget and one page's last item;
    all of it is given back at the end."""
    env = MoverEnv(tmp_path, items=0)
    for n in range(40):
        put(env, f"m{n}", "x" * 1000)
    settings = replace(MOVER_SETTINGS, sync_page_bytes=2500, memory_budget=6000)
    env.budget = type(env.budget)(settings.memory_budget)
    seen: list[int] = []
    env.nodes.before.append(lambda method, db, n: seen.append(env.budget.budget.in_use))
    record = await env.move(settings)
    env.assert_completed_equal(record)
    assert max(seen) > 0, "the budget was used"
    # a page's reservation (2,500) and at most one page beside it (three items of 1,007)
    assert max(seen) <= 6000 + 3 * 1007, max(seen)
    assert env.budget.budget.in_use == 0


async def test_a_move_that_fails_gives_back_what_it_held(tmp_path):
    env = MoverEnv(tmp_path, items=30)
    put(env, "big", "x" * 5000)
    env.max_item_sizes = {"DB2": 1000}
    record = await env.move()
    assert record.state is MoveState.FAILED and record.step is MoveStep.INITIAL_SYNC
    assert env.budget.budget.in_use == 0


async def test_a_budget_smaller_than_one_page_still_moves_one_page_at_a_time(tmp_path):
    env = MoverEnv(tmp_path, items=80)
    settings = replace(MOVER_SETTINGS, memory_budget=1)
    env.budget = type(env.budget)(settings.memory_budget)
    record = await env.move(settings)
    env.assert_completed_equal(record)
    assert env.budget.budget.in_use == 0
