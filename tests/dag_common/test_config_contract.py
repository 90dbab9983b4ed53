# ruff: noqa: E501 - DESIGN.md's example, one node a line as it is written there
"""DESIGN.md's cluster config loads as written; what it names that is not built yet is
refused with the reason, never silently pretended."""

from __future__ import annotations

import pytest

from dag_common.config import parse_config
from dag_common.errors import ConfigError

DESIGN_EXAMPLE = {
    "cluster": "dag1",
    "auth_token_file": "./var/token",
    "cluster_store": {"kind": "embedded", "path": "./var/cluster.db"},
    "defaults": {
        "log_file_size": "1MiB",
        "llr_depth": 10,
        "auto_database_mount_dial": "BestAvailability",
        "data_move_replication_constraint": "SecondCopy",
        "circular_logging": True,
        "failover_after": "15s",
        "lease_ttl": "10s",
        "synchronous_copies": 0,
    },
    "nodes": [
        {"name": "mbx1", "site": "redmond", "url": "http://127.0.0.1:7101", "data_dir": "./var/mbx1"},
        {"name": "mbx2", "site": "redmond", "url": "http://127.0.0.1:7102", "data_dir": "./var/mbx2"},
        {"name": "mbx3", "site": "dublin", "url": "http://127.0.0.1:7103", "data_dir": "./var/mbx3"},
    ],
    "databases": [
        {
            "name": "DB1",
            "data_move_replication_constraint": "SecondDatacenter",
            "copies": [
                {"node": "mbx1", "activation_preference": 1},
                {"node": "mbx2", "activation_preference": 2},
                {"node": "mbx3", "activation_preference": 3, "replay_lag_time": "0s",
                 "truncation_lag_time": "0s"},
            ],
        },
        {
            "name": "DB2",
            "copies": [
                {"node": "mbx2", "activation_preference": 1},
                {"node": "mbx3", "activation_preference": 2},
            ],
        },
    ],
    "guarantee_api": {
        "listen": "127.0.0.1:7200",
        "http_listen": "127.0.0.1:7201",
        "poll_interval": "1s",
        "history_dir": "./var/history",
    },
}  # fmt: skip


def test_designs_example_config_loads_as_written(tmp_path):
    config = parse_config(DESIGN_EXAMPLE, base_dir=tmp_path)
    assert config.defaults.lease_ttl.total_seconds() == 10
    assert config.defaults.synchronous_copies == 0


def test_synchronous_copies_are_bounded_by_the_passive_copies_there_are(tmp_path):
    defaults = {**DESIGN_EXAMPLE["defaults"], "synchronous_copies": 1}
    config = parse_config({**DESIGN_EXAMPLE, "defaults": defaults}, base_dir=tmp_path)
    assert config.synchronous_copies_of(config.database("DB1")) == 1
    # DB2 has one passive copy: two synchronous copies could never acknowledge a commit
    databases = [DESIGN_EXAMPLE["databases"][0], {**DESIGN_EXAMPLE["databases"][1],
                                                  "synchronous_copies": 2}]  # fmt: skip
    with pytest.raises(ConfigError, match=r"DB2: synchronous_copies is 2 but it has 1 passive"):
        parse_config({**DESIGN_EXAMPLE, "databases": databases}, base_dir=tmp_path)


def test_max_item_size_defaults_to_36_mib_and_a_database_may_override_it(tmp_path):
    config = parse_config(DESIGN_EXAMPLE, base_dir=tmp_path)
    assert config.max_item_size_of(config.database("DB1")) == 36 * 1024 * 1024
    defaults = {**DESIGN_EXAMPLE["defaults"], "max_item_size": "10MB"}
    databases = [DESIGN_EXAMPLE["databases"][0], {**DESIGN_EXAMPLE["databases"][1],
                                                  "max_item_size": "150MiB"}]  # fmt: skip
    config = parse_config(
        {**DESIGN_EXAMPLE, "defaults": defaults, "databases": databases}, base_dir=tmp_path
    )
    assert config.max_item_size_of(config.database("DB1")) == 10_000_000
    assert config.max_item_size_of(config.database("DB2")) == 150 * 1024 * 1024
    assert config.largest_max_item_size() == 150 * 1024 * 1024


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (0, "not 0 bytes"),
        ("151MiB", "not 158334976 bytes"),
        ("a lot", "could not parse value and unit"),
    ],
)
def test_a_max_item_size_out_of_range_is_refused_naming_the_field(tmp_path, value, reason):
    databases = [DESIGN_EXAMPLE["databases"][0], {**DESIGN_EXAMPLE["databases"][1],
                                                  "max_item_size": value}]  # fmt: skip
    defaults = {**DESIGN_EXAMPLE["defaults"], "max_item_size": value}
    with pytest.raises(ConfigError) as err:
        parse_config(
            {**DESIGN_EXAMPLE, "defaults": defaults, "databases": databases}, base_dir=tmp_path
        )
    lines = str(err.value).splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == [
        "defaults.max_item_size",
        "databases[DB2].max_item_size",
    ]
    assert all(reason in line for line in lines), lines
    if value != "a lot":
        assert all("max_item_size must be more than 0 bytes and at most 150MiB" in line
                   for line in lines)  # fmt: skip


