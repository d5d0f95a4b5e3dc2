"""The controller's state as ZooKeeper znodes, without ZooKeeper: Kafka's layout and JSON,
the round trip, and the writes one save plans."""

import base64
import copy
import json
import random

import pytest

from minibroker.controller import (
    ControllerState,
    alter_reassignment,
    create_topic,
    delete_topic,
    fence_broker,
    register_broker,
)
from minibroker.controller import zk_layout as layout
from minibroker.controller.scram_credentials import from_record
from minibroker.controller.state import create_partitions
from minibroker.protocol import sasl
from minibroker.security.authorizer.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

ACLS = [
    AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*", 3, 3),
    AclBinding(ResourceType.GROUP, "a/b", PatternType.PREFIXED, "User:bob", "10.0.0.1", 8, 2),
    AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:bob", "*", 10, 3),
    AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:*", "*", 9, 3),
    AclBinding(ResourceType.TRANSACTIONAL_ID, "tx%", PatternType.PREFIXED, "User:c", "*", 2, 3),
    AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:d", "*", 12, 2),
    AclBinding(ResourceType.GROUP, "..", PatternType.LITERAL, "User:e", "*", 3, 3),
]


def _scram_record(password: str, salt: bytes, iterations: int) -> dict:
    salted = sasl.salted_password(sasl.SCRAM_SHA_512, password, salt, iterations)
    credential = sasl.credential_from_salted_password(sasl.SCRAM_SHA_512, salted, salt, iterations)
    encode = lambda value: base64.b64encode(value).decode()  # noqa: E731
    return {
        "salt": encode(credential.salt),
        "stored_key": encode(credential.stored_key),
        "server_key": encode(credential.server_key),
        "iterations": iterations,
    }


def _acl_order(acls: list[AclBinding]) -> list[tuple]:
    return sorted(
        (
            a.resource_type,
            a.resource_name,
            a.pattern_type,
            a.principal,
            a.host,
            a.operation,
            a.permission,
        )
        for a in acls
    )


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
    state.acls = list(ACLS)
    state.scram_credentials = {
        "alice": {
            sasl.SCRAM_SHA_512: _scram_record("alice-secret", b"salt-a", 4096),
            sasl.SCRAM_SHA_256: _scram_record("other", b"salt-b", 8192),
        },
        "bob@example.com/x": {sasl.SCRAM_SHA_512: _scram_record("b", b"\xff\x00", 4096)},
    }
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
    # Kafka keeps ACLs per resource pattern: a load groups them, creation order is not kept.
    assert _acl_order(loaded.acls) == _acl_order(expected.acls)
    assert len(loaded.acls) == len(ACLS)
    loaded.acls = expected.acls
    assert loaded == expected


def test_a_loaded_state_saves_to_the_same_znodes():
    """A new controller's first save after loading rewrites no ACL or credential."""
    znodes = layout.state_znodes(_state())
    loaded = layout.state_from_znodes(znodes, controller_epoch=8)
    assert layout.plan_writes(znodes, layout.state_znodes(loaded, znodes)) == []


def test_acls_are_in_kafkas_znodes_and_json():
    znodes = layout.state_znodes(_state())
    assert json.loads(znodes["/kafka-acl/Topic/a"]) == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Read",
                "host": "*",
            },
            {
                "principal": "User:bob",
                "permissionType": "Allow",
                "operation": "DescribeConfigs",
                "host": "*",
            },
        ],
    }
    assert json.loads(znodes["/kafka-acl/Cluster/kafka-cluster"])["acls"] == [
        {
            "principal": "User:*",
            "permissionType": "Allow",
            "operation": "ClusterAction",
            "host": "*",
        }
    ]
    assert json.loads(znodes["/kafka-acl/Topic/*"])["acls"][0]["operation"] == "IdempotentWrite"
    # A name ZooKeeper cannot hold as one segment is percent-encoded, "%" with it.
    assert json.loads(znodes["/kafka-acl-extended/prefixed/Group/a%2Fb"])["acls"] == [
        {
            "principal": "User:bob",
            "permissionType": "Deny",
            "operation": "Describe",
            "host": "10.0.0.1",
        }
    ]
    assert "/kafka-acl-extended/prefixed/TransactionalId/tx%25" in znodes
    assert "/kafka-acl/Group/%2E%2E" in znodes
    acl_paths = [path for path in znodes if path.startswith("/kafka-acl")]
    assert len(acl_paths) == len(ACLS) - 1  # two bindings share /kafka-acl/Topic/a
    assert all(path.rsplit("/", 1)[0] in layout.PERSISTENT_PATHS for path in acl_paths)


def test_a_kafka_written_acl_znode_loads():
    """Kafka's own JSON (its key order, spaces) as ZkData's example writes it."""
    znodes = layout.state_znodes(ControllerState())
    znodes["/kafka-acl/Topic/topic-1"] = (
        b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Deny",'
        b'"operation": "AlterConfigs","principal": "User:alice"}]}'
    )
    znodes["/kafka-acl-extended/prefixed/Group/group-"] = (
        b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"Allow",'
        b'"operation":"All","host":"*"}]}'
    )
    assert layout.state_from_znodes(znodes, 1).acls == [
        AclBinding(
            ResourceType.TOPIC,
            "topic-1",
            PatternType.LITERAL,
            "User:alice",
            "host1",
            Operation.ALTER_CONFIGS,
            Permission.DENY,
        ),
        AclBinding(
            ResourceType.GROUP,
            "group-",
            PatternType.PREFIXED,
            "User:bob",
            "*",
            Operation.ALL,
            Permission.ALLOW,
        ),
    ]


