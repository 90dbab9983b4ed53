"""The etcd cluster store's settings: what a config may say, and how a wrong one is refused
(the field and why, through ConfigError as every config error)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dag_common.config import parse_config
from dag_common.config_store import EtcdStore
from dag_common.errors import ConfigError

HTTPS = ["https://etcd-0:2379", "https://etcd-1:2379/"]


def store_config(**store: object) -> dict[str, object]:
    return {
        "cluster": "dag1",
        "cluster_store": {"kind": "etcd", **store},
        "nodes": [{"name": "mbx1", "site": "a", "url": "http://127.0.0.1:7101", "data_dir": "d"}],
    }


def test_every_setting_loads_and_relative_files_are_taken_from_the_config_directory(tmp_path):
    config = parse_config(
        store_config(
            endpoints=HTTPS,
            ca_file="pki/ca.pem",
            cert_file="/etc/dag/etcd/tls.crt",
            key_file="/etc/dag/etcd/tls.key",
            username="dag",
            password_file="secrets/etcd-password",
            timeout="2500ms",
        ),
        base_dir=tmp_path,
    )
    store = config.cluster_store
    assert isinstance(store, EtcdStore)
    assert store.endpoints == ["https://etcd-0:2379", "https://etcd-1:2379"]
    assert store.ca_file == tmp_path / "pki" / "ca.pem"
    assert store.cert_file is not None and str(store.cert_file) == "/etc/dag/etcd/tls.crt"
    assert store.password_file == tmp_path / "secrets" / "etcd-password"
    assert store.timeout == timedelta(milliseconds=2500)


def test_without_the_new_settings_an_etcd_store_is_as_before(tmp_path):
    store = parse_config(store_config(endpoints=["http://etcd:2379"]), base_dir=tmp_path)
    assert store.cluster_store == EtcdStore(kind="etcd", endpoints=["http://etcd:2379"])
    assert store.cluster_store.timeout == timedelta(seconds=5)
    assert store.cluster_store.ca_file is None and store.cluster_store.username is None


@pytest.mark.parametrize(
    ("store", "error"),
    [
        (
            {"endpoints": HTTPS, "cert_file": "c.pem"},
            "cluster_store.etcd: .*cert_file is set but key_file is not: a client certificate "
            "needs both",
        ),
        (
            {"endpoints": HTTPS, "key_file": "c.key"},
            "key_file is set but cert_file is not",
        ),
        (
            {"endpoints": HTTPS, "username": "dag"},
            "cluster_store.etcd: .*username is set but password_file is not: etcd "
            "authentication needs both",
        ),
        (
            {"endpoints": HTTPS, "password_file": "pw"},
            "password_file is set but username is not",
        ),
        (
            {"endpoints": HTTPS, "username": "dag", "password": "hunter2"},
            "password is not accepted: the etcd password is never written in the config; put "
            "it in a file and name that file in password_file",
        ),
        (
            {"endpoints": ["https://etcd-0:2379", "http://etcd-1:2379"], "ca_file": "ca.pem"},
            r"cluster_store.etcd: .*TLS files are set \(ca_file\), so every endpoint must be "
            "https://, but http://etcd-1:2379 is not",
        ),
        (
            {"endpoints": ["http://etcd:2379"], "cert_file": "c.pem", "key_file": "c.key"},
            r"TLS files are set \(cert_file, key_file\)",
        ),
        (
            {"endpoints": ["etcd:2379"]},
            "cluster_store.etcd.endpoints: .*'etcd:2379' is not a URL like https://host:2379",
        ),
        ({"endpoints": HTTPS, "timeout": "0s"}, "cluster_store.etcd.timeout: .*more than 0s"),
        ({"endpoints": HTTPS, "timeout": "soon"}, "cluster_store.etcd.timeout: .*not a duration"),
        ({"endpoints": HTTPS, "username": ""}, "cluster_store.etcd.username"),
    ],
)
def test_a_wrong_etcd_setting_is_refused_with_the_field_and_why(tmp_path, store, error):
    with pytest.raises(ConfigError, match=error):
        parse_config(store_config(**store), base_dir=tmp_path)


def test_an_https_endpoint_without_ca_file_is_accepted_for_the_system_cas(tmp_path):
    config = parse_config(store_config(endpoints=HTTPS), base_dir=tmp_path)
    assert config.cluster_store.ca_file is None
