"""The images themselves: who they run as, what they leave out, how big they are.

The targets (bench/README.md "Images" says why these numbers): the runtime image is a
Python base (Debian bookworm, python3.11, pip: about 125 MB) plus the services' wheels,
pyarrow the largest; the spark image adds a Java runtime, PySpark's jars, pandas and
matplotlib."""

from __future__ import annotations

import json
import subprocess

import pytest

from tools.build_image import podman, podman_env

MB = 1_000_000
SIZE_TARGETS_MB = {"runtime": 400, "spark": 1600}
# What compiles or links code: none of it belongs in an image that only runs wheels.
BUILD_TOOLS = ["gcc", "cc", "c++", "g++", "clang", "make", "ld", "as", "cpp", "gfortran"]
BUILD_PACKAGES = ["build-essential", "gcc", "g++", "make", "binutils", "cpp", "libc6-dev",
                  "python3-dev", "libpython3.11-dev"]  # fmt: skip


def run(image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command in a throwaway container of `image` (the image's own user)."""
    return subprocess.run(
        ["podman", "run", "--rm", "--network", "none", "--entrypoint", argv[0], image, *argv[1:]],
        env=podman_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def inspect(image: str) -> dict:
    return json.loads(podman("image", "inspect", image).stdout)[0]


@pytest.mark.parametrize("stage", ["runtime", "spark"])
def test_runs_as_uid_10001_not_root(images: dict[str, str], stage: str) -> None:
    image = images[stage]
    assert inspect(image)["Config"]["User"] == "10001:10001"
    result = run(image, "id")
    assert result.returncode == 0 and result.stdout.startswith("uid=10001(dag) gid=10001(dag)"), (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize("stage", ["runtime", "spark"])
def test_holds_no_compiler_or_build_tools(images: dict[str, str], stage: str) -> None:
    found = run(images[stage], "sh", "-c",
                f"for t in {' '.join(BUILD_TOOLS)}; do command -v $t; done; true")  # fmt: skip
    assert found.stdout.split() == [], f"{stage} holds {found.stdout.split()}"
    packages = run(images[stage], "dpkg-query", "-W", "-f", "${Package}\n").stdout.split()
    assert packages, "no dpkg database in the image"
    assert not set(packages) & set(BUILD_PACKAGES), set(packages) & set(BUILD_PACKAGES)


@pytest.mark.parametrize("stage", ["runtime", "spark"])
def test_size_within_its_target(images: dict[str, str], stage: str) -> None:
    size = inspect(images[stage])["Size"]
    target = SIZE_TARGETS_MB[stage]
    assert size < target * MB, f"{stage}: {size / MB:.0f} MB, target {target} MB"


def test_the_runtime_leaves_spark_out(images: dict[str, str]) -> None:
    result = run(
        images["runtime"],
        "python3",
        "-c",
        "import importlib.util as u; "
        "print([m for m in ('pyspark', 'pandas', 'matplotlib') if u.find_spec(m)])",
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
    assert run(images["runtime"], "sh", "-c", "command -v java").stdout == ""


def test_every_console_script_starts(images: dict[str, str]) -> None:
    for script in ["replication-node", "guarantee-api", "mrs", "transport", "imap-front"]:
        result = run(images["runtime"], script, "--help")
        assert result.returncode == 0, f"{script} --help:\n{result.stderr[-2000:]}"
    result = run(images["spark"], "spark-metrics", "--help")
    assert result.returncode == 0, f"spark-metrics --help:\n{result.stderr[-2000:]}"
