"""How long the command lines take to start in the runtime image, as a pod runs them (issue 48,
item 15): `podman run --read-only` of the image `make image` built, and inside it each command
timed as a fresh process, medians of `--runs` rounds, beside `python3 -c pass`.

    .venv/bin/python bench/cli_start_image.py [--image localhost/dag-replication:0.1.0] [--runs 11]

`status` reads a config naming one node on a closed port (start, config, the call's set-up;
no network wait), as bench/cli_start.py does outside the image.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.build_image import podman_env  # noqa: E402

CONFIG = """cluster: c
nodes:
  - {name: mbx1, site: s, url: "http://127.0.0.1:1", data_dir: /tmp/x}
databases:
  - {name: DB1, copies: [{node: mbx1, activation_preference: 1}]}
"""

# Run inside the container: each case a fresh process, in turns, round by round.
INSIDE = """
import os, statistics, subprocess, sys, time
cases = {
    "python3 -c pass": [sys.executable, "-c", "pass"],
    "replication-node --help": ["replication-node", "--help"],
    "replication-node status": ["replication-node", "status", "--config", "/b/c.yaml"],
    "transport status": ["transport", "status", "--via", "x", "--config", "/b/c.yaml"],
}
times = {k: [] for k in cases}
for _ in range(int(sys.argv[1])):
    for name, argv in cases.items():
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "DG_AUTH_TOKEN": "x"})
        times[name].append(time.perf_counter() - start)
for name, values in times.items():
    print(f"| {name} | {statistics.median(values):.3f} |")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="localhost/dag-replication:0.1.0")
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o755)  # the image's user (10001) reads it
        (Path(tmp) / "c.yaml").write_text(CONFIG)
        (Path(tmp) / "inside.py").write_text(INSIDE)
        done = subprocess.run(
            ["podman", "run", "--rm", "--read-only", "--network", "none",
             "-v", f"{tmp}:/b:ro", "--entrypoint", "python3", args.image,
             "/b/inside.py", str(args.runs)],
            env=podman_env(), capture_output=True, text=True, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"podman run: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    print(f"{args.image}, medians of {args.runs} rounds (wall seconds)\n")
    print("| case | s |\n|---|---:|")
    print(done.stdout, end="")


if __name__ == "__main__":
    main()
