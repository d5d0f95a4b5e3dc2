"""Group requests that are wrong get Kafka's error codes, on a connection that stays open.

Raw requests on one socket, so that a closed connection would fail the next exchange. The
tests share one broker (`groups_broker`, started once for the module), each with a group of
its own (`session.group`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import BROKER_READY_TIMEOUT, TEST_CLIENT_ID, create_topic, wait_for

OVERRIDES = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100}
SESSION_MS = 10_000
_groups = itertools.count(1)


class Session:
    """One connection to the broker; every request waits for its answer."""

    def __init__(self, bootstrap: str, group: str = "g") -> None:
        self.client = wire.connect(bootstrap, 30, client_id=TEST_CLIENT_ID, exact=True)
        self.sock = self.client.sock
        self.group = group

    def send(self, api_key: int, version: int, fields: dict):
        return self.client.request(api_key, version, fields)

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="module")
def groups_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker, with topic t of 2 partitions; it must stop cleanly at the end."""
    broker = BrokerProcess.start(
        node_id=1, log_dir=tmp_path_factory.mktemp("groups-bad-input") / "data", overrides=OVERRIDES
    )
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        create_topic(broker.bootstrap, "t", 2)
        yield broker
    finally:
        exit_code = broker.stop() if broker.running else broker.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{broker.log_tail()}"


@pytest.fixture
def session(groups_broker: BrokerProcess):
    """A connection to the module's broker, and a group of this test's own that the broker
    coordinates."""
    broker = groups_broker
    opened = Session(broker.bootstrap, f"g-{next(_groups)}")
    found = opened.send(ApiKey.FIND_COORDINATOR, 2, {"key": opened.group, "key_type": 0})
    assert found.error_code.value == Error.NONE and found.port == broker.port
    metadata = opened.send(
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": "__consumer_offsets", "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    (offsets_topic,) = metadata.topics
    assert offsets_topic.is_internal and len(offsets_topic.partitions) == 50
    yield opened
    opened.close()


def join(session: Session, group: str, member_id: str = "", session_ms: int = SESSION_MS):
    """JoinGroup v3: no member-id round trip, so one call joins."""
    return session.send(
        ApiKey.JOIN_GROUP,
        3,
        {
            "group_id": group,
            "session_timeout": session_ms,
            "rebalance_timeout": 30_000,
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}],
        },
    )


def sync(session: Session, group: str, generation: int, member_id: str, assignments=()):
    return session.send(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
        },
    )


def heartbeat(session: Session, group: str, generation: int, member_id: str):
    return session.send(
        ApiKey.HEARTBEAT,
        3,
        {"group_id": group, "generation_id": generation, "member_id": member_id},
    ).error_code.value


def test_empty_group_id_and_bad_session_timeout(session):
    assert join(session, "").error_code.value == Error.INVALID_GROUP_ID
    assert (
        join(session, session.group, session_ms=10).error_code.value
        == Error.INVALID_SESSION_TIMEOUT
    )
    assert heartbeat(session, "", 1, "m") == Error.INVALID_GROUP_ID


def test_stale_generation_and_unknown_member(session):
    joined = join(session, session.group)
    assert joined.error_code.value == Error.NONE
    member, generation = joined.member_id, joined.generation_id
    assert (
        sync(session, session.group, generation + 5, member).error_code.value
        == Error.ILLEGAL_GENERATION
    )
    assert (
        sync(session, session.group, generation, "stranger").error_code.value
        == Error.UNKNOWN_MEMBER_ID
    )
    assert heartbeat(session, session.group, generation - 1, member) == Error.ILLEGAL_GENERATION
    assert heartbeat(session, session.group, generation, "stranger") == Error.UNKNOWN_MEMBER_ID
    assert heartbeat(session, "nobody-here", 1, "m") == Error.UNKNOWN_MEMBER_ID
    rejoin = join(session, session.group, member_id="stranger")
    assert rejoin.error_code.value == Error.UNKNOWN_MEMBER_ID
    synced = sync(session, session.group, generation, member, [(member, b"mine")])
    assert (synced.error_code.value, synced.assignment) == (Error.NONE, b"mine")
    assert heartbeat(session, session.group, generation, member) == Error.NONE


