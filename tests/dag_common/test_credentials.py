"""Credentials: which one a secret is, several secrets per credential, reloads that keep the
old ones when the new cannot be read, and the config that names them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from dag_common import config as config_module
from dag_common.config import (
    accepted_credentials,
    load_credentials,
    load_token,
    parse_config,
)
from dag_common.credentials import Accepted, Credential, Credentials, Role, digest
from dag_common.errors import ConfigError

A = "a-secret-of-sixteen-or-more"
B = "b-secret-of-sixteen-or-more"


def test_a_secret_is_told_to_its_credential_and_nothing_else():
    ops = Credential("ops", frozenset({Role.OPERATOR}), (digest(A), digest(B)))
    mail = Credential("mail", frozenset({Role.STORE}), (digest("m" * 20),))
    accepted = Credentials([ops, mail])
    assert accepted.identify(A) is ops and accepted.identify(B) is ops
    assert accepted.identify("m" * 20) is mail
    assert accepted.identify("nope-nope-nope-nope") is None
    assert accepted.identify("") is None and accepted.identify(None) is None
    assert A not in repr(ops) and "digests" not in repr(ops), "secrets never printed"


def config(tmp_path: Path, credentials: list[dict], **more) -> object:
    raw = {
        "cluster": "c",
        "nodes": [{"name": "n1", "site": "s", "url": "http://h:1", "data_dir": "d"}],
        "credentials": credentials,
        **more,
    }
    return parse_config(raw, base_dir=tmp_path)


def test_the_config_names_credentials_by_file_or_environment(tmp_path, monkeypatch):
    (tmp_path / "ops").write_text(f"# rotated 2026-11\n{A}\n\n{B}\n")
    monkeypatch.setenv("MAIL_SECRET", "m" * 20)
    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    cfg = config(tmp_path, [
        {"name": "ops", "roles": ["operator", "monitor"], "file": "ops"},
        {"name": "mail", "roles": ["store"], "env": "MAIL_SECRET"},
    ])  # fmt: skip
    accepted = load_credentials(cfg)
    assert accepted.names == ["ops", "mail"], "no cluster token configured: none accepted"
    assert accepted.identify(B).roles == {Role.OPERATOR, Role.MONITOR}
    assert accepted.holders(Role.STORE) == ["mail"]


@pytest.mark.parametrize(
    ("credentials", "said"),
    [
        ([{"name": "x", "roles": ["store"]}], "name its secrets' file or env"),
        ([{"name": "x", "roles": ["store"], "file": "f", "env": "E"}], "one of them"),
        ([{"name": "x", "roles": ["root"], "file": "f"}], "roles"),
        ([{"name": "x", "roles": [], "file": "f"}], "roles"),
        ([{"name": "cluster", "roles": ["store"], "file": "f"}], "share a name"),
        ([{"name": "x", "roles": ["store"], "file": "f"}] * 2, "share a name"),
    ],
)
def test_a_malformed_credential_is_refused_with_the_reason(tmp_path, credentials, said):
    with pytest.raises(ConfigError, match=said):
        config(tmp_path, credentials)


def test_an_unreadable_or_short_secret_names_its_credential(tmp_path, monkeypatch):
    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    cfg = config(tmp_path, [{"name": "ops", "roles": ["operator"], "file": "missing"}])
    with pytest.raises(ConfigError, match="credential ops: cannot read credential file"):
        load_credentials(cfg)
    (tmp_path / "short").write_text("tooshort\n")
    cfg = config(tmp_path, [{"name": "ops", "roles": ["operator"], "file": "short"}])
    with pytest.raises(ConfigError, match="shorter than 16"):
        load_credentials(cfg)


def test_the_cluster_token_is_a_credential_holding_every_role(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_AUTH_TOKEN", A)
    accepted = load_credentials(config(tmp_path, []))
    assert accepted.identify(A).roles == set(Role) and accepted.names == ["cluster"]


def test_a_process_presents_its_own_credential_file_first(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_AUTH_TOKEN", A)
    cfg = config(tmp_path, [])
    assert load_token(cfg) == A
    (tmp_path / "mine").write_text(f"{B}\n{A}\n")
    monkeypatch.setenv("DG_CREDENTIAL_FILE", str(tmp_path / "mine"))
    assert load_token(cfg) == B, "its first secret"
    (tmp_path / "mine").write_text("")
    with pytest.raises(ConfigError, match="holds no secret"):
        load_token(cfg)


async def test_a_rotation_adds_then_removes_without_a_restart_and_a_bad_file_keeps_the_old(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    (tmp_path / "nodes").write_text(f"{A}\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "cluster: c\n"
        "nodes: [{name: n1, site: s, url: 'http://h:1', data_dir: d}]\n"
        "credentials: [{name: nodes, roles: [replication], file: nodes}]\n"
    )
    accepted = accepted_credentials(path)
    assert accepted().identify(A) and not accepted().identify(B)
    turns = 0

    async def sleep(_: float) -> None:  # the watch's interval, one turn at a time
        nonlocal turns
        turns += 1
        if turns > 3:
            raise asyncio.CancelledError

    (tmp_path / "nodes").write_text(f"{A}\n{B}\n")  # the new one added
    os.utime(tmp_path / "nodes", ns=(1, 2))
    with pytest.raises(asyncio.CancelledError):
        await accepted.watch(sleep)
    assert accepted().identify(A) and accepted().identify(B), "both valid while rolling out"
    (tmp_path / "nodes").write_text(f"{B}\n")  # the old one removed: SIGHUP
    assert accepted.reload()
    assert not accepted().identify(A) and accepted().identify(B)
    (tmp_path / "nodes").write_text("short\n")  # a mistake: nobody is locked out
    assert not accepted.reload()
    assert accepted().identify(B)


def test_the_watch_reads_the_config_again_only_once_it_changed(tmp_path, monkeypatch):
    """Each look of the watch stats the files; the config is parsed again (to learn which
    files it names) only once it changed, and a credential it then names is watched."""
    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    (tmp_path / "nodes").write_text(f"{A}\n")
    (tmp_path / "store").write_text(f"{B}\n")
    path = tmp_path / "cluster.yaml"
    head = "cluster: c\nnodes: [{name: n1, site: s, url: 'http://h:1', data_dir: d}]\n"
    path.write_text(head + "credentials: [{name: nodes, roles: [replication], file: nodes}]\n")
    loads = []
    real = config_module.load_config
    monkeypatch.setattr(config_module, "load_config", lambda p: loads.append(p) or real(p))
    accepted = accepted_credentials(path)
    first = len(loads)
    for _ in range(5):
        assert accepted._stamps() == accepted._seen  # nothing changed: nothing parsed
    assert len(loads) == first
    path.write_text(
        head + "credentials: [{name: nodes, roles: [replication], file: nodes},"
        " {name: store, roles: [store], file: store}]\n"
    )
    os.utime(path, ns=(1, 2))
    assert set(accepted._stamps()) == {path, tmp_path / "nodes", tmp_path / "store"}
    assert accepted._stamps() != accepted._seen and accepted.reload()
    assert accepted().identify(B).name == "store"


def test_accepted_starts_with_what_load_gives():
    fixed = Credentials([Credential("x", frozenset({Role.STORE}), (digest(A),))])
    accepted = Accepted(lambda: fixed, list)
    assert accepted() is fixed


def test_a_service_may_accept_a_secret_by_its_digest_without_holding_it(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    (tmp_path / "ops").write_text(f"sha256:{hashlib.sha256(A.encode()).hexdigest()}\n")
    cfg = config(tmp_path, [{"name": "ops", "roles": ["operator"], "file": "ops"}])
    accepted = load_credentials(cfg)
    assert accepted.identify(A).name == "ops"
    assert accepted.identify(f"sha256:{hashlib.sha256(A.encode()).hexdigest()}") is None


async def test_a_secret_rotated_by_a_symlink_swap_is_followed_each_time(tmp_path, monkeypatch):
    # As a Kubernetes secret volume rotates: `secrets` is a symlink to a directory of the
    # current version, swapped for a new one and the old one deleted.  The config names the
    # file by a relative path, resolved through the symlink when the config is read: each
    # rotation must be followed, not only the first (the files watched are named again once
    # one of them is gone, not only when the config changes).
    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    C = "c-secret-of-sixteen-or-more"

    def version(name: str, secret: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "nodes").write_text(f"{secret}\n")
        (tmp_path / "next").symlink_to(name)
        os.replace(tmp_path / "next", tmp_path / "secrets")

    version("..v1", A)
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "cluster: c\n"
        "nodes: [{name: n1, site: s, url: 'http://h:1', data_dir: d}]\n"
        "credentials: [{name: nodes, roles: [replication], file: secrets/nodes}]\n"
    )
    accepted = accepted_credentials(path)
    assert accepted().identify(A)

    turns = 0

    async def two_looks(_: float) -> None:  # the watch's interval: two looks, then stop
        nonlocal turns
        turns += 1
        if turns % 3 == 0:
            raise asyncio.CancelledError

    for old, new, secret in (("..v1", "..v2", B), ("..v2", "..v3", C)):
        version(new, secret)
        for leftover in (tmp_path / old).iterdir():
            leftover.unlink()
        (tmp_path / old).rmdir()
        with pytest.raises(asyncio.CancelledError):
            await accepted.watch(two_looks)
        assert accepted().identify(secret), f"the secret of {new} accepted"
