from datetime import timedelta
from pathlib import Path

import pytest

from dag_common.config import parse_config
from dag_common.model import CopyRole
from replication_node.cluster.manager import desired_spec, plan_instances

CONFIG = {
    "cluster": "t",
    "nodes": [
        {"name": "a", "site": "s1", "url": "http://127.0.0.1:1", "data_dir": "a"},
        {"name": "b", "site": "s1", "url": "http://127.0.0.1:2", "data_dir": "b"},
    ],
    "databases": [
        {
            "name": "DB1",
            "copies": [
                {"node": "a", "activation_preference": 1},
                {"node": "b", "activation_preference": 2},
            ],
        },
    ],
}


def spec(node="b", active="a", epoch=1, config=CONFIG):
    return desired_spec(parse_config(config, base_dir=Path("/tmp")), node, "DB1", active, epoch)


def test_roles_follow_the_active():
    assert spec("a").role is CopyRole.ACTIVE
    assert spec("b").role is CopyRole.PASSIVE
    assert spec("b").active_url == "http://127.0.0.1:1"


def test_no_instance_without_a_copy():
    cfg = dict(
        CONFIG, databases=[{"name": "DB1", "copies": [{"node": "a", "activation_preference": 1}]}]
    )
    assert spec("b", config=cfg) is None


@pytest.mark.parametrize(
    ("running", "desired", "stop", "start"),
    [
        ({}, {"DB1": spec()}, (), ("DB1",)),
        ({"DB1": spec()}, {"DB1": spec()}, (), ()),
        ({"DB1": spec()}, {}, ("DB1",), ()),
        ({"DB1": spec("b", "a")}, {"DB1": spec("b", "b", 2)}, ("DB1",), ("DB1",)),
        # a passive does not restart for a new epoch of the same active
        ({"DB1": spec("b", "a", 1)}, {"DB1": spec("b", "a", 5)}, (), ()),
        # an active does: it publishes under its epoch
        ({"DB1": spec("a", "a", 1)}, {"DB1": spec("a", "a", 2)}, ("DB1",), ("DB1",)),
    ],
)
def test_plan(running, desired, stop, start):
    plan = plan_instances(running, desired)
    assert plan.stop == stop and plan.start == start


def test_changed_lag_restarts_the_instance():
    cfg = dict(CONFIG)
    cfg["databases"] = [
        {
            "name": "DB1",
            "copies": [
                {"node": "a", "activation_preference": 1},
                {"node": "b", "activation_preference": 2, "replay_lag_time": "1h"},
            ],
        }
    ]
    changed = spec(config=cfg)
    assert changed.copy.replay_lag_time == timedelta(hours=1)
    assert plan_instances({"DB1": spec()}, {"DB1": changed}).start == ("DB1",)
