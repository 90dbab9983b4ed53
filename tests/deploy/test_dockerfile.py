"""The Dockerfile, parsed (no container runtime needed; tests/image builds and runs it): its
stages, a slim base, a non-root user, Java only where Spark runs, and entrypoints that are
the project's console scripts."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]


def stages() -> dict[str, list[dict]]:
    """Instructions by stage name (FROM ... AS name), ARGs expanded."""
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    out: dict[str, list[dict]] = {}
    current: list[dict] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            words = instruction["value"].split()
            assert len(words) == 3 and words[1].upper() == "AS", f"unnamed stage: {words}"
            current = out[words[2]] = [instruction]
        elif out:
            current.append(instruction)
    return out


def last(stage: list[dict], name: str) -> str | None:
    found = [i["value"] for i in stage if i["instruction"] == name]
    return found[-1] if found else None


def console_scripts() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"]["scripts"])


def test_multi_stage_on_a_slim_python_base():
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    build, runtime, spark = parser.parent_images  # FROM lines, the ARG expanded
    assert build == runtime and runtime.startswith("python:3.11-slim")
    assert spark == "runtime"
    s = stages()
    assert list(s) == ["build", "runtime", "spark"]
    assert s["build"][0]["value"].startswith("${PYTHON_IMAGE}")
    assert s["runtime"][0]["value"].startswith("${PYTHON_IMAGE}"), "runtime from the slim base"
    assert s["spark"][0]["value"].startswith("runtime "), "spark adds to the runtime"
    copies = [i["value"] for i in s["runtime"] + s["spark"] if i["instruction"] == "COPY"]
    assert all(c.startswith("--from=build ") for c in copies), "images take only built wheels"


@pytest.mark.parametrize("stage", ["runtime", "spark"])
def test_images_run_as_a_numeric_non_root_user(stage):
    user = last(stages()[stage], "USER")
    assert user is not None, f"{stage} runs as root"
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{stage}: USER {user} (numeric, for runAsNonRoot)"


def test_java_only_in_the_spark_image():
    s = stages()

    def installs_java(stage: str) -> bool:
        runs = " ".join(i["value"] for i in s[stage] if i["instruction"] == "RUN")
        return "jre" in runs or "jdk" in runs

    assert installs_java("spark")
    assert not installs_java("runtime") and not installs_java("build")
    assert last(s["spark"], "ENV") and "JAVA_HOME" in " ".join(
        i["value"] for i in s["spark"] if i["instruction"] == "ENV"
    )


def entrypoint(stage: str) -> list[str]:
    value = last(stages()[stage], "ENTRYPOINT")
    assert value is not None, f"{stage} has no ENTRYPOINT"
    argv = json.loads(value)  # exec form: signals reach the process, no shell in between
    assert isinstance(argv, list) and argv
    return argv


def test_the_runtime_entrypoint_is_a_console_script():
    assert entrypoint("runtime") == ["replication-node"]
    assert "replication-node" in console_scripts()
    assert {"guarantee-api", "mrs"} <= console_scripts(), "the chart's commands"


def test_the_spark_entrypoint_is_spark_metrics():
    assert entrypoint("spark") == ["spark-metrics"]
    assert "spark-metrics" in console_scripts()


def test_dockerignore_lets_in_only_the_sources():
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "deny everything, then allow the sources"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed >= {"pyproject.toml", "dag_common", "replication_node", "guarantee_api"}
    assert not allowed & {".venv", ".git", "var", ".cache", "tests"}
