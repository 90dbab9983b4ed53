"""The documentation site: it builds with `mkdocs build --strict` (a broken link or anchor,
a page missing from the nav, a generated reference page that cannot be made: each fails
the build), every alert rule has a runbook page its `runbook_url` points at, and the
chart's values are described by its schema, from which its README is made."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

from tests.cluster_harness import ROOT
from tests.prometheus import exported_names

MKDOCS = ROOT / "mkdocs.yml"
ALERTS = ROOT / "charts" / "dag-replication" / "files" / "alerts.yaml"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = load(ROOT / "docs" / "gen_reference.py")
chart_readme = load(ROOT / "tools" / "chart_readme.py")


def mkdocs_config() -> dict:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda *_: None)  # !!python/name: tags, if any
    return yaml.load(MKDOCS.read_text(), Loader=Loader)


def nav_pages(nav: list) -> list[str]:
    out = []
    for entry in nav:
        items = entry.values() if isinstance(entry, dict) else [entry]
        for item in items:
            out += nav_pages(item) if isinstance(item, list) else [item]
    return out


def test_the_site_builds_strictly_with_every_page_and_link(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS), "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    assert "WARNING" not in built.stderr, built.stderr
    for page in nav_pages(mkdocs_config()["nav"]):
        html = site / page.removesuffix("index.md").removesuffix(".md") / "index.html"
        assert html.is_file(), f"{page} was not built"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "replication-node db switchover" in cli and "--mount-dial" in cli
    tutorial = (site / "tutorial" / "index.html").read_text()
    assert "--8&lt;--" not in tutorial and "switched over to mbx3" in tutorial


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def test_every_alert_rule_points_at_its_runbook_page():
    base = mkdocs_config()["site_url"].rstrip("/") + "/runbooks/"
    nav = nav_pages(mkdocs_config()["nav"])
    index = (ROOT / "docs" / "runbooks" / "index.md").read_text()
    names = [r["alert"] for r in rules() if "alert" in r]
    assert len(names) >= 13
    for name in names:
        url = rules()[names.index(name)]["annotations"].get("runbook_url")
        assert url == f"{base}{name}/", f"{name}: runbook_url {url!r}"
        page = ROOT / "docs" / "runbooks" / f"{name}.md"
        assert page.is_file(), f"{name}: no runbook page {page.relative_to(ROOT)}"
        assert page.read_text().startswith(f"# {name}\n"), f"{page.name}: title"
        assert f"runbooks/{name}.md" in nav, f"{name}: runbook not in mkdocs.yml's nav"
        assert f"({name}.md)" in index, f"{name}: not in the runbooks' index"
    orphans = {p.stem for p in (ROOT / "docs" / "runbooks").glob("*.md")} - {*names, "index"}
    assert not orphans, f"runbooks for no rule: {orphans}"


def test_every_chart_value_has_a_description_and_the_readme_is_made_from_them():
    values, schema = chart_readme.values_and_schema()
    undescribed = [
        p for p, _, node in chart_readme.entries(values, schema) if not node.get("description")
    ]
    assert not undescribed, f"values.schema.json describes no {undescribed}"
    assert not list(chart_readme.unnamed(values, schema))
    readme = (ROOT / "charts" / "dag-replication" / "README.md").read_text()
    assert readme == chart_readme.render(), "run python tools/chart_readme.py"
    assert "`metrics.prometheusRule.runbookBaseUrl`" in readme


def test_every_command_and_option_has_its_help_in_the_reference():
    page = gen.cli_page()
    for script, target in gen.console_scripts().items():
        for command in gen.commands(gen.parser_of(target), (script,)):
            if len(command.words) > 1:
                assert command.help, f"{' '.join(command.words)}: no help"
            for action in gen.options(command.parser):
                if isinstance(action, argparse._VersionAction):
                    continue
                assert action.help, f"{' '.join(command.words)} {action.dest}: no help"
                for flag in action.option_strings:
                    assert f"`{flag}" in page or f", {flag}" in page, flag
    assert "### mrs move {#mrs-move}" in page and "--large-item-limit" in page


def test_every_config_model_and_field_is_in_the_reference():
    page = gen.config_page()
    for model in gen.config_models():
        section = page.split(f"\n## {model.__name__}\n", 1)[1].split("\n## ", 1)[0]
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in section, f"{model.__name__}.{name}"
    assert "lease_ttl must be between 1s and 10m" in page  # a validator's message


def test_every_exported_metric_is_in_the_reference(tmp_path):
    page = gen.metrics_page()
    documented = set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    missing = exported_names(tmp_path) - documented
    assert not missing, f"metrics without a reference entry: {sorted(missing)}"
    assert "| `replication_copy_status` | gauge | `database`, `node`, `status` |" in page


def test_the_grpc_reference_names_every_rpc_and_message():
    from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb

    page = gen.grpc_page()
    for method in pb.DESCRIPTOR.services_by_name["DataGuarantee"].methods:
        assert f"| `{method.name}` |" in page
    for name, message in pb.DESCRIPTOR.message_types_by_name.items():
        section = page.split(f"\n## message {name}\n", 1)[1].split("\n## ", 1)[0]
        for field in message.fields:
            assert f"| `{field.name}` |" in section, f"{name}.{field.name}"
