"""The images the chart deploys, built once per run (`tools/build_image.py`, cached under
.cache/image and in podman's store: unchanged sources are not built again).  Skipped, with
the reason, only where no container runtime can be had: no podman, or not root (the base
is made with debootstrap and the containers run on a rootful bridge network)."""

from __future__ import annotations

import os
import shutil

import pytest

from tools.build_image import Target, ensure_images

# The first image test builds both images in its setup (`images`, once per run): a build
# from scratch, or after a dependency changed, is minutes of pip and debootstrap, more on a
# busy machine (it overran the suite's 300 s on 2026-11-29 with its test not yet begun).
BUILD_TIMEOUT = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/image/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.image)
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT))


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """The chart's images by Dockerfile target (runtime, spark), built if they changed."""
    if shutil.which("podman") is None:
        pytest.skip("no podman here (make system-deps installs it: apt-get install podman)")
    if os.geteuid() != 0:
        pytest.skip("not root: the base image needs debootstrap, the cluster a rootful network")
    built: list[Target] = ensure_images()
    return {t.stage: t.tag for t in built}
