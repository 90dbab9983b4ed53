"""What `imap_front/protocol.py` overrides of pymap is still there, in the shape it was
overridden (an upgrade that moves it fails here, not in a client), and the users file's
refusals."""

from __future__ import annotations

import inspect
from importlib.metadata import version

import pytest
from pymap.imap import IMAPConnection, IMAPServer
from pymap.imap.state import ConnectionState

from imap_front.errors import UsersFileError
from imap_front.protocol import FrontConfig
from imap_front.users import parse_users, read_users

HASH = "$argon2id$v=19$m=8192,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"


def test_pymap_is_the_version_the_subclasses_were_written_against():
    assert version("pymap") == "0.36.7"
    for cls, name in [(IMAPConnection, "readline"), (IMAPConnection, "_interrupt"),
                      (IMAPConnection, "read_command"), (ConnectionState, "do_greeting"),
                      (ConnectionState, "_login"), (IMAPServer, "__call__")]:  # fmt: skip
        assert name in vars(cls), f"pymap's {cls.__name__}.{name} moved"
    assert "from_localhost" in inspect.getsource(ConnectionState.do_greeting)
    assert "readexactly" in inspect.getsource(IMAPConnection.readline)


def test_no_login_is_offered_before_tls_even_without_tls():
    config = FrontConfig(host="127.0.0.1", port=0, ssl_context=None, max_line=8192,
                         max_literal=1000)  # fmt: skip
    assert list(config.initial_auth.server_mechanisms) == []
    assert b"STARTTLS" not in config.initial_capability


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (["alice"], "a mapping"),
        ({"alice": {"mailbox": "alice"}}, "argon2id hash"),
        ({"alice": {"mailbox": "alice", "password": "plain"}}, "argon2id hash"),
        ({"alice": {"mailbox": "a b", "password": HASH}}, "not a mailbox name"),
        (
            {"alice": {"mailbox": "alice", "password": HASH, "admin": True}},
            "mailbox and password only",
        ),
        ({"": {"mailbox": "alice", "password": HASH}}, "printable"),
    ],
)
def test_a_users_file_that_is_not_one_is_refused_saying_why(data, why):
    with pytest.raises(UsersFileError, match=why):
        parse_users(data, "users.yaml")


def test_a_users_file_that_cannot_be_read_or_is_not_yaml_says_where(tmp_path):
    """Read as the cluster config is (`dag_common.yaml_file`): the line and column."""
    with pytest.raises(UsersFileError, match=r"cannot read users file .*absent\.yaml"):
        read_users(tmp_path / "absent.yaml")
    bad = tmp_path / "users.yaml"
    bad.write_text("alice:\n  mailbox: [alice\n", encoding="utf-8")
    with pytest.raises(UsersFileError, match=r"users\.yaml, line 3, column 1: not valid YAML"):
        read_users(bad)


def test_a_user_may_hold_two_hashes_while_a_password_rotates():
    users = parse_users({"alice": {"mailbox": "alice", "password": [HASH, HASH]}}, "u")
    assert users["alice"].mailbox == "alice" and len(users["alice"].hashes) == 2
