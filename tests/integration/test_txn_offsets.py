"""TxnOffsetCommit against a real broker process, by hand on one connection: the offsets a
transactional producer commits are held pending, invisible to OffsetFetch, and OffsetFetch
with require_stable (v7+) answers UNSTABLE_OFFSET_COMMIT for them, as Kafka does. The
transaction's COMMIT or ABORT marker (WriteTxnMarkers) is another part of the work; its
effect is tested in-process (tests/unit/test_group_coordinator_txn.py).

The tests without ACLs run on the worker's shared broker (tests/conftest.py's SHARED_BROKER,
the pytest plugin's `kafka_broker`), each with a topic, a group and a transactional id of its
own; the ACL test on the module's broker with an authorizer (the `secured` fixture)."""

from __future__ import annotations

import pytest

from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer import acls as model
from minibroker.testing import Cluster
from tests.conftest import SHARED_BROKER, create_topic
from tests.integration.authz import binding, on_cluster
from tests.integration.test_groups_bad_input import OVERRIDES, Session, join, sync

pytestmark = SHARED_BROKER


class TxnSession(Session):
    """A connection, with the group, transactional id and topic its test uses by default."""

    def __init__(self, bootstrap: str, group: str, transactional_id: str, topic: str) -> None:
        super().__init__(bootstrap, group)
        self.transactional_id = transactional_id
        self.topic = topic


def init_producer_id(
    session: TxnSession, transactional_id: str | None = None, group: str | None = None
):
    """A transactional producer's id and epoch, with ``group``'s offsets partition added to
    its transaction (FindCoordinator, InitProducerId, AddOffsetsToTxn), so that the
    coordinator confirms the transaction when TxnOffsetCommit asks it (KIP-890)."""
    transactional_id = transactional_id or session.transactional_id
    group = group or session.group
    found = session.send(ApiKey.FIND_COORDINATOR, 2, {"key": transactional_id, "key_type": 1})
    assert found.error_code.value == Error.NONE
    answer = session.send(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": transactional_id,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert answer.error_code.value == Error.NONE
    producer = int(answer.producer_id), int(answer.producer_epoch)
    added = session.send(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        {
            "transactional_id": transactional_id,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "group_id": group,
        },
    )
    assert added.error_code.value == Error.NONE
    return producer


def txn_offset_commit(
    session: TxnSession, version: int, producer: tuple[int, int], partitions, **fields
) -> dict:
    body = {
        "transactional_id": fields.pop("transactional_id", session.transactional_id),
        "group_id": fields.pop("group_id", session.group),
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": index,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "txn",
                    }
                ],
            }
            for topic, index, offset in partitions
        ],
    }
    if version >= 3:
        body |= {"generation_id": -1, "member_id": "", "group_instance_id": None}
    body |= fields
    answer = session.send(ApiKey.TXN_OFFSET_COMMIT, version, body)
    return {
        (topic.name, p.partition_index): p.error_code.value
        for topic in answer.topics
        for p in topic.partitions
    }


def offset_fetch(
    session: TxnSession, version: int, require_stable: bool, group: str | None = None
) -> dict:
    group = group or session.group
    topics = [{"name": session.topic, "partition_indexes": [0, 1]}]
    if version >= 8:
        answer = session.send(
            ApiKey.OFFSET_FETCH,
            version,
            {"groups": [{"group_id": group, "topics": topics}], "require_stable": require_stable},
        )
        (group,) = answer.groups
    else:
        fields = {"group_id": group, "topics": topics, "require_stable": require_stable}
        group = session.send(ApiKey.OFFSET_FETCH, version, fields)
    assert group.error_code.value == Error.NONE
    return {
        (topic.name, p.partition_index): (p.error_code.value, int(p.committed_offset))
        for topic in group.topics
        for p in topic.partitions
    }


@pytest.fixture
def session(kafka_broker: Cluster, request: pytest.FixtureRequest):
    """A connection to the shared broker, with a group (coordinated), a transactional id and
    a topic of 2 partitions named after the test."""
    name = "txn-offsets-" + request.node.name.removeprefix("test_")[:40]
    bootstrap = kafka_broker.bootstrap_servers
    opened = TxnSession(bootstrap, group=f"{name}-g", transactional_id=f"{name}-tx", topic=name)
    found = opened.send(ApiKey.FIND_COORDINATOR, 2, {"key": opened.group, "key_type": 0})
    assert found.error_code.value == Error.NONE
    create_topic(bootstrap, opened.topic, 2)
    yield opened
    opened.close()


