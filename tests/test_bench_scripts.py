"""The benchmark scripts still import against the code they measure: a refactor that moves
a name breaks `bench/` at once here, not at the next session's measurement (issue 33's
layers moved `PassiveSettings` and left bench/large_items.py failing for a day).  Each
script is loaded as a module, not run: its `main` stays behind `if __name__ ...`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bench_script_imports(script):
    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", ROOT / "bench" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]


def test_a_bench_script_answers_help():
    """One of them run as a stranger would: --help, exit 0."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "shipping.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout


@pytest.mark.slow
def test_the_imap_bench_runs_its_quick_mode(tmp_path):
    """bench/imap.py --small end to end (Dovecot's imapd and LMTP, the cluster, the
    transport, the front, mbsync): every phase measured and checked, the summary printed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "imap.py"), "--small", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-2])
    assert summary["small"] and summary["messages"] == 200, summary
    for key in ("ratio_flags", "ratio_bodies", "ratio_mbsync", "front_idle_p99_ms"):
        assert summary[key] > 0, (key, summary)
    assert summary["idle_sessions"] == 20, summary


@pytest.mark.slow
def test_the_imap_bench_runs_its_idle_scale_quick_mode(tmp_path):
    """bench/imap.py --small --scale: 20 idle sessions on the front and on Dovecot, memory
    read from /proc at each step, five deliveries timed to every idler's EXISTS."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "imap.py"), "--small", "--scale",
         "--dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-2])
    assert summary["front_sessions"] == summary["dovecot_sessions"] == 20, summary
    assert 0 < summary["front_kib_per_session_rss"] < 1024, summary
    assert summary["dovecot_kib_per_session_pss"] > 0, summary
    assert summary["front_idle_p99_ms"] > 0 and summary["dovecot_idle_p99_ms"] > 0, summary
    assert not (tmp_path / "work").exists()  # removed without --keep


@pytest.mark.parametrize("keep", [False, True])
def test_a_bench_work_dir_is_removed_unless_kept(tmp_path, keep):
    """bench/workdir.py: the directory is emptied at the start, and gone after the run (a
    failed one too) unless `--keep` says to leave it."""
    import argparse

    from bench.workdir import add_work_dir, work_dir

    parser = argparse.ArgumentParser()
    add_work_dir(parser, str(tmp_path / "default"))
    where = tmp_path / "work"
    (where / "old").mkdir(parents=True)
    args = parser.parse_args(["--dir", str(where), *(["--keep"] if keep else [])])
    with pytest.raises(RuntimeError), work_dir(args) as base:
        assert base == where and not (where / "old").exists()
        (base / "new").write_bytes(b"x" * 1000)
        raise RuntimeError("the run fails")
    assert where.exists() is keep
    assert parser.parse_args([]).dir == str(tmp_path / "default")


def test_a_second_run_in_the_same_work_dir_is_refused_and_wipes_nothing(tmp_path):
    """bench/workdir.py: while a run holds its directory, another given the same `--dir`
    stops at once with one line naming it, and the first run's files stay."""
    import argparse

    from bench.workdir import add_work_dir, work_dir

    parser = argparse.ArgumentParser()
    add_work_dir(parser, str(tmp_path / "work"))
    args = parser.parse_args([])
    with work_dir(args) as base:
        (base / "cluster").write_text("the first run's")
        second = subprocess.run(
            [sys.executable, "-c", "import argparse, sys\n"
             "from bench.workdir import add_work_dir, work_dir\n"
             "p = argparse.ArgumentParser(); add_work_dir(p, sys.argv[1])\n"
             "with work_dir(p.parse_args([])): pass\n", str(base)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 1, second
        assert second.stderr.strip().splitlines() == [
            f"{base} is in use by another run (pid {os.getpid()}): wait for it, or give --dir"
        ]
        assert (base / "cluster").read_text() == "the first run's"
    with work_dir(args) as base:  # free again once the first ended
        assert not (base / "cluster").exists()


def test_a_bench_work_dir_without_wipe_keeps_what_is_in_it(tmp_path):
    """bench/workdir.py's `wipe=False` (bench/spark_history.py's generated input, kept between
    runs): the lock alone; the files found stay, and the directory stays at the end."""
    import argparse

    from bench.workdir import work_dir

    where = tmp_path / "work"
    (where / "history").mkdir(parents=True)
    args = argparse.Namespace(dir=where)
    with work_dir(args, wipe=False) as base:
        assert (base / "history").is_dir()
        (base / "out").write_text("x")
    assert (where / "history").is_dir() and (where / "out").exists()
    with work_dir(argparse.Namespace(dir=tmp_path / "new"), wipe=False) as base:
        assert base.is_dir()  # made when missing
    assert base.is_dir()
