"""cluster up's supervision rules (replication_node/cli/supervisor.py), pure."""

from __future__ import annotations

import signal

from replication_node.cli.supervisor import Restarts, last_line, restartable, why_exited


def test_a_node_that_keeps_dying_waits_longer_each_time_and_one_that_ran_starts_at_once():
    b = Restarts()
    b.started_at(0.0)
    assert [b.exited_at(t) for t in (1.0, 2.0, 3.0, 4.0)] == [1.0, 2.0, 4.0, 8.0]
    for _ in range(10):
        b.exited_at(5.0)
    assert b.exited_at(5.0) == 60.0  # capped
    b.started_at(100.0)
    assert b.exited_at(200.0) == 1.0  # it ran a minute: a fresh start


def test_why_a_process_ended_in_words():
    assert why_exited(1) == "exit code 1"
    assert why_exited(-signal.SIGKILL) == "killed by SIGKILL"
    assert not restartable(2) and restartable(1) and restartable(-9)


def test_the_last_line_of_a_log(tmp_path):
    log = tmp_path / "mbx1.log"
    assert last_line(log) == ""
    log.write_text("started\nerror: node mbx1 is already running: pid 7 holds x\n\n")
    assert last_line(log) == "error: node mbx1 is already running: pid 7 holds x"
