"""The tutorial, run: one cluster from nothing, driven through the real command line, each
command's output written to `docs/tutorial/output/` for the page to include (never typed by
hand).  `tests/test_tutorial.py` runs it again and compares, times, ports and ids aside.

    python docs/tutorial/run.py                      # rewrite docs/tutorial/output/
    python docs/tutorial/run.py --output DIR --workdir DIR

Every wait is for the thing itself (a node's /healthz, a copy's status), never a fixed time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.ports import free_port  # noqa: E402

BIN = Path(sys.executable).parent  # the venv's console scripts
OUTPUT = Path(__file__).with_name("output")


# What differs from one run to the next, and what it becomes before two runs are compared.
VARYING = [
    (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(\+00:00)?", "<time>"),
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>"),
    (r"\b[0-9a-f]{12,32}\b", "<id>"),
    (r"127\.0\.0\.1:\d+", "127.0.0.1:<port>"),
    (r"\b\d+(\.\d+)?s\b", "<secs>"),
    (r"[\d,]+ items/s", "<rate> items/s"),
    (r"\b\d+ bytes", "<n> bytes"),
]


def normalize(text: str) -> str:
    """`text` with times, ids, ports, durations, rates and byte counts replaced, and the
    columns' padding folded (a longer id shifts a table's columns)."""
    for pattern, replacement in VARYING:
        text = re.sub(pattern, replacement, text)
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


class Tutorial:
    """A cluster in `work`, and the commands run against it with their output kept."""

    def __init__(self, work: Path, output: Path) -> None:
        self.work = work
        self.output = output
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("DG_AUTH_TOKEN", "FORCE_COLOR")},
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "NO_COLOR": "1",
            "COLUMNS": "120",
        }
        self.ports = {name: free_port() for name in ("mbx1", "mbx2", "mbx3", "grpc", "http")}
        self.token = ""

    # ---- the page's commands ---------------------------------------------------------

    def run(self, command: str, *, check: bool = True) -> str:
        """Run one shell-free command line as the page shows it; its output, merged."""
        done = subprocess.run(
            shlex.split(command),
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
            check=False,
        )
        if check and done.returncode != 0:
            raise SystemExit(f"tutorial: `{command}` exited {done.returncode}:\n{done.stdout}")
        return f"$ {command}\n{done.stdout}"

    def start(self, name: str, command: str) -> str:
        """Start a long-running process in the background, its output to `<name>.log`."""
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen(
            shlex.split(command), cwd=self.work, env=self.env, stdout=log, stderr=log
        )
        return f"$ {command} > {name}.log 2>&1 &\n"

    def save(self, name: str, *parts: str) -> None:
        self.output.mkdir(parents=True, exist_ok=True)
        (self.output / f"{name}.txt").write_text("".join(parts))

    # ---- waiting for the thing itself ------------------------------------------------

    def get(self, url: str, token: bool = True) -> Any:
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=2) as answer:
            body = answer.read()
        return json.loads(body) if body[:1] in (b"{", b"[") else body

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None and name not in self.stopped:
                    raise SystemExit(f"tutorial: {name} exited {proc.returncode} ({what})")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"tutorial: gave up waiting for {what}")

    stopped: set[str] = set()

    def url(self, node: str) -> str:
        return f"http://127.0.0.1:{self.ports[node]}"

    def copies(self) -> list[dict[str, Any]]:
        out = []
        for node in ("mbx1", "mbx2", "mbx3"):
            if node in self.stopped:
                continue
            with contextlib.suppress(OSError):
                out += self.get(self.url(node) + "/v1/status")["copies"]
        return out

    def converged(self, database: str | None = None) -> bool:
        """Every copy (of `database`) Mounted or Healthy, and every passive one at the
        active's generation with empty queues."""
        copies = [c for c in self.copies() if database in (None, c["database"])]
        if not copies:
            return False
        for db in {c["database"] for c in copies}:
            mine = [c for c in copies if c["database"] == db]
            active = [c for c in mine if c["role"] == "Active" and c["status"] == "Mounted"]
            passive = [c for c in mine if c["role"] == "Passive"]
            if len(active) != 1 or any(c["status"] != "Healthy" for c in passive):
                return False
            top = active[0]["last_log_generated"]
            if any(
                c["last_log_replayed"] < top - 1
                or c["copy_queue_length"]
                or c["replay_queue_length"]
                for c in passive
            ):  # the logs are rolled before each wait: a caught-up copy holds them all
                return False
        return True

    def in_block_mode(self, database: str) -> bool:
        """Every passive copy of `database` follows its active in block mode (a copy that
        caught up after a failover enters it a moment after it is Healthy)."""
        passive = [c for c in self.copies() if c["database"] == database and c["role"] == "Passive"]
        return bool(passive) and all(c["copy_mode"] == "Block" for c in passive)

    def active_of(self, database: str) -> str | None:
        for c in self.copies():
            if c["database"] == database and c["role"] == "Active" and c["status"] == "Mounted":
                return c["node"]
        return None

    # ---- the tutorial ----------------------------------------------------------------

    def config(self) -> str:
        p = self.ports
        return f"""\
cluster: tutorial
auth_token_file: token
cluster_store: {{kind: embedded, path: cluster.db}}
defaults:
  circular_logging: false     # keep logs until a backup has them: incremental backups
  log_roll_interval: 1h       # no idle roll while we look
nodes:
  - {{name: mbx1, site: redmond, url: "http://127.0.0.1:{p["mbx1"]}", data_dir: mbx1}}
  - {{name: mbx2, site: redmond, url: "http://127.0.0.1:{p["mbx2"]}", data_dir: mbx2}}
  - {{name: mbx3, site: dublin,  url: "http://127.0.0.1:{p["mbx3"]}", data_dir: mbx3}}
databases:
  - name: DB1
    copies:
      - {{node: mbx1, activation_preference: 1}}
      - {{node: mbx2, activation_preference: 2}}
      - {{node: mbx3, activation_preference: 3}}
  - name: DB2
    data_move_replication_constraint: SecondDatacenter
    copies:
      - {{node: mbx2, activation_preference: 1}}
      - {{node: mbx3, activation_preference: 2}}
guarantee_api:
  listen: "127.0.0.1:{p["grpc"]}"
  http_listen: "127.0.0.1:{p["http"]}"
  poll_interval: 1s
  history_dir: history
"""

    def main(self) -> None:
        C = "--config cluster.yaml"
        (self.work / "cluster.yaml").write_text(self.config())
        self.token = secrets.token_hex(24)
        (self.work / "token").write_text(self.token + "\n")
        (self.work / "token").chmod(0o600)
        self.save("01-config", "$ cat cluster.yaml\n", self.config())

        # 1. Start three nodes and the Data Guarantee service.
        started = [
            self.start(node, f"replication-node serve {C} --node {node}")
            for node in ("mbx1", "mbx2", "mbx3")
        ]
        started.append(self.start("guarantee-api", f"guarantee-api serve {C}"))
        self.save("02-start", *started)
        for node in ("mbx1", "mbx2", "mbx3"):
            self.wait(
                f"{node}'s /healthz", lambda n=node: bool(self.get(self.url(n) + "/healthz", False))
            )
        self.wait(
            "the guarantee service's /healthz",
            lambda: bool(self.get(f"http://127.0.0.1:{self.ports['http']}/healthz", False)),
        )
        self.wait("every copy Healthy", self.converged)
        self.save("03-status", self.run(f"replication-node status {C}"))

        # 2. Replication: write mail, roll the log, watch the copies follow.
        self.save(
            "04-write",
            self.run(f"replication-node mailbox create alice --database DB1 {C}"),
            self.run(
                f"replication-node mailbox put alice --database DB1 --count 300 --size 2000 {C}"
            ),
            self.run(f"replication-node mailbox list alice --database DB1 --since 297 {C}"),
            self.run(f"replication-node db roll-log DB1 {C}"),
        )
        # DB2's copies claim the stream's epoch at the first generation they inspect.
        self.run(f"replication-node db roll-log DB2 {C}")
        self.wait("the copies caught up", self.converged)
        self.save("05-replicated", self.run(f"replication-node status --database DB1 {C}"))

        # 3. A move, gated on the Data Guarantee.
        self.save(
            "06-move",
            self.run(f"mrs move --mailbox alice --to DB2 {C}"),
            self.run(f"replication-node mailbox where alice {C}"),
        )

        # 4. A switchover: DB2's active to mbx3, losing nothing.
        self.run(f"replication-node db roll-log DB2 {C}")
        self.wait("DB2's copies caught up", lambda: self.converged("DB2"))
        self.save(
            "07-switchover",
            self.run(f"replication-node db switchover DB2 --to mbx3 {C}"),
        )
        self.wait(
            "DB2 mounted on mbx3", lambda: self.converged("DB2") and self.active_of("DB2") == "mbx3"
        )
        self.save("07b-after-switchover", self.run(f"replication-node status --database DB2 {C}"))

        # 5. A failover: kill -9 DB1's active; the best copy mounts once its lease expired.
        self.run(f"replication-node mailbox create bob --database DB1 {C}")
        self.run(f"replication-node db roll-log DB1 {C}")
        self.wait("DB1's copies caught up", lambda: self.converged("DB1"))
        self.stopped.add("mbx1")
        kill = "kill -9 $(cat mbx1/node.lock)"  # the lock holds the node's pid
        subprocess.run(["sh", "-c", kill], cwd=self.work, check=True)
        self.procs["mbx1"].wait(timeout=10)
        self.wait("DB1 failed over", lambda: self.active_of("DB1") not in (None, "mbx1"), 60)
        self.save(
            "08-failover",
            f"$ {kill}      # mbx1, DB1's active, dies\n",
            self.run(f"replication-node db history DB1 {C}"),
        )
        self.stopped.discard("mbx1")
        restarted = self.start("mbx1", f"replication-node serve {C} --node mbx1")
        self.wait("mbx1's /healthz", lambda: bool(self.get(self.url("mbx1") + "/healthz", False)))
        self.run(f"replication-node db roll-log DB1 {C}")
        self.wait(
            "mbx1 back as a passive copy of DB1, both passives following in block mode",
            lambda: self.converged("DB1") and self.in_block_mode("DB1"),
            90,
        )
        self.save("09-rejoined", restarted, self.run(f"replication-node status --database DB1 {C}"))

        # 6. Backups, full then incremental, and a restore.
        self.save(
            "10-backup",
            self.run(f"replication-node db backup DB1 --from mbx3 --to backups/full-1 {C}"),
            self.run(f"replication-node mailbox put bob --database DB1 --count 50 --size 1000 {C}"),
            self.run(
                f"replication-node db backup DB1 --from mbx3 --to backups/inc-1 --incremental {C}"
            ),
            self.run("replication-node db restore backups/full-1 backups/inc-1 --to restored"),
            self.run("replication-node db header restored/DB1.sqlite"),
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where the outputs go")
    parser.add_argument("--workdir", type=Path, help="the cluster's directory (default: temp)")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dag-tutorial-"))
    work.mkdir(parents=True, exist_ok=True)
    tutorial = Tutorial(work.resolve(), args.output.resolve())
    try:
        tutorial.main()
    finally:
        tutorial.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"tutorial outputs in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
