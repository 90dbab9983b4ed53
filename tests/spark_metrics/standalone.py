"""A Spark standalone cluster from the pyspark wheel: one master and N workers, each a
`spark-class` process on 127.0.0.1 with ports chosen by the OS. Readiness is read from their
logs (the master's URL, each worker's registration), never waited for by the clock alone."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")


def _wait_for(log: Path, pattern: re.Pattern[str], proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if match := pattern.search(text):
            return match.group(match.lastindex or 0)
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name}: process exited {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.2)  # polling a log file; the deadline above bounds the wait
    raise TimeoutError(f"{log.name}: no {pattern.pattern!r} within {timeout}s")


class StandaloneCluster:
    """`with StandaloneCluster(tmp, workers=2) as url:` a running master's spark:// URL."""

    def __init__(self, base: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.base = base
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.procs: list[subprocess.Popen] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(base / "logs"),
            # no fixed REST port (6066) to collide with another suite's cluster
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }

    def _start(self, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.base / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.base,
            )  # fmt: skip
        self.procs.append(proc)
        return proc, log

    def __enter__(self) -> str:
        self.base.mkdir(parents=True, exist_ok=True)
        try:
            master, log = self._start(
                "master", "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
            )  # fmt: skip
            url = _wait_for(log, _MASTER_URL, master, 120)
            for i in range(self.workers):
                worker, wlog = self._start(
                    f"worker{i}", "org.apache.spark.deploy.worker.Worker", url,
                    "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(self.base / f"work{i}"),
                )  # fmt: skip
                _wait_for(wlog, re.compile("Successfully registered with master"), worker, 120)
        except BaseException:
            self.stop()
            raise
        return url

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __exit__(self, *exc: object) -> None:
        self.stop()
