"""The controller's state as ZooKeeper znodes, without ZooKeeper: Kafka's layout and JSON,
the round trip, and the writes one save plans."""

import copy
import json
import random

import pytest

from broker.controller import (
    ControllerState,
    alter_reassignment,
    create_topic,
    fence_broker,
    register_broker,
)
from broker.controller import zk_layout as layout


def _state() -> ControllerState:
    state = ControllerState(controller_epoch=7)
    for node_id in (1, 2, 3):
        register_broker(
            state,
            node_id,
            "localhost",
            9000 + node_id,
            f"incarnation-{node_id}",
            1234,
            listeners={"PLAINTEXT": ("localhost", 9000 + node_id)},
        )
    create_topic(state, "a", 3, 2, {"cleanup.policy": "compact"}, rng=random.Random(1))
    create_topic(state, "b.c", 1, 3, {}, rng=random.Random(3))
    # Partition a-0 gains the broker it lacks: a reassignment in progress.
    replicas = state.topics["a"].partitions[0].replicas
    alter_reassignment(state, "a", 0, replicas + [b for b in (1, 2, 3) if b not in replicas])
    fence_broker(state, 2, unclean=False)
    state.broker_configs = {"": {"log.retention.ms": "1000"}, "1": {"message.max.bytes": "99"}}
    return state


def _without_heartbeats(state: ControllerState) -> ControllerState:
    copied = copy.deepcopy(state)
    for broker in copied.brokers.values():
        broker.last_heartbeat_ms = 0
    return copied


def test_znodes_round_trip_every_saved_field():
    state = _state()
    loaded = layout.state_from_znodes(layout.state_znodes(state), controller_epoch=8)
    expected = _without_heartbeats(state)
    expected.controller_epoch = 8
    assert loaded == expected


def test_the_layout_is_kafkas():
    state = _state()
    znodes = layout.state_znodes(state)
    topic = json.loads(znodes["/brokers/topics/a"])
    assert topic["version"] == 3
    assert layout.uuid_from_kafka(topic["topic_id"]) == state.topics["a"].topic_id
    assert topic["partitions"] == {
        str(i): p.replicas for i, p in enumerate(state.topics["a"].partitions)
    }
    adding = state.topics["a"].partitions[0].adding_replicas
    assert adding and topic["adding_replicas"] == {"0": adding}
    partition = state.topics["a"].partitions[0]
    assert json.loads(znodes["/brokers/topics/a/partitions/0/state"]) == {
        "version": 1,
        "controller_epoch": 7,
        "leader": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "isr": partition.isr,
        "partition_epoch": partition.partition_epoch,
    }
    assert json.loads(znodes["/config/topics/a"]) == {
        "version": 1,
        "config": {"cleanup.policy": "compact"},
    }
    assert json.loads(znodes["/config/brokers/<default>"])["config"] == {"log.retention.ms": "1000"}
    assert json.loads(layout.controller_znode(2, 99)) == {
        "version": 1,
        "brokerid": 2,
        "timestamp": "99",
    }


def test_an_unchanged_partition_keeps_the_epoch_of_the_controller_that_wrote_it():
    state = _state()
    before = layout.state_znodes(state)
    state.controller_epoch = 8
    fence_broker(state, 3, unclean=False)
    after = layout.state_znodes(state, before)
    for path in after:
        if path.endswith("/state"):
            written_by = json.loads(after[path])["controller_epoch"]
            assert written_by == (8 if after[path] != before[path] else 7), path
    assert any(after[path] != before[path] for path in after if path.endswith("/state"))


def test_a_save_writes_only_what_changed_parents_first_children_first_on_delete():
    state = _state()
    before = layout.state_znodes(state)
    assert layout.plan_writes(before, before) == []
    create_topic(state, "new", 1, 1, {}, rng=random.Random(5))
    del state.topics["a"]
    writes = layout.plan_writes(before, layout.state_znodes(state, before))
    kinds = [(write.kind, write.path) for write in writes]
    deletes = [path for kind, path in kinds if kind == "delete"]
    creates = [path for kind, path in kinds if kind == "create"]
    assert set(deletes) == {
        path
        for path in before
        if path.startswith("/brokers/topics/a/")
        or path in ("/brokers/topics/a", "/config/topics/a")
    }
    assert (
        deletes.index("/brokers/topics/a/partitions/0/state")
        < deletes.index("/brokers/topics/a/partitions/0")
        < deletes.index("/brokers/topics/a/partitions")
        < deletes.index("/brokers/topics/a")
    )
    assert (
        creates.index("/brokers/topics/new")
        < creates.index("/brokers/topics/new/partitions")
        < creates.index("/brokers/topics/new/partitions/0/state")
    )
    assert kinds.index(("delete", deletes[-1])) < kinds.index(("create", creates[0]))
    assert [path for kind, path in kinds if kind == "set"] == []


def test_unreadable_state_refuses_to_load():
    znodes = layout.state_znodes(_state())
    znodes["/brokers/topics/a/partitions/1/state"] = b"{not json"
    with pytest.raises(ValueError, match="not readable"):
        layout.state_from_znodes(znodes, 8)


def test_producer_id_blocks_follow_kafkas_inclusive_end():
    assert layout.next_producer_id(None) == 0
    block = layout.producer_id_block_znode(1, 1000, 1000)
    assert json.loads(block) == {
        "version": 1,
        "broker": 1,
        "block_start": "1000",
        "block_end": "1999",
    }
    assert layout.next_producer_id(block) == 2000
