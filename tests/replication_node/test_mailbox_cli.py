"""`replication-node mailbox create|put|list|where` as an operator trying a cluster runs it,
over a real node process: what it writes is what the node serves, where the directory places
a mailbox is what the cluster store holds, and each mistake is one line with its exit code.
The generated items and their batches, and `where`'s line, pure, without a node."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dag_common.mailbox_answers import MailboxPlace
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.interface import MoveRecord
from replication_node.cli.mail_mix import mail_sizes
from replication_node.cli.mailbox import batches, generated_items, generated_text, where_line
from tests.cluster_harness import LocalCluster


def test_generated_text_has_the_size_asked():
    for k in range(1, 30):
        for size in range(0, 400):
            assert len(generated_text(k, size).encode()) == size, (k, size)
    assert generated_text(3, 300) != generated_text(4, 300)  # items differ


@pytest.mark.parametrize(
    ("count", "size", "max_items", "max_bytes", "sizes"),
    [
        (5, 10, 2, 10_000, [2, 2, 1]),
        (5, 100, 100, 250, [2, 2, 1]),  # about 116 bytes each with its subject
        (3, 1000, 100, 500, [1, 1, 1]),  # an item larger than a batch goes alone
        (1, 0, 100, 100, [1]),
    ],
)
def test_batches_hold_at_most_the_items_and_bytes_given(count, size, max_items, max_bytes, sizes):
    written = list(
        batches(generated_items(count, size, "Inbox"), max_items=max_items, max_bytes=max_bytes)
    )
    assert [len(b) for b in written] == sizes
    assert [i["subject"] for b in written for i in b] == [
        f"load item {k} of {count}" for k in range(1, count + 1)
    ]


@pytest.mark.parametrize(
    ("moving", "active", "line"),
    [
        (None, ("mbx3", 4), "alice: DB2, active on mbx3 (epoch 4)"),
        (
            {"move_id": "3fa2b1c4d5e6", "target_database": "DB1"},
            ("mbx3", 4),
            "alice: DB2, active on mbx3 (epoch 4); moving to DB1 (move 3fa2b1c4d5e6)",
        ),
        (
            {"move_id": "3fa2b1c4d5e6", "target_database": None},
            (None, None),
            "alice: DB2, no active copy chosen yet; moving (its target unknown) "
            "(move 3fa2b1c4d5e6)",
        ),
    ],
)
def test_where_says_the_database_its_active_and_the_move_in_one_line(moving, active, line):
    answer = {
        "mailbox": "alice",
        "database": "DB2",
        "active_node": active[0],
        "active_url": None,
        "epoch": active[1],
        "moving": moving,
    }
    assert where_line(MailboxPlace.model_validate(answer)) == line


@pytest.fixture
async def node(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond")],
        databases=[{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        defaults={"failover_after": None},
    )
    await cluster.start()
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    yield cluster
    await cluster.close()


def run(cluster: LocalCluster, *args: str):
    return cluster.node_cli("mailbox", *args, timeout=60)


@pytest.mark.slow
async def test_create_put_and_list_through_the_active_copy(node):
    made = run(node, "create", "alice", "--database", "DB1")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(
        "DB1\\alice: created (folders Deleted Items, Inbox, Sent Items); change number "
    ), made.stdout
    put = run(node, "put", "alice", "--database", "DB1", "--count", "450", "--size", "300")
    assert put.returncode == 0, put.stderr
    line = put.stdout.strip()
    assert (
        line.startswith("DB1\\alice: 450 items (0.1 MB of bodies) put in ") and " items/s; " in line
    )

    served = await node.items("mbx1", "DB1", "alice")
    assert len(served) == 450
    assert {(i["folder"], len(i["body"])) for i in served.values()} == {("Inbox", 300)}
    last = max(i["change_number"] for i in served.values())
    assert line.endswith(f"last change number {last}, epoch 1"), line

    listed = run(node, "list", "alice", "--database", "DB1")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["Item", "Folder", "Subject", "Size", "Change"]
    assert len(lines) == 1 + 450 + 1
    some_id = next(iter(served))
    row = next(r for r in lines if r.startswith(some_id))
    assert row.split()[1] == "Inbox" and row.split()[-2:] == [
        "300",
        str(served[some_id]["change_number"]),
    ]
    assert lines[-1] == (
        f"450 item(s), 135,000 bytes of bodies, changed after 0 through change number {last} "
        "(epoch 1)"
    )
    recent = run(node, "list", "alice", "--database", "DB1", "--since", str(last - 10), "--json")
    assert recent.returncode == 0, recent.stderr
    body = json.loads(recent.stdout)
    assert [i["change_number"] for i in body["items"]] == list(range(last - 9, last + 1))
    assert body["items"][0].keys() == {"item_id", "folder", "subject", "size", "change_number"}

    archive = run(node, "create", "bob", "--database", "DB1", "--folders", "Inbox", "Archive")
    assert archive.returncode == 0, archive.stderr
    assert "(folders Archive, Inbox)" in archive.stdout
    filed = run(node, "put", "bob", "--database", "DB1", "--count", "3", "--folder", "Archive")
    assert filed.returncode == 0, filed.stderr
    assert {i["folder"] for i in (await node.items("mbx1", "DB1", "bob")).values()} == {"Archive"}


@pytest.mark.slow
async def test_mistakes_are_one_line_with_their_exit_code(node):
    assert run(node, "create", "alice", "--database", "DB1").returncode == 0
    cases = [
        (("create", "alice", "--database", "DB1"), 2, "DB1: mailbox 'alice' exists already"),
        (("create", "carol", "--database", "DB9"), 2, f"no database 'DB9' in {node.config_path}"),
        (("list", "nobody", "--database", "DB1"), 2, "DB1: no mailbox 'nobody'"),
        (
            ("put", "alice", "--database", "DB1", "--folder", "Nope"),
            2,
            "DB1: mailbox 'alice' has no folder 'Nope'",
        ),
        (("put", "alice", "--database", "DB1", "--count", "0"), 2, "--count: 0: at least 1 item"),
    ]
    for args, code, said in cases:
        done = run(node, *args)
        assert (done.returncode, done.stderr, done.stdout) == (code, f"error: {said}\n", ""), args
    node.kill("mbx1")
    down = run(node, "put", "alice", "--database", "DB1")
    assert down.returncode == 1, down.stderr
    assert down.stderr == (
        "error: no mounted active copy of DB1 can be reached: node mbx1 cannot be reached "
        "(connection refused)\n"
    )


@pytest.mark.slow
async def test_put_with_the_mix_of_real_mail_writes_items_of_many_megabytes(node):
    assert run(node, "create", "carol", "--database", "DB1").returncode == 0
    put = run(node, "put", "carol", "--database", "DB1", "--count", "400", "--mix", "--seed", "7")
    assert put.returncode == 0, put.stderr
    sizes = mail_sizes(400, seed=7)
    served = await node.items("mbx1", "DB1", "carol")
    assert sorted(len(i["body"]) for i in served.values()) == sorted(sizes)
    assert sum(1 for s in sizes if s > 1 << 20) == 2
    both = run(node, "put", "carol", "--database", "DB1", "--mix", "--size", "10")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


@pytest.mark.slow
async def test_where_a_mailbox_is_asked_of_the_node_and_said_in_one_line(node):
    assert await node.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice", json={})
    moves = EmbeddedMoveStore(node.root / "cluster.db")  # the node's own cluster store file
    now = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    await moves.create(
        [MoveRecord("3fa2b1c4d5e6", ("alice",), "DB1", "DB2", created=now, updated=now)]
    )
    await moves.aclose()
    answer = {
        "mailbox": "alice",
        "database": "DB1",
        "active_node": "mbx1",
        "active_url": node.url("mbx1"),
        "epoch": 1,
        "moving": {"move_id": "3fa2b1c4d5e6", "target_database": "DB2"},
    }
    assert await node.call("GET", "mbx1", "/v1/mailboxes/alice") == (200, answer)
    assert await node.call("GET", "mbx1", "/v1/mailboxes/nobody") == (
        404, {"error": "no mailbox 'nobody' in the mailbox directory"},
    )  # fmt: skip
    assert await node.call("GET", "mbx1", "/v1/mailboxes/bad%20name") == (
        400, {"error": "invalid mailbox name 'bad name'"},
    )  # fmt: skip
    refused, _ = await node.call(
        "GET", "mbx1", "/v1/mailboxes/alice", headers={"Authorization": "Bearer wrong"}
    )
    assert refused == 401

    said = run(node, "where", "alice")
    assert (said.returncode, said.stderr) == (0, ""), said.stderr
    assert (
        said.stdout == "alice: DB1, active on mbx1 (epoch 1); moving to DB2 (move 3fa2b1c4d5e6)\n"
    )
    as_json = run(node, "where", "alice", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == answer
    unknown = run(node, "where", "nobody")
    assert (unknown.returncode, unknown.stderr, unknown.stdout) == (
        2, "error: no mailbox 'nobody' in the mailbox directory\n", "",
    )  # fmt: skip
    node.kill("mbx1")
    down = run(node, "where", "alice")
    assert down.returncode == 1 and down.stdout == ""
    assert down.stderr.startswith("error: no node answered: node mbx1 (http"), down.stderr


@pytest.mark.slow
async def test_a_soft_deleted_mailbox_the_directory_places_here_is_listed_and_restored_not_purged(
    node,
):
    """Soft-deleted by hand where the directory places it (its users' only mailbox): listed,
    purge refused (restore it), restored live and unlocked; then nothing soft-deleted."""
    none = run(node, "soft-deleted", "--database", "DB1")
    assert (none.returncode, none.stdout) == (0, "no soft-deleted mailbox in DB1 (epoch 1)\n")
    assert run(node, "create", "alice", "--database", "DB1").returncode == 0
    for action in ("lock", "soft-delete"):
        await node.ok("POST", "mbx1", f"/v1/databases/DB1/mailboxes/alice/{action}")
    listed = run(node, "soft-deleted", "--database", "DB1", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["mailboxes"]
    assert (row["mailbox"], row["directory_database"]) == ("alice", "DB1")

    purge = run(node, "purge", "alice", "--database", "DB1")
    assert purge.returncode == 2 and purge.stdout == "", purge
    assert purge.stderr.startswith("error: DB1: the mailbox directory places 'alice' in DB1")
    replace = run(node, "restore", "alice", "--database", "DB1", "--replace", "DB1")
    assert (replace.returncode, replace.stderr) == (
        2,
        "error: --replace DB1: the database the copy is restored in\n",
    )
    restored = run(node, "restore", "alice", "--database", "DB1")
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.startswith(
        "DB1\\alice: restored (live, unlocked; the mailbox directory places it in DB1); "
        "change number "
    ), restored.stdout
    box = await node.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    assert (box["locked"], box["soft_deleted"]) == (False, False)
    again = run(node, "restore", "alice", "--database", "DB1")
    assert again.returncode == 2
    assert again.stderr == "error: DB1: mailbox 'alice' is live, not soft-deleted\n"