def test_synchronous_copies_need_block_mode(tmp_path):
    defaults = {**DESIGN_EXAMPLE["defaults"], "synchronous_copies": 1, "block_mode": False}
    with pytest.raises(ConfigError, match=r"synchronous_copies needs block mode"):
        parse_config({**DESIGN_EXAMPLE, "defaults": defaults}, base_dir=tmp_path)


def test_config_errors_name_items_by_name_and_yaml_errors_by_file_and_line(tmp_path):
    """An operator reads `databases[DB1].copies[mbx2]`, not `databases.0.copies.1`."""
    from dag_common.config import load_config
    from dag_common.errors import ConfigError

    good = tmp_path / "cluster.yaml"
    good.write_text(
        "cluster: dag1\n"
        "nodes:\n"
        "  - {name: mbx1, site: redmond, url: 'http://127.0.0.1:7101'}\n"
        "  - {name: mbx2, site: redmond, url: 'ftp://x'}\n"
        "databases:\n"
        "  - name: DB1\n"
        "    copies:\n"
        "      - {node: mbx1, activation_preference: 1}\n"
        "      - {node: mbx2, activation_preference: x}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(good)
    text = str(err.value)
    assert "nodes[mbx2].url: Value error, url must look like http://host:port" in text, text
    assert "databases[DB1].copies[mbx2].activation_preference: Input should be" in text, text
    bad = tmp_path / "broken.yaml"
    bad.write_text("cluster: a\nnodes: [\n  - name\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(err.value) == (
        f"{bad}, line 3, column 3: not valid YAML: expected the node content, but found '-'"
    )


def test_the_example_config_loads_with_paths_beside_it():
    from dag_common.config import load_config
    from tests.cluster_harness import ROOT

    config = load_config(ROOT / "examples" / "cluster.yaml")
    assert [n.name for n in config.nodes] == ["mbx1", "mbx2", "mbx3"]
    assert {n.site for n in config.nodes} == {"redmond", "dublin"}
    assert [d.name for d in config.databases] == ["DB1", "DB2"]
    assert all(n.data_dir.parent == ROOT / "examples" / "var" for n in config.nodes)


def test_files_named_relative_to_a_kubernetes_volume_follow_its_updates(tmp_path):
    """A ConfigMap's or Secret's volume holds each file as `name -> ..data/name`, `..data` a
    link to a versioned directory that each update swaps and removes.  The files the config
    names relative to itself are read where the operator put them (through `..data`), so
    that an update (a rotated credential) is read, and the removed version never named."""
    from dag_common.config import load_config

    volume = tmp_path / "etc-dag"
    old = volume / "..2026_11_30_10_00_00.1"
    old.mkdir(parents=True)
    (old / "cluster.yaml").write_text(
        "cluster: dag1\n"
        "credentials:\n"
        "  - {name: movers, roles: [mover], file: movers.tokens}\n"
        "tls: {cert_file: tls/node.crt, key_file: tls/node.key, ca_file: tls/ca.crt}\n"
        "nodes:\n"
        "  - {name: mbx1, site: redmond, url: 'http://127.0.0.1:7101', data_dir: data}\n"
        "databases: []\n"
    )
    (old / "movers.tokens").write_text("first\n")
    (volume / "..data").symlink_to(old.name)
    for name in ("cluster.yaml", "movers.tokens", "tls"):
        (volume / name).symlink_to(f"..data/{name}")

    config = load_config(volume / "cluster.yaml")
    (movers,) = [c for c in config.credentials if c.name == "movers"]
    assert movers.file == volume / "movers.tokens"
    assert config.tls is not None and config.tls.cert_file == volume / "tls" / "node.crt"
    assert config.nodes[0].data_dir == volume / "data"  # a directory: resolved (no link here)

    # The update: a new version, `..data` swapped, the old one removed (as the kubelet does).
    new = volume / "..2026_11_30_11_00_00.2"
    new.mkdir()
    (new / "movers.tokens").write_text("second\n")
    (volume / "..data_tmp").symlink_to(new.name)
    (volume / "..data_tmp").replace(volume / "..data")
    (old / "movers.tokens").unlink()
    (old / "cluster.yaml").unlink()
    old.rmdir()
    assert movers.file.read_text() == "second\n"