def test_pending_offsets_are_invisible_and_unstable_under_require_stable(session):
    committed = session.send(
        ApiKey.OFFSET_COMMIT,
        7,
        {
            "group_id": session.group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": session.topic,
                    "partitions": [{"partition_index": 0, "committed_offset": 5}],
                }
            ],
        },
    )
    assert committed.topics[0].partitions[0].error_code.value == Error.NONE
    producer = init_producer_id(session)
    errors = txn_offset_commit(
        session,
        3,
        producer,
        [(session.topic, 0, 9), (session.topic, 7, 1), ("no-such-topic", 0, 1)],
    )
    assert errors == {
        (session.topic, 0): Error.NONE,
        (session.topic, 7): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
    }
    for version in (7, 8):
        # Without require_stable: the last committed offset, not the pending one.
        assert offset_fetch(session, version, require_stable=False) == {
            (session.topic, 0): (Error.NONE, 5),
            (session.topic, 1): (Error.NONE, -1),
        }
        assert offset_fetch(session, version, require_stable=True) == {
            (session.topic, 0): (Error.UNSTABLE_OFFSET_COMMIT, -1),
            (session.topic, 1): (Error.NONE, -1),
        }


def test_every_version_is_served(session):
    """One broker, a group and a transactional id per version."""
    for version in range(5):
        group = f"{session.group}-v{version}"
        transactional_id = f"{session.transactional_id}-v{version}"
        producer = init_producer_id(session, transactional_id, group)
        answer = txn_offset_commit(
            session,
            version,
            producer,
            [(session.topic, 1, 3)],
            group_id=group,
            transactional_id=transactional_id,
        )
        assert answer == {(session.topic, 1): Error.NONE}, version
        assert offset_fetch(session, 7, require_stable=True, group=group)[(session.topic, 1)] == (
            Error.UNSTABLE_OFFSET_COMMIT,
            -1,
        )
        assert offset_fetch(session, 7, require_stable=False, group=group)[(session.topic, 1)] == (
            Error.NONE,
            -1,
        )


def test_member_checks_of_v3(session):
    """As Kafka's validateOffsetCommit: generation -1 on an Empty group commits freely;
    naming a member or a generation means being that member of that generation."""
    producer = init_producer_id(session)
    errors = txn_offset_commit(
        session, 3, producer, [(session.topic, 0, 9)], generation_id=4, member_id="ghost"
    )
    assert errors == {(session.topic, 0): Error.UNKNOWN_MEMBER_ID}
    errors = txn_offset_commit(
        session,
        3,
        producer,
        [(session.topic, 0, 9)],
        generation_id=0,
        member_id="ghost",
        group_instance_id="static-1",
    )
    assert errors == {(session.topic, 0): Error.UNKNOWN_MEMBER_ID}
    # Nothing was left pending by the refused commits.
    assert offset_fetch(session, 7, require_stable=True)[(session.topic, 0)] == (Error.NONE, -1)
    joined = join(session, session.group)
    assert joined.error_code.value == Error.NONE
    member, generation = joined.member_id, joined.generation_id
    assert sync(session, session.group, generation, member, [(member, b"a")]).error_code.value == 0
    errors = txn_offset_commit(
        session,
        3,
        producer,
        [(session.topic, 0, 9)],
        generation_id=generation + 1,
        member_id=member,
    )
    assert errors == {(session.topic, 0): Error.ILLEGAL_GENERATION}
    errors = txn_offset_commit(
        session, 3, producer, [(session.topic, 0, 9)], generation_id=generation, member_id=member
    )
    assert errors == {(session.topic, 0): Error.NONE}
    assert offset_fetch(session, 7, require_stable=True)[(session.topic, 0)] == (
        Error.UNSTABLE_OFFSET_COMMIT,
        -1,
    )


def test_authorization(secured):
    allow = model.Operation
    broker = secured(
        [
            on_cluster(allow.CREATE),
            binding("t", allow.ALL),
            binding("u", allow.DESCRIBE),
            binding("g", allow.ALL, resource_type=model.ResourceType.GROUP),
            binding("h", allow.DESCRIBE, resource_type=model.ResourceType.GROUP),
            binding("tx", allow.WRITE, resource_type=model.ResourceType.TRANSACTIONAL_ID),
        ],
        OVERRIDES,
    )
    session = TxnSession(broker.bootstrap, group="g", transactional_id="tx", topic="t")
    try:
        found = session.send(ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})
        assert found.error_code.value == Error.NONE
        create_topic(broker.bootstrap, "t", 1)
        create_topic(broker.bootstrap, "u", 1)
        producer = init_producer_id(session)
        both = [("t", 0, 1), ("u", 0, 1)]
        assert txn_offset_commit(
            session, 3, producer, both, transactional_id="other"
        ) == dict.fromkeys([("t", 0), ("u", 0)], Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert txn_offset_commit(session, 3, producer, both, group_id="h") == dict.fromkeys(
            [("t", 0), ("u", 0)], Error.GROUP_AUTHORIZATION_FAILED
        )
        assert txn_offset_commit(session, 3, producer, both) == {
            ("t", 0): Error.NONE,
            ("u", 0): Error.TOPIC_AUTHORIZATION_FAILED,
        }
    finally:
        session.close()
