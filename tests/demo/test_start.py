"""`make demo` waits for each process it starts to answer, and one that does not come up is
named with the end of its log, instead of a traceback from the first request."""

from __future__ import annotations

import subprocess
import sys

import pytest

from demo.waits import Started, wait_healthy
from tools.ports import free_port


def test_a_process_that_exits_before_it_is_ready_is_named_with_its_log(tmp_path):
    log = tmp_path / "mbx2.log"
    log.write_text("starting\nerror: cannot bind 127.0.0.1:7000: address in use\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    proc.wait()
    url = f"http://127.0.0.1:{free_port()}/healthz"
    with pytest.raises(SystemExit) as raised:
        wait_healthy([Started("node mbx2", url, log, proc)], timeout=30)
    said = str(raised.value)
    assert said.startswith("node mbx2 exited (code 2) before it was ready")
    assert "cannot bind 127.0.0.1:7000" in said


def test_a_process_that_never_answers_is_named_at_the_timeout(tmp_path):
    log = tmp_path / "guarantee-api.log"
    log.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        url = f"http://127.0.0.1:{free_port()}/healthz"
        with pytest.raises(SystemExit) as raised:
            wait_healthy([Started("the guarantee service", url, log, proc)], timeout=0.5)
        said = str(raised.value)
        assert said.startswith(f"the guarantee service did not answer {url} within 0.5s")
        assert "(its log is empty)" in said
    finally:
        proc.kill()
        proc.wait()