def test_scram_credentials_are_in_kafkas_user_config():
    state = _state()
    znodes = layout.state_znodes(state)
    alice = json.loads(znodes["/config/users/alice"])
    record = state.scram_credentials["alice"][sasl.SCRAM_SHA_512]
    assert alice == {
        "version": 1,
        "config": {
            "SCRAM-SHA-512": f"salt={record['salt']},stored_key={record['stored_key']},"
            f"server_key={record['server_key']},iterations=4096",
            "SCRAM-SHA-256": layout.scram_credential_string(
                state.scram_credentials["alice"][sasl.SCRAM_SHA_256]
            ),
        },
    }
    assert alice["config"]["SCRAM-SHA-256"].endswith(",iterations=8192")
    # Kafka's Sanitizer: the user name URL-encoded.
    assert "/config/users/bob%40example.com%2Fx" in znodes
    # The stored key is what a SCRAM login checks: it survives the trip.
    loaded = layout.state_from_znodes(znodes, 8).scram_credentials["alice"][sasl.SCRAM_SHA_512]
    salted = sasl.salted_password(sasl.SCRAM_SHA_512, "alice-secret", b"salt-a", 4096)
    expected = sasl.credential_from_salted_password(sasl.SCRAM_SHA_512, salted, b"salt-a", 4096)
    assert from_record(loaded) == expected


def test_a_kafka_written_user_config_loads_its_scram_credentials_only():
    """Kafka's own /config/users znode may also hold quotas: credentials are read as
    credentials (the quotas as quotas, see test_quota_rules.py)."""
    salt, stored, server = (base64.b64encode(bytes([n]) * 20).decode() for n in (1, 2, 3))
    znodes = layout.state_znodes(ControllerState())
    znodes["/config/users/carol"] = json.dumps(
        {
            "version": 1,
            "config": {
                "SCRAM-SHA-256": f"salt={salt},stored_key={stored},server_key={server},"
                "iterations=4096",
                "producer_byte_rate": "1024",
            },
        }
    ).encode()
    znodes["/config/users/quota-only"] = b'{"version":1,"config":{"consumer_byte_rate":"1"}}'
    assert layout.state_from_znodes(znodes, 1).scram_credentials == {
        "carol": {
            sasl.SCRAM_SHA_256: {
                "salt": salt,
                "stored_key": stored,
                "server_key": server,
                "iterations": 4096,
            }
        }
    }


@pytest.mark.parametrize(
    "credential",
    [
        "salt=AAAA,stored_key=AAAA,server_key=AAAA",
        "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096,extra=1",
        "salt=!!!!,stored_key=AAAA,server_key=AAAA,iterations=4096",
        "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=many",
    ],
)
def test_an_unreadable_scram_credential_refuses_to_load(credential: str):
    znodes = layout.state_znodes(ControllerState())
    znodes["/config/users/dave"] = json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-512": credential}}
    ).encode()
    with pytest.raises(ValueError, match="not readable"):
        layout.state_from_znodes(znodes, 1)


def test_an_unknown_acl_name_refuses_to_load():
    znodes = layout.state_znodes(_state())
    znodes["/kafka-acl/Topic/a"] = znodes["/kafka-acl/Topic/a"].replace(b"Read", b"Reed")
    with pytest.raises(ValueError, match="not readable"):
        layout.state_from_znodes(znodes, 8)


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


def test_saves_that_encode_only_what_changed_write_what_a_whole_encoding_writes():
    """zk_layout.EncodedTopics (a save encodes only the partitions replaced since the last
    one) gives the same znodes as encoding everything, through a load, ISR changes, new
    partitions, a reassignment, a topic deleted and one made again under the same name."""
    state = _state()
    encoded = layout.EncodedTopics()
    saved = layout.state_znodes(state, None, encoded)
    assert saved == layout.state_znodes(state)
    state = layout.state_from_znodes(saved, controller_epoch=8, encoded=encoded)

    def step() -> None:
        nonlocal saved
        whole = layout.state_znodes(state, saved)
        assert layout.state_znodes(state, saved, encoded) == whole
        saved = whole

    step()  # nothing changed since the load: the loaded bytes again
    register_broker(state, 2, "localhost", 9002, "incarnation-2b", 5678)
    step()
    create_partitions(state, "b.c", 3, None, rng=random.Random(4))
    step()
    alter_reassignment(state, "b.c", 2, [1, 2])
    step()
    alter_reassignment(state, "a", 0, None)  # _state's reassignment in progress, cancelled
    fence_broker(state, 3, unclean=False)
    step()
    delete_topic(state, "a")
    step()
    create_topic(state, "a", 2, 1, {}, rng=random.Random(9))
    step()
    assert set(saved) >= {"/brokers/topics/a/partitions/1/state", "/brokers/topics/b.c"}
