"""The audit trail's file: one whole JSON line a call, read back by database and newest."""

from __future__ import annotations

from dag_common.clock import ManualClock
from dag_common.credentials import Role
from dag_common.route_roles import Call
from replication_node.audit import AuditLog, result_of


def test_calls_are_read_back_by_database_newest_last_and_a_cut_line_is_skipped(tmp_path):
    clock = ManualClock()
    log = AuditLog(tmp_path / "audit.log", node="mbx1", clock=clock)
    for n, (db, status) in enumerate([("DB1", 200), ("DB2", 403), ("DB1", 409), ("DB1", 401)]):
        log(Call("POST", f"/v1/databases/{db}/activate", "ops" if n else None, Role.OPERATOR,
                 status, {"db": db}))  # fmt: skip
    with open(tmp_path / "audit.log", "a") as f:
        f.write('{"time": "cut mid-wr')  # a crash mid-line
    db1 = log.read(database="DB1")
    assert [(e.status, e.result) for e in db1] == [(200, "done"), (409, "failed"),
                                                         (401, "refused")]  # fmt: skip
    assert db1[0].credential is None and db1[1].credential == "ops"
    assert [e.status for e in log.read(limit=2)] == [409, 401]
    assert AuditLog(tmp_path / "none.log", node="x", clock=clock).read() == []


def test_results():
    assert [result_of(s) for s in (200, 201, 401, 403, 409, 500)] == [
        "done", "done", "refused", "refused", "failed", "failed",
    ]  # fmt: skip
