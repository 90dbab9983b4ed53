"""Three node processes on loopback, two databases: the replication pipeline end to end."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from replication_node.log import logfile
from replication_node.log.logdir import list_closed_generations
from tests.replication_node.e2e import converged, three_nodes, write

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(tmp_path):
    # Automatic failover off: these tests take the operator's path (a lost active's lease
    # ends in seconds, and the monitor would otherwise race the operator's activate).
    c = three_nodes(tmp_path, defaults={"failover_after": None})
    await c.start()
    yield c
    await c.close()


async def test_copies_converge_item_for_item(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx1", "DB1", "alice", 0, 500)
    await write(cluster, "mbx2", "DB2", "bob", 0, 300)
    await cluster.ok("DELETE", "mbx1", "/v1/databases/DB1/mailboxes/alice/items/i7")
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    active = await cluster.items("mbx1", "DB1", "alice")
    assert len(active) == 500 and active["i7"]["deleted"]
    for node in ("mbx2", "mbx3"):
        assert await cluster.items(node, "DB1", "alice") == active
    assert await cluster.items("mbx3", "DB2", "bob") == await cluster.items("mbx2", "DB2", "bob")
    status = await cluster.status("mbx3")
    for field in (
        "last_log_copy_notified",
        "last_log_copied",
        "last_log_inspected",
        "last_log_replayed",
        "last_inspected_log_time",
        "last_replayed_log_time",
    ):
        assert status["DB1"][field], field
    assert status["DB1"]["copy_queue_length"] == 0 and status["DB1"]["replay_queue_length"] == 0
    # passive copies are read-only
    code, body = await cluster.call(
        "POST", "mbx2", "/v1/databases/DB1/mailboxes/alice/items", json={"subject": "x"}
    )
    assert code == 409 and body["active_node"] == "mbx1"


async def test_suspend_stops_the_pipeline_and_resume_catches_up(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 100)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    suspended = await cluster.ok(
        "POST", "mbx3", "/v1/databases/DB1/copies/mbx3/suspend", json={"reason": "disk maintenance"}
    )
    assert suspended["status"] == "Suspended"
    before = suspended["last_log_replayed"]
    await write(cluster, "mbx1", "DB1", "alice", 100, 300)
    generated = await converged(cluster, "DB1", "mbx1", ["mbx2"])
    copy = (await cluster.status("mbx3"))["DB1"]
    assert copy["status"] == "Suspended" and copy["last_log_replayed"] == before
    # truncation keeps what the suspended copy still needs
    logs = list_closed_generations(cluster.root / "mbx1" / "DB1" / "logs")
    assert logs and logs[0] <= before + 1
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/resume")
    await converged(cluster, "DB1", "mbx1", ["mbx3"])
    assert (await cluster.status("mbx3"))["DB1"]["last_log_replayed"] >= generated
    assert await cluster.items("mbx3", "DB1", "alice") == await cluster.items(
        "mbx1", "DB1", "alice"
    )


async def test_active_keeps_logs_for_a_dead_passive_then_truncates(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 50)
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    cluster.kill("mbx3")
    await write(cluster, "mbx2", "DB2", "bob", 50, 400)
    await cluster.ok("POST", "mbx2", "/v1/databases/DB2/roll-log")
    logs_dir = cluster.root / "mbx2" / "DB2" / "logs"
    replayed_before = min(list_closed_generations(logs_dir))
    await cluster.start("mbx3")
    generated = await converged(cluster, "DB2", "mbx2", ["mbx3"])
    assert replayed_before <= 2, "nothing the dead copy needed was deleted"

    async def truncated():
        gens = list_closed_generations(logs_dir)
        return not gens or gens[0] > replayed_before

    await cluster.wait_for("the active to truncate after catch-up", truncated)
    assert max(list_closed_generations(logs_dir), default=generated) <= generated
    assert await cluster.items("mbx3", "DB2", "bob") == await cluster.items("mbx2", "DB2", "bob")


async def test_reseed_from_scratch(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 200)
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    reseeded = await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/reseed")
    assert reseeded["status"] in ("Healthy", "Initializing", "Seeding")
    await write(cluster, "mbx2", "DB2", "bob", 200, 100)
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    assert await cluster.items("mbx3", "DB2", "bob") == await cluster.items("mbx2", "DB2", "bob")


async def test_corrupt_generation_at_the_source_fails_the_copy(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 20)
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    cluster.kill("mbx3")
    await write(cluster, "mbx2", "DB2", "bob", 20, 20)
    generation = (await cluster.ok("POST", "mbx2", "/v1/databases/DB2/roll-log"))[
        "closed_generation"
    ]
    path = cluster.root / "mbx2" / "DB2" / "logs" / logfile.closed_log_name(generation)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    await cluster.start("mbx3")

    async def failed():
        copy = (await cluster.status("mbx3"))["DB2"]
        return copy["status"] == "FailedAndSuspended"

    await cluster.wait_for("the copy to fail after 3 inspections", failed)
    copy = (await cluster.status("mbx3"))["DB2"]
    assert str(generation) in copy["error"]
    assert copy["last_log_replayed"] < generation
    items = await cluster.items("mbx3", "DB2", "bob")
    assert "i25" not in items and "i5" in items


async def test_lagged_copy_stays_behind(tmp_path):
    c = three_nodes(tmp_path, lag="1h")
    await c.start()
    try:
        await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
        await write(c, "mbx1", "DB1", "alice", 0, 200)
        generated = await converged(c, "DB1", "mbx1", ["mbx2"])

        async def inspected():
            return (await c.status("mbx3"))["DB1"]["last_log_inspected"] >= generated

        await c.wait_for("the lagged copy to inspect", inspected)
        copy = (await c.status("mbx3"))["DB1"]
        assert copy["last_log_replayed"] < generated and copy["replay_queue_length"] > 0
        assert copy["replay_lag_time"] == "3600s"
    finally:
        await c.close()


async def test_failover_then_the_old_active_rejoins_by_incremental_reseed(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 100)
    generated = await converged(cluster, "DB2", "mbx2", ["mbx3"])
    # while the active runs, activation is refused and changes nothing
    code, body = await cluster.call(
        "POST", "mbx3", "/v1/databases/DB2/activate", json={"node": "mbx3"}
    )
    assert code == 409 and "switchover" in body["error"]
    assert (await cluster.status("mbx3"))["DB2"]["role"] == "Passive"
    # acknowledged but still in the active's open log: lost with it (the seeds' lossy case),
    # and counted: the open log held acknowledged commits.  (In block mode mbx3 would hold
    # them and keep them: it is suspended while they are written, and resumed after.)
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
    await write(cluster, "mbx2", "DB2", "bob", 100, 10)
    cluster.kill("mbx2")
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
    await cluster.wait_status("mbx3", "DB2", "DisconnectedAndHealthy")
    activated = await cluster.ok(
        "POST", "mbx3", "/v1/databases/DB2/activate", json={"node": "mbx3"}
    )
    assert activated["lost_logs"] == 1 and activated["lost_open_log"] is True
    assert activated["previous_node"] == "mbx2"
    assert f"generation {generated + 1}, the open log E00.log" in activated["reason"]

    await cluster.wait_status("mbx3", "DB2", "Mounted")
    bob = await cluster.items("mbx3", "DB2", "bob")
    assert {f"i{i}" for i in range(100)} <= set(bob)
    # the new active takes writes and continues the same log stream
    await write(cluster, "mbx3", "DB2", "bob", 200, 20)
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/roll-log")
    assert (await cluster.status("mbx3"))["DB2"]["last_log_generated"] > generated
    # the old active comes back as a passive copy. Its open log diverged from the new
    # active's generation, but LLR kept it out of its database file: an incremental reseed
    # sets its own logs aside and it follows the new active, serving nothing diverged.
    await cluster.start("mbx2")
    await converged(cluster, "DB2", "mbx3", ["mbx2"])
    copy = (await cluster.status("mbx2"))["DB2"]
    assert copy["role"] == "Passive" and copy["status"] == "Healthy"
    on_old = await cluster.items("mbx2", "DB2", "bob")
    assert on_old == await cluster.items("mbx3", "DB2", "bob")
    assert not {f"i{i}" for i in range(100, 110)} & set(on_old), "the lost writes stay lost"
    assert "incremental reseed" in cluster.log("mbx2")
    kept = cluster.root / "mbx2" / "DB2" / "logs" / "IgnoredLogs" / "Diverged"
    assert "E00.log" in {p.name for p in kept.iterdir()}


def status_cli(cluster, *args):
    return cluster.node_cli("status", *args, timeout=60)


async def test_a_copy_added_to_the_config_is_seeded_and_a_bad_config_is_ignored(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 60)
    await cluster.ok("POST", "mbx2", "/v1/databases/DB2/roll-log")
    # the operator adds a copy of DB2 on mbx1; every replay manager re-reads the config
    cluster.config["databases"][1]["copies"].append({"node": "mbx1", "activation_preference": 3})
    cluster.write_config()
    await converged(cluster, "DB2", "mbx2", ["mbx3", "mbx1"])
    assert await cluster.items("mbx1", "DB2", "bob") == await cluster.items("mbx2", "DB2", "bob")
    shown = json.loads(status_cli(cluster, "--json").stdout)
    row = next(r for r in shown if r["database"] == "DB2" and r["node"] == "mbx1")
    assert row["status"] == "Healthy" and row["role"] == "Passive"
    table = status_cli(cluster)
    assert table.returncode == 0 and "DB2\\mbx1" in table.stdout and "Healthy" in table.stdout
    assert "DB2: lease held by mbx2 at epoch 1, expires in" in table.stdout

    def block_mode_shown() -> bool:  # a caught-up copy follows the open log in block mode
        rows = status_cli(cluster).stdout.splitlines()
        return any(r.startswith("DB2\\mbx3") and " Block " in r for r in rows)

    await cluster.wait_for("DB2\\mbx3 shown in block mode", block_mode_shown)
    rows = status_cli(cluster).stdout.splitlines()
    active_row = next(r for r in rows if r.startswith("DB2\\mbx2"))
    assert "block mode: " in active_row and "mbx3" in active_row, active_row
    # a broken config is refused at reload: the nodes keep running the last good one
    good = cluster.config_path.read_text()
    cluster.config_path.write_text(
        good.replace("activation_preference: 3", "activation_preference: x")
    )
    await cluster.wait_for(
        "mbx1 to refuse the broken config", lambda: "config reload failed" in cluster.log("mbx1")
    )
    await write(cluster, "mbx2", "DB2", "bob", 60, 10)
    await converged(cluster, "DB2", "mbx2", ["mbx3", "mbx1"])
    cluster.config_path.write_text(good)


async def test_lossless_failover_lets_the_old_active_rejoin_without_a_reseed(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 100)
    # every acknowledged write is in a closed generation the copy has replayed
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    cluster.kill("mbx2")
    activated = await cluster.ok(
        "POST", "mbx3", "/v1/databases/DB2/activate", json={"node": "mbx3"}
    )
    assert activated["lost_logs"] == 0

    await cluster.wait_status("mbx3", "DB2", "Mounted")
    await write(cluster, "mbx3", "DB2", "bob", 100, 50)
    # the old active returns as a passive copy: its own logs match the new active's, its
    # open log held nothing, so it catches up from where it was with no reseed
    await cluster.start("mbx2")
    await converged(cluster, "DB2", "mbx3", ["mbx2"])
    copy = (await cluster.status("mbx2"))["DB2"]
    assert copy["role"] == "Passive" and copy["status"] == "Healthy" and copy["error"] is None
    assert await cluster.items("mbx2", "DB2", "bob") == await cluster.items("mbx3", "DB2", "bob")
    aside = cluster.root / "mbx2" / "DB2" / "logs" / "IgnoredLogs" / "E00OutofDate"
    assert list(aside.iterdir()) == [], "every log it wrote as active matched and was dropped"


async def test_switchover_moves_the_active_copy_losing_nothing(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 200)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    # refused to a copy that is not Healthy; the active goes on taking writes
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/suspend")
    code, body = await cluster.call(
        "POST", "mbx1", "/v1/databases/DB1/switchover", json={"target": "mbx3"}
    )
    assert code == 409 and "Suspended" in body["error"], body
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/resume")
    await write(cluster, "mbx1", "DB1", "alice", 200, 20)  # not closed: still in E00.log
    before = await cluster.items("mbx1", "DB1", "alice")
    switched = await asyncio.to_thread(
        cluster.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json"
    )
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert json.loads(switched.stdout)["lost_logs"] == 0

    async def roles_moved():
        new, old = (await cluster.status("mbx2"))["DB1"], (await cluster.status("mbx1"))["DB1"]
        return new["status"] == "Mounted" and old["role"] == "Passive"

    await cluster.wait_for("the roles to move", roles_moved)
    assert await cluster.items("mbx2", "DB1", "alice") == before, "every acknowledged write"
    code, body = await cluster.call(
        "POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/items", json={"subject": "x"}
    )
    assert code == 409 and body["active_node"] == "mbx2"
    await write(cluster, "mbx2", "DB1", "alice", 300, 30)
    # the old active follows the new one as a passive copy, without a reseed, as does mbx3
    await converged(cluster, "DB1", "mbx2", ["mbx1", "mbx3"])
    after = await cluster.items("mbx2", "DB1", "alice")
    assert len(after) == 250
    for node in ("mbx1", "mbx3"):
        assert await cluster.items(node, "DB1", "alice") == after
    assert (await cluster.status("mbx1"))["DB1"]["error"] is None


async def test_automatic_failover_mounts_the_copy_when_the_active_is_lost(tmp_path):
    c = three_nodes(tmp_path, defaults={"failover_after": "1s"})
    await c.start()
    try:
        await c.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
        await write(c, "mbx2", "DB2", "bob", 0, 100)
        await converged(c, "DB2", "mbx2", ["mbx3"])
        before = await c.items("mbx2", "DB2", "bob")
        c.kill("mbx2")

        await c.wait_status("mbx3", "DB2", "Mounted")
        assert await c.items("mbx3", "DB2", "bob") == before

        # the status shows Mounted as soon as the database is; the log lines follow
        async def logged():
            return "mounted on mbx3" in c.log("mbx3")

        await c.wait_for("the failover in mbx3's log", logged)
        await write(c, "mbx3", "DB2", "bob", 100, 10)
    finally:
        await c.close()


async def test_automatic_failover_respects_the_mount_dial(tmp_path):
    c = three_nodes(
        tmp_path, defaults={"failover_after": "1s", "auto_database_mount_dial": "Lossless"}
    )
    await c.start()
    try:
        await c.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
        await write(c, "mbx2", "DB2", "bob", 0, 50)
        await converged(c, "DB2", "mbx2", ["mbx3"])
        await c.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
        await write(c, "mbx2", "DB2", "bob", 50, 20)
        await c.ok("POST", "mbx2", "/v1/databases/DB2/roll-log")  # a log mbx3 never gets
        c.kill("mbx2")
        await c.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")

        async def refused():
            return "more than Lossless allows" in c.log("mbx3")

        await c.wait_for("the failover to be refused", refused)
        assert (await c.status("mbx3"))["DB2"]["role"] == "Passive"
        # the operator accepts the loss for this one activation
        done = await c.ok(
            "POST",
            "mbx3",
            "/v1/databases/DB2/activate",
            json={"node": "mbx3", "mount_dial_override": "GoodAvailability"},
        )
        assert done["lost_logs"] == 1
    finally:
        await c.close()


async def test_an_old_active_diverged_below_its_waypoint_needs_a_full_reseed(cluster):
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await write(cluster, "mbx2", "DB2", "bob", 0, 20)
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
    for i in range(4):  # four generations the copy never gets; LLR lets 2 into the file
        await write(cluster, "mbx2", "DB2", "bob", 100 + 10 * i, 10)
        await cluster.ok("POST", "mbx2", "/v1/databases/DB2/roll-log")
    cluster.kill("mbx2")
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
    # resumed, the copy first has to find its active gone before it may be mounted
    await cluster.wait_status("mbx3", "DB2", "DisconnectedAndHealthy")
    activated = await cluster.ok(
        "POST",
        "mbx3",
        "/v1/databases/DB2/activate",
        json={"node": "mbx3", "mount_dial_override": "BestAvailability"},
    )
    assert activated["lost_logs"] == 4

    await cluster.wait_status("mbx3", "DB2", "Mounted")
    await write(cluster, "mbx3", "DB2", "bob", 200, 10)
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/roll-log")
    # mbx2's database file holds generations the new active never had: it must not serve
    # them as a copy of DB2, and only a full reseed brings it back
    await cluster.start("mbx2")

    async def failed():
        copy = (await cluster.status("mbx2"))["DB2"]
        return copy["role"] == "Passive" and copy["status"] == "FailedAndSuspended"

    await cluster.wait_for("the old active to stop", failed)
    assert "full reseed" in (await cluster.status("mbx2"))["DB2"]["error"]
    code, body = await cluster.call("GET", "mbx2", "/v1/databases/DB2/mailboxes/bob/items")
    assert code == 409, "a copy that may hold diverged data serves no reads"
    assert body["active_node"] == "mbx3" and "serves no reads" in body["error"], body
    await cluster.ok("POST", "mbx2", "/v1/databases/DB2/copies/mbx2/reseed")
    await converged(cluster, "DB2", "mbx3", ["mbx2"])
    assert await cluster.items("mbx2", "DB2", "bob") == await cluster.items("mbx3", "DB2", "bob")


async def test_nodes_share_an_etcd_cluster_store(tmp_path):
    from tests.cluster_harness import start_etcd

    (tmp_path / "etcd").mkdir()
    url, etcd = start_etcd(tmp_path / "etcd")
    c = three_nodes(tmp_path / "cluster")
    c.config["cluster_store"] = {"kind": "etcd", "endpoints": [url]}
    c.write_config()
    await c.start()
    try:
        await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
        await write(c, "mbx1", "DB1", "alice", 0, 100)
        await converged(c, "DB1", "mbx1", ["mbx2", "mbx3"])
        switched = await asyncio.to_thread(
            c.node_cli, "db", "switchover", "DB1", "--to", "mbx3", "--json"
        )
        assert switched.returncode == 0, switched.stdout + switched.stderr
        assert json.loads(switched.stdout)["epoch"] == 2
        await c.wait_status("mbx3", "DB1", "Mounted")
        await write(c, "mbx3", "DB1", "alice", 100, 20)
        await converged(c, "DB1", "mbx3", ["mbx1", "mbx2"])
        assert await c.items("mbx1", "DB1", "alice") == await c.items("mbx3", "DB1", "alice")
    finally:
        await c.close()
        etcd.terminate()
        etcd.wait(timeout=10)


async def test_a_hung_active_is_noticed_and_replaced_and_rejoins_when_it_wakes(tmp_path):
    # SIGSTOP, as a long GC pause or a hung disk: the port still accepts, nothing answers.
    # Its copies hear no heartbeat on the notification stream and its status calls time
    # out: it counts as unreachable, and the best copy is mounted (bench/failover.py times it).
    c = three_nodes(tmp_path, defaults={"failover_after": "1s"})
    await c.start()
    hung = c.procs["mbx2"]
    try:
        await c.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
        await write(c, "mbx2", "DB2", "bob", 0, 100)
        await converged(c, "DB2", "mbx2", ["mbx3"])
        before = await c.items("mbx2", "DB2", "bob")
        hung.send_signal(signal.SIGSTOP)

        async def noticed() -> bool:
            return (await c.status("mbx3"))["DB2"]["status"] in (
                "DisconnectedAndHealthy", "Mounted",
            )  # fmt: skip

        await c.wait_for("mbx3 to notice its active hung", noticed)
        await c.wait_status("mbx3", "DB2", "Mounted")
        assert await c.items("mbx3", "DB2", "bob") == before
        await write(c, "mbx3", "DB2", "bob", 100, 10)
        # Woken, the old active learns it was replaced, and follows the new active.
        hung.send_signal(signal.SIGCONT)
        await c.wait_for(
            "mbx2 to follow mbx3",
            lambda: _role(c, "mbx2", "DB2", "Passive"),
        )
        await converged(c, "DB2", "mbx3", ["mbx2"])
        assert await c.items("mbx2", "DB2", "bob") == await c.items("mbx3", "DB2", "bob")
    finally:
        hung.send_signal(signal.SIGCONT)
        await c.close()


async def test_writes_to_an_active_woken_after_its_lease_ran_out_are_never_acknowledged(tmp_path):
    # SIGSTOP past the lease: another copy is activated.  Writes sent to the frozen node wait
    # in its socket; more come the moment it wakes.  Each is refused, or, if answered, is
    # on the new active: none is acknowledged and lost.
    c = three_nodes(tmp_path, defaults={"failover_after": "1s", "lease_ttl": "2s"})
    await c.start()
    hung = c.procs["mbx2"]
    path = "/v1/databases/DB2/mailboxes/bob/items"

    async def put(item: str) -> tuple[str, int]:
        code, _ = await c.call("POST", "mbx2", path, json={"items": [{"item_id": item}]})
        return item, code

    try:
        await c.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
        await write(c, "mbx2", "DB2", "bob", 0, 20)
        await converged(c, "DB2", "mbx2", ["mbx3"])
        hung.send_signal(signal.SIGSTOP)
        queued = [asyncio.create_task(put(f"queued{i}")) for i in range(10)]
        await c.wait_status("mbx3", "DB2", "Mounted")
        hung.send_signal(signal.SIGCONT)
        answers = await asyncio.gather(*queued, *(put(f"woken{i}") for i in range(10)))
        acknowledged = [item for item, code in answers if code < 300]
        refused = {code for _, code in answers if code >= 300}
        assert refused <= {409, 503}, answers
        await c.wait_for("mbx2 to follow mbx3", lambda: _role(c, "mbx2", "DB2", "Passive"))
        on_new_active = await c.items("mbx3", "DB2", "bob")
        lost = [item for item in acknowledged if item not in on_new_active]
        assert not lost, f"acknowledged by the deposed active and lost: {lost}"
    finally:
        hung.send_signal(signal.SIGCONT)
        await c.close()


async def _role(c, node: str, db: str, role: str) -> bool:
    return (await c.status(node))[db]["role"] == role