def test_a_followers_assignments_are_ignored(session):
    leader = join(session, session.group)
    other = Session(f"127.0.0.1:{session.sock.getpeername()[1]}")
    answers = {}
    follower_joins = threading.Thread(
        target=lambda: answers.update(joined=join(other, session.group))
    )
    follower_joins.start()
    # The newcomer's join starts a rebalance; the leader learns it from its heartbeat and rejoins.
    wait_for(
        lambda: (
            heartbeat(session, session.group, leader.generation_id, leader.member_id)
            == Error.REBALANCE_IN_PROGRESS
        ),
        30,
        "the rebalance",
    )
    leader = join(session, session.group, member_id=leader.member_id)
    follower_joins.join(30)
    follower = answers["joined"]
    assert follower.generation_id == leader.generation_id
    assert follower.leader == leader.member_id != follower.member_id
    follower_synced = {}
    follower_syncs = threading.Thread(
        target=lambda: follower_synced.update(
            answer=sync(
                other,
                session.group,
                follower.generation_id,
                follower.member_id,
                [(leader.member_id, b"x")],
            )
        )
    )
    follower_syncs.start()
    assignments = [(leader.member_id, b"for-leader"), (follower.member_id, b"for-follower")]
    assert sync(
        session, session.group, leader.generation_id, leader.member_id, assignments
    ).assignment == (b"for-leader")
    follower_syncs.join(30)
    assert follower_synced["answer"].assignment == b"for-follower"
    other.close()


def test_heartbeats_after_the_session_expired(session):
    joined = join(session, session.group, session_ms=300)
    member, generation = joined.member_id, joined.generation_id
    sync(session, session.group, generation, member, [(member, b"a")])
    wait_for(
        lambda: heartbeat(session, session.group, generation, member) == Error.UNKNOWN_MEMBER_ID,
        30,
        "the session to expire",
        interval=0.5,
    )
    described = session.send(
        ApiKey.DESCRIBE_GROUPS,
        3,
        {"groups": [session.group], "include_authorized_operations": False},
    ).groups[0]
    assert (described.group_state, described.members) == ("Empty", ())


def test_commit_to_a_partition_that_does_not_exist(session):
    answer = session.send(
        ApiKey.OFFSET_COMMIT,
        7,
        {
            "group_id": session.group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": index, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
                for name, index in [("t", 0), ("t", 9), ("no-such-topic", 0)]
            ],
        },
    )
    errors = {
        (topic.name, p.partition_index): p.error_code.value
        for topic in answer.topics
        for p in topic.partitions
    }
    assert errors == {
        ("t", 0): Error.NONE,
        ("t", 9): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # A commit with a generation for a group that does not exist is from a stale member.
    stale = session.send(
        ApiKey.OFFSET_COMMIT,
        7,
        {
            "group_id": "never-joined",
            "generation_id_or_member_epoch": 3,
            "member_id": "m",
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
            ],
        },
    )
    assert stale.topics[0].partitions[0].error_code.value == Error.ILLEGAL_GENERATION


def test_clients_cannot_produce_to_the_offsets_topic(broker_factory):
    from kio.schema.errors import ErrorCode

    from tests.cluster.conftest import produce_raw

    broker = broker_factory(OVERRIDES)
    opened = Session(broker.bootstrap)
    opened.send(ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})  # creates the topic
    opened.close()
    answer = produce_raw(broker, "__consumer_offsets", 0, [b"\xff"], acks=1)
    assert answer.error_code == ErrorCode.invalid_topic_exception


def test_a_commit_while_the_group_completes_its_rebalance(session):
    """OffsetCommit to a classic group in CompletingRebalance: Kafka 4's
    ClassicGroup.validateOffsetCommit checks the member (UNKNOWN_MEMBER_ID) and the
    generation (ILLEGAL_GENERATION) before the state (REBALANCE_IN_PROGRESS). A member that
    commits with the generation it had (librdkafka 0113's manual commit during a cooperative
    rebalance accepts only success or ILLEGAL_GENERATION) learns ILLEGAL_GENERATION. Compared
    with Apache Kafka 4.4's answers in test_answers_as_kafka.py."""

    def commit(generation: int, member_id: str) -> int:
        answer = session.send(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": session.group,
                "generation_id_or_member_epoch": generation,
                "member_id": member_id,
                "topics": [
                    {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7}]}
                ],
            },
        )
        return answer.topics[0].partitions[0].error_code.value

    joined = join(session, session.group)
    member, first = joined.member_id, joined.generation_id
    assert (
        sync(session, session.group, first, member, [(member, b"a")]).error_code.value == Error.NONE
    )
    assert commit(first, member) == Error.NONE
    # The leader rejoins: a new generation, whose assignment is not synced yet.
    rejoined = join(session, session.group, member_id=member)
    assert (rejoined.error_code.value, rejoined.generation_id) == (Error.NONE, first + 1)
    assert commit(first, member) == Error.ILLEGAL_GENERATION
    assert commit(first + 1, "stranger") == Error.UNKNOWN_MEMBER_ID
    assert commit(first, "stranger") == Error.UNKNOWN_MEMBER_ID
    assert commit(first + 1, member) == Error.REBALANCE_IN_PROGRESS
    assert (
        sync(session, session.group, first + 1, member, [(member, b"a")]).error_code.value
        == Error.NONE
    )
    assert commit(first + 1, member) == Error.NONE
