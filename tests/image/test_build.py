"""`make image` itself: what it leaves in podman's store, and a second checkout of the same
tree, which finds the images already built and must still write its package lists."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.build_image import (
    LABEL,
    ROOT,
    Target,
    build_target,
    context_files,
    image_label,
    podman,
)

# The real Dockerfile's shape in small: a stage that makes files, a stage that mounts them to
# install from, and a stage built on that one.
DOCKERFILE = """\
ARG PYTHON_IMAGE
FROM ${PYTHON_IMAGE} AS build
WORKDIR /wheels
COPY wheel /wheels/wheel
FROM ${PYTHON_IMAGE} AS runtime
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels cat /wheels/wheel > /installed
FROM runtime AS spark
RUN cat /installed > /spark
"""


@pytest.fixture
def tiny_base(tmp_path: Path) -> Iterator[str]:
    """A base image of the host's dash and cat with their libraries: no registry, no
    debootstrap, seconds to make."""
    if shutil.which("podman") is None:
        pytest.skip("no podman here (make system-deps installs it: apt-get install podman)")
    tree = tmp_path / "base"
    for binary in ("/bin/dash", "/bin/cat"):
        libs = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True)
        for path in [binary, *(w for w in libs.stdout.split() if w.startswith("/"))]:
            (tree / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, tree / path.lstrip("/"))
    shutil.copy("/bin/dash", tree / "bin" / "sh")
    (tree / "tmp").mkdir()
    tarball = tmp_path / "base.tar"
    subprocess.run(["tar", "-C", str(tree), "-cf", str(tarball), "."], check=True)
    tag = f"localhost/dag-test-base:{uuid.uuid4().hex[:12]}"
    podman("import", str(tarball), tag)
    yield tag
    podman("rmi", tag, check=False)


def _id(tag: str) -> str:
    return podman("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


def _ours(digest: str) -> set[str]:
    """Every image in the store (intermediate ones too) labelled with `digest`."""
    found = podman("images", "--all", "--no-trunc", "--quiet", "--filter",
                   f"label={LABEL}={digest}")  # fmt: skip
    return {line.removeprefix("sha256:") for line in found.stdout.split()}


def test_a_build_leaves_only_the_images_it_tags(tiny_base: str, tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(DOCKERFILE)
    run = uuid.uuid4().hex[:12]
    targets = [Target(s, f"localhost/dag-test-{s}:{run}") for s in ("spark", "runtime")]
    digests = [f"test-{run}-1", f"test-{run}-2"]
    try:
        for digest in digests:  # the second build replaces the first's images
            (context / "wheel").write_text(digest)
            for target in targets:
                build_target(context, target, digest, base=tiny_base)
        ids = {_id(t.tag) for t in targets}
        assert _ours(digests[0]) == set(), "the replaced images, or the first build's stages"
        assert _ours(digests[1]) == ids, "the second build left images it did not tag"
        for target, file in zip(targets, ("/spark", "/installed"), strict=True):
            assert image_label(target.tag) == digests[1]
            got = podman("run", "--rm", "--network", "none", target.tag, "/bin/cat", file)
            assert got.stdout == digests[1]  # the mounted stage was this build's, not empty
    finally:
        for target in targets:
            podman("rmi", target.tag, check=False)
        for image in _ours(digests[0]) | _ours(digests[1]):
            podman("rmi", image, check=False)


def test_a_second_checkout_finds_the_images_and_writes_its_package_lists(
    images: dict[str, str], tmp_path: Path
) -> None:
    """Another clone of the same tree: its source digest is the images' own, so nothing is
    built, and it has no .cache/image of its own yet."""
    clone = tmp_path / "clone"
    chart = Path("charts", "dag-replication")
    inputs = [ROOT / "Dockerfile", ROOT / ".dockerignore", *context_files(ROOT)]
    for path in [*inputs, ROOT / chart / "values.yaml", ROOT / chart / "Chart.yaml"]:
        (clone / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, clone / path.relative_to(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_image.py"), "--root", str(clone)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": up to date") == 2, done.stdout
    for stage, tag in images.items():
        sbom = json.loads((clone / ".cache" / "image" / f"{stage}-packages.json").read_text())
        assert sbom["image"] == tag and sbom["digest"] == image_label(tag)
        assert "dag-replication" in sbom["python"] and "python3" in sbom["debian"]
