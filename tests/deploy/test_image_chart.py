"""The chart and the images agree, checked without a container runtime (the default suite;
tests/image runs them): the chart deploys the tags `make image` builds, each container's
command is a console script of the image it runs, its ports are the image's, its user the
image's, and its writable paths are mounts (the root filesystem is read-only)."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from tests.deploy.test_chart import CHART, ROOT, documents, helm
from tools.build_image import targets

VALUE_SETS = ["default", "production-values.yaml", "least-privilege-values.yaml"]


def pods(value_set: str) -> list[dict[str, Any]]:
    """Every workload's pod template, rendered."""
    extra = [] if value_set == "default" else ["-f", str(CHART / "ci" / value_set)]
    docs = documents(helm("template", "dag", str(CHART), "--namespace", "mail", *extra).stdout)
    out = []
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment"):
            out.append(d["spec"]["template"])
        elif d["kind"] == "CronJob":
            out.append(d["spec"]["jobTemplate"]["spec"]["template"])
    return out


def stage_of(template: dict[str, Any]) -> str:
    return (
        "spark"
        if template["metadata"]["labels"]["app.kubernetes.io/component"] == ("spark-metrics")
        else "runtime"
    )


def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(ROOT / "Dockerfile"))


def stage_instructions(stage: str) -> list[dict]:
    out: dict[str, list[dict]] = {}
    current: list[dict] = []
    for i in dockerfile().structure:
        if i["instruction"] == "FROM":
            current = out[i["value"].split()[-1]] = []
        current.append(i)
    return out[stage]


def last(stage: str, name: str) -> str:
    values = [i["value"] for i in stage_instructions(stage) if i["instruction"] == name]
    if not values and stage == "spark":
        return last("runtime", name)
    return values[-1]


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_chart_deploys_the_tags_make_image_builds(value_set: str) -> None:
    """A value set may name a registry: the image's name and tag stay make image's."""
    built = {t.stage: t.tag for t in targets()}
    for template in pods(value_set):
        (container,) = template["spec"]["containers"]
        image, tag = container["image"], built[stage_of(template)]
        assert image == tag or image.endswith(f"/{tag}"), f"{container['name']}: {image}"


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_commands_are_console_scripts_of_their_image(value_set: str) -> None:
    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = set(tomllib.load(f)["project"]["scripts"])
    for template in pods(value_set):
        (container,) = template["spec"]["containers"]
        assert container["command"][0] in scripts, container["command"]
        if stage_of(template) == "spark":
            assert container["command"] == ["spark-metrics"]


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_ports_and_user_are_the_images(value_set: str) -> None:
    exposed = {int(p) for p in last("runtime", "EXPOSE").split()}
    user, group = (int(x) for x in last("runtime", "USER").split(":"))
    for template in pods(value_set):
        (container,) = template["spec"]["containers"]
        ports = {p["containerPort"] for p in container.get("ports", [])}
        assert ports <= exposed, f"{container['name']}: {ports - exposed} not EXPOSEd"
        security = template["spec"]["securityContext"]
        assert (security["runAsUser"], security["runAsGroup"]) == (user, group)
        assert security["runAsNonRoot"] is True


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_written_path_is_a_mount(value_set: str) -> None:
    """The root filesystem is read-only: /tmp and the data directories are volumes."""
    for template in pods(value_set):
        (container,) = template["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts, container["name"]
