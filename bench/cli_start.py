"""How long a command line takes to start (issue 48, item 15): `--help` and a status read of
each console script, as whole processes, beside `python -c pass` in the same run.

    .venv/bin/python bench/cli_start.py [--runs 15] [--root DIR ...]

Each case is a fresh interpreter (`python -m <the script's module> ARGS`, as the console
script runs it), timed from its start to its exit: wall seconds, and the CPU seconds
(user + system) the kernel counted for it (`os.wait4`), which another engineer's load on the
machine moves much less than the wall time.  Cases run in turns, one run of each in every
round, so that a machine whose speed drifts slows them alike; each figure is the median of
the rounds, and the ratio to `python -c pass` is taken round by round, then its median.

The status reads ask nodes (and a transport) that refuse the connection at once, on ports
nothing listens on: what is timed is the start, the config read and the calls' set-up, not
a network.  The bytecode of each checkout is written by the warm-up round and read after
(PYTHONDONTWRITEBYTECODE is taken out of the commands' environment).  `--root` names
checkouts to time (default: this one), each one's code put first on PYTHONPATH, e.g. the
tree before a change beside the tree after it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.ports import free_port  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]  # after the interpreter


def cases(config: Path) -> list[Case]:
    """`python -c pass`, then each script's `--help`, then the status reads."""
    conf = ("--config", str(config))
    return [
        Case("python -c pass", ("-c", "pass")),
        Case("replication-node --help", ("-m", "replication_node.cli.main", "--help")),
        Case("mrs --help", ("-m", "mrs_client.cli", "--help")),
        Case("transport --help", ("-m", "transport.cli", "--help")),
        Case("guarantee-api --help", ("-m", "guarantee_api.cli", "--help")),
        Case("replication-node status", ("-m", "replication_node.cli.main", "status", *conf)),
        Case("mrs list", ("-m", "mrs_client.cli", "list", *conf)),
        Case("transport status", ("-m", "transport.cli", "status", "--via", "hub1", *conf)),
    ]


def write_config(where: Path) -> Path:
    """Two nodes and a transport on ports nothing listens on; an embedded cluster store."""
    port = free_port
    config = {
        "cluster": "bench",
        "cluster_store": {"kind": "embedded", "path": "cluster.db"},
        "nodes": [
            {"name": n, "site": "s", "url": f"http://127.0.0.1:{port()}", "data_dir": n}
            for n in ("mbx1", "mbx2")
        ],
        "transports": [
            {"name": "hub1", "site": "s", "url": f"http://127.0.0.1:{port()}", "data_dir": "h"}
        ],
        "databases": [
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                ],
            }
        ],
        "guarantee_api": {"listen": f"127.0.0.1:{port()}", "http_listen": f"127.0.0.1:{port()}"},
    }
    path = where / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_once(argv: list[str], root: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """One process in `root` (`-m` puts the working directory first on sys.path): (wall
    seconds, CPU seconds, exit code)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds (default 15)")
    parser.add_argument(
        "--root", action="append", type=Path, help="a checkout to time (default: this one)"
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter")
    args = parser.parse_args()
    roots = [root.resolve() for root in args.root or [ROOT]]
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(Path(tmp))
        todo = cases(config)
        base_env = {**os.environ, "DG_AUTH_TOKEN": "bench-token-0123456789abcdef"}
        # each command starts from its bytecode, as an installed one does (pip and the image
        # compile it; the warm-up writes it here): a shell that says not to write .pyc
        # files would time the compiling of every module of the checkout instead
        base_env.pop("PYTHONDONTWRITEBYTECODE", None)
        envs = {root: {**base_env, "PYTHONPATH": str(root)} for root in roots}
        keys = [(root, case) for root in roots for case in todo]
        walls: dict[tuple[Path, Case], list[float]] = {k: [] for k in keys}
        cpus: dict[tuple[Path, Case], list[float]] = {k: [] for k in keys}
        codes: dict[tuple[Path, Case], set[int]] = {k: set() for k in keys}
        for root, case in keys:  # a warm-up of each: the page cache, .pyc files
            run_once([args.python, *case.argv], root, envs[root])
        for _ in range(args.runs):
            for root, case in keys:
                wall, cpu, code = run_once([args.python, *case.argv], root, envs[root])
                walls[root, case].append(wall)
                cpus[root, case].append(cpu)
                codes[root, case].add(code)
    base = todo[0]
    print(f"{args.runs} rounds; python {sys.version.split()[0]}; {os.cpu_count()} CPUs; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")  # fmt: skip
    for root in roots:
        print(f"\n{root}\n")
        print("| case | wall s (median) | CPU s (median) | wall / python -c pass | "
              "CPU / python -c pass | exit |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---|")
        for case in todo:
            w, c = walls[root, case], cpus[root, case]
            bw, bc = walls[root, base], cpus[root, base]
            wall_ratio = statistics.median(a / b for a, b in zip(w, bw, strict=True))
            cpu_ratio = statistics.median(a / max(b, 1e-3) for a, b in zip(c, bc, strict=True))
            exits = ",".join(str(x) for x in sorted(codes[root, case]))
            print(f"| {case.name} | {statistics.median(w):.3f} | {statistics.median(c):.3f} | "
                  f"{wall_ratio:.1f} | {cpu_ratio:.1f} | {exits} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
