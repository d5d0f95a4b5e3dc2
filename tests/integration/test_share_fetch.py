"""ShareFetch and ShareAcknowledge (KIP-932's data path) against a real broker process.

Records produced with confluent-kafka; three share group "members", each on its own
connection, send ShareFetch and ShareAcknowledge v1 (the version librdkafka 2.16 sends) and
v2 with the project's own protocol codec, as a share consumer would once it has joined the
group (ShareGroupHeartbeat is another piece of issue 35: until it is served, every member id
is accepted). The broker runs with a short acquisition lock (group.share.record.lock
.duration.ms) so that an expiring lock is seen within a parked fetch's wait: Kafka reads
group.share.min.record.lock.duration.ms (15 s by default) only at start, and a group's own
share.record.lock.duration.ms may not go below it, so this broker is the module's (the pytest
plugin's `kafka_broker`, module-scoped), not the shared one. Each test uses a topic and a
group of its own.
"""

from __future__ import annotations

import collections
import datetime
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.share_fetch.v0.request import AcknowledgementBatch
from kio.static.primitive import i8, i32, i32Timedelta, i64

from minibroker.protocol import share_group_offsets_schemas as offsets_schemas
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.protocol.share_fetch_v1 import (
    FetchPartitionV1,
    FetchTopicV1,
    ShareAcknowledgeRequestV1,
    ShareFetchRequestV1,
    ShareFetchRequestV2,
)
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from minibroker.tools import wire
from tests.conftest import (
    coordinator_ready,
    create_topic,
    exchange,
    set_group_configs,
    topic_id,
    wait_for,
)

from kio.schema.share_acknowledge.v0.request import (  # isort: skip
    AcknowledgePartition,
    AcknowledgeTopic,
)
from kio.schema.share_acknowledge.v0.request import AcknowledgementBatch as AckBatch  # isort: skip

LOCK_MS = 3000
RECORDS = 600
ACCEPT, RELEASE, RENEW = 1, 2, 4


# One broker for the module, on a short acquisition lock; the plugin fails the test that
# closes it if it does not shut down cleanly.
pytestmark = pytest.mark.minibroker(
    scope="module",
    server_properties={
        "group.share.min.record.lock.duration.ms": 1000,
        "group.share.record.lock.duration.ms": LOCK_MS,
    },
)


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The plugin's broker, under the name the tests take."""
    return kafka_broker


def produce(bootstrap: str, topic: str, count: int, per_batch: int = 10) -> None:
    """``count`` records in batches of ``per_batch`` (a flush after each): a batch-optimized
    acquisition takes whole batches, so small ones spread the records over the members."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for number in range(count):
        producer.produce(topic, value=str(number).encode())
        if (number + 1) % per_batch == 0:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0


def batch_offsets(records: bytes) -> list[tuple[int, int]]:
    """(first, last) offset of each stored batch in a response's records."""
    found, position = [], 0
    while position + HEADER_SIZE <= len(records):
        header = read_header(memoryview(records), position)
        found.append((header.base_offset, header.last_offset))
        position += header.size
    assert position == len(records), "whole batches only"
    return found


class Member:
    """A share consumer's requests, on its own connection, with its share session epoch."""

    def __init__(self, bootstrap: str, group: str, topic: uuid.UUID, name: str) -> None:
        self.client = wire.connect(bootstrap, 60.0, exact=True)
        self.group, self.topic, self.member_id = group, topic, f"{name}-{uuid.uuid4()}"
        self.epoch = 0

    def close(self) -> None:
        self.client.close()

    def fetch(self, acks=(), *, max_wait_ms=0, max_records=100, version=1, **extra):
        batches = tuple(
            AcknowledgementBatch(
                first_offset=i64(first), last_offset=i64(last), acknowledge_types=(i8(kind),)
            )
            for first, last, kind in acks
        )
        cls = ShareFetchRequestV1 if version == 1 else ShareFetchRequestV2
        request = cls(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=i32(self.epoch),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(1 << 20),
            max_records=i32(max_records),
            batch_size=i32(max_records),
            topics=(
                FetchTopicV1(
                    topic_id=self.topic,
                    partitions=(
                        FetchPartitionV1(partition_index=i32(0), acknowledgement_batches=batches),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            **extra,
        )
        response = self.client.call(request)
        if response.error_code == 0:
            self.epoch += 1
        return response

    def acknowledge(self, acks, *, epoch: int | None = None):
        request = ShareAcknowledgeRequestV1(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=i32(self.epoch if epoch is None else epoch),
            topics=(
                AcknowledgeTopic(
                    topic_id=self.topic,
                    partitions=(
                        AcknowledgePartition(
                            partition_index=i32(0),
                            acknowledgement_batches=tuple(
                                AckBatch(
                                    first_offset=i64(first),
                                    last_offset=i64(last),
                                    acknowledge_types=(i8(kind),),
                                )
                                for first, last, kind in acks
                            ),
                        ),
                    ),
                ),
            ),
        )
        response = self.client.call(request)
        if response.error_code == 0 and epoch is None:
            self.epoch += 1
        return response


def start_offset(bootstrap: str, group: str, topic: str) -> int:
    """The group's start offset of ``topic``-0 (DescribeShareGroupOffsets v1, on the wire)."""
    request = offsets_schemas.DescribeShareGroupOffsetsRequestV1(
        groups=(
            offsets_schemas.DescribeRequestGroupV1(
                group_id=group,
                topics=(
                    offsets_schemas.DescribeRequestTopicV1(topic_name=topic, partitions=(i32(0),)),
                ),
            ),
        )
    )
    (described,) = exchange(bootstrap, request).groups
    assert described.error_code == 0, described
    return described.topics[0].partitions[0].start_offset


def partition_of(response):
    """The one partition's answer (or None), checking that the records hold what was
    acquired, as whole stored batches."""
    assert response.error_code == 0, response
    parts = [p for t in response.responses for p in t.partitions]
    if not parts:
        return None
    (part,) = parts
    if part.acquired_records:
        batches = batch_offsets(bytes(part.records))
        for acquired in part.acquired_records:
            for offset in range(acquired.first_offset, acquired.last_offset + 1):
                assert any(first <= offset <= last for first, last in batches), offset
    return part


def ranges(part) -> list[tuple[int, int, int]]:
    if part is None:
        return []
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]


def test_share_fetch_and_acknowledge_are_advertised(broker: Cluster):
    with wire.connect(broker.bootstrap_servers, 10.0) as client:
        versions = client.api_versions()
    assert versions[ApiKey.SHARE_FETCH] == (1, 2)
    assert versions[ApiKey.SHARE_ACKNOWLEDGE] == (1, 2)


def test_three_members_accept_every_record_exactly_once(broker: Cluster):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "share-q", 1)
    tid = topic_id(bootstrap, "share-q")
    members = [Member(bootstrap, "workers", tid, f"m{n}") for n in range(3)]
    try:
        # Opening the sessions creates the share partition at the latest offset (0).
        for member in members:
            opened = partition_of(member.fetch())
            # The full session's answer names its partition, with nothing acquired yet.
            assert opened is not None and opened.error_code == 0 and ranges(opened) == []
        produce(bootstrap, "share-q", RECORDS)
        accepted: collections.Counter[int] = collections.Counter()
        pending: dict[int, list[tuple[int, int, int]]] = {n: [] for n in range(3)}
        by_member = collections.Counter()
        rounds = 0
        while sum(accepted.values()) < RECORDS:
            rounds += 1
            assert rounds < 200, f"only {sum(accepted.values())} accepted"
            for n, member in enumerate(members):
                acks = [(first, last, ACCEPT) for first, last, _ in pending[n]]
                part = partition_of(member.fetch(acks, max_wait_ms=200, max_records=50))
                if acks:
                    assert part is not None and part.acknowledge_error_code == 0, part
                    for first, last, _ in pending[n]:
                        accepted.update(range(first, last + 1))
                        by_member[n] += last - first + 1
                pending[n] = ranges(part)
                assert all(count == 1 for _, _, count in pending[n])
        assert sorted(accepted) == list(range(RECORDS))
        assert set(accepted.values()) == {1}
        assert all(by_member[n] > 0 for n in range(3)), by_member
        # Acknowledging again what is accepted is refused, and changes nothing.
        answer = members[0].acknowledge([(0, 0, ACCEPT)])
        assert answer.responses[0].partitions[0].error_code == Error.INVALID_RECORD_STATE
    finally:
        for member in members:
            member.close()


def test_a_released_record_is_delivered_again_and_an_expired_lock_too(broker: Cluster):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "share-redeliver", 1)
    tid = topic_id(bootstrap, "share-redeliver")
    first, second = (Member(bootstrap, "redeliver", tid, n) for n in ("a", "b"))
    try:
        partition_of(first.fetch())
        partition_of(second.fetch())
        produce(bootstrap, "share-redeliver", 10)
        # v2 with the record_limit acquire mode (KIP-1206): exactly 4 records.
        got = ranges(
            partition_of(
                first.fetch(max_wait_ms=5000, max_records=4, version=2, share_acquire_mode=i8(1))
            )
        )
        assert got == [(0, 3, 1)]
        released = first.acknowledge([(0, 3, RELEASE)])
        assert released.responses[0].partitions[0].error_code == 0
        again = ranges(partition_of(second.fetch(max_records=100)))
        assert again[0] == (0, 3, 2)  # delivered a second time
        assert again[1:] == [(4, 9, 1)]
        # `second` holds 0-9 and does not acknowledge: `first` parks until the locks expire.
        expired = ranges(partition_of(first.fetch(max_wait_ms=4 * LOCK_MS, max_records=100)))
        assert expired == [(0, 3, 3), (4, 9, 2)]
        # The old holder's acknowledgement after its lock expired is refused.
        late = second.acknowledge([(0, 9, ACCEPT)])
        assert late.responses[0].partitions[0].error_code == Error.INVALID_RECORD_STATE
        assert first.acknowledge([(0, 9, ACCEPT)]).responses[0].partitions[0].error_code == 0
    finally:
        first.close()
        second.close()


def test_a_groups_lock_duration_is_bounded_by_the_brokers_minimum(broker: Cluster):
    """Kafka's GroupConfig.validateValues checks a group's share.record.lock.duration.ms
    against the broker's group.share.min.record.lock.duration.ms and
    group.share.max.record.lock.duration.ms, not against their defaults: this broker's
    minimum is 1000, so 5000 (what confluent-kafka-python's
    test_redelivery_increments_delivery_count_and_commits sets on a broker started so) is
    taken and 60001 is INVALID_CONFIG with Kafka's message; a group's share session timeout
    still has the default bounds. (Before, every broker checked 15000 to 60000.)"""
    bootstrap = broker.bootstrap_servers
    set_group_configs(bootstrap, "lock-bounds", {"share.record.lock.duration.ms": "5000"})
    with pytest.raises(KafkaException) as refused:
        set_group_configs(bootstrap, "lock-bounds", {"share.record.lock.duration.ms": "60001"})
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert error.str() == (
        "share.record.lock.duration.ms must be in the range 1000 to 60000 inclusive."
    )
    with pytest.raises(KafkaException) as too_short:
        set_group_configs(bootstrap, "lock-bounds", {"share.session.timeout.ms": "40000"})
    assert too_short.value.args[0].str() == (
        "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."
    )


def test_session_errors_are_answered_with_kafkas_codes(broker: Cluster):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "share-sessions", 1)
    tid = topic_id(bootstrap, "share-sessions")
    member = Member(bootstrap, "sessions", tid, "s")
    try:
        member.epoch = 3
        assert member.fetch().error_code == Error.SHARE_SESSION_NOT_FOUND
        member.epoch = 0
        assert member.fetch().error_code == 0
        member.epoch = 7
        assert member.fetch().error_code == Error.INVALID_SHARE_SESSION_EPOCH
        assert member.acknowledge([(0, 0, ACCEPT)], epoch=0).error_code == (
            Error.INVALID_SHARE_SESSION_EPOCH
        )
        member.epoch = 1
        # Acknowledging what this member never acquired.
        answer = member.fetch([(0, 0, ACCEPT)])
        assert answer.responses[0].partitions[0].acknowledge_error_code == (
            Error.INVALID_RECORD_STATE
        )
        # An unknown topic id, then closing the session (-1): it is gone.
        stranger = Member(bootstrap, "sessions", uuid.uuid4(), "x")
        unknown = stranger.fetch()
        assert unknown.responses[0].partitions[0].error_code == Error.UNKNOWN_TOPIC_ID
        stranger.close()
        assert member.acknowledge([], epoch=-1).error_code == 0
        assert member.acknowledge([], epoch=-1).error_code == Error.SHARE_SESSION_NOT_FOUND
    finally:
        member.close()


def test_malformed_acknowledgements_are_invalid_request(broker: Cluster):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "share-bad-acks", 1)
    member = Member(bootstrap, "bad-acks", topic_id(bootstrap, "share-bad-acks"), "b")
    try:
        partition_of(member.fetch())
        produce(bootstrap, "share-bad-acks", 3, per_batch=3)
        assert ranges(partition_of(member.fetch(max_wait_ms=5000))) == [(0, 2, 1)]
        for acks in ([(2, 0, ACCEPT)], [(0, 2, 9)]):  # first > last; no such type
            answer = member.acknowledge(acks)
            assert answer.responses[0].partitions[0].error_code == Error.INVALID_REQUEST
        # Nothing changed, and the member still holds and accepts its records.
        assert member.acknowledge([(0, 2, ACCEPT)]).responses[0].partitions[0].error_code == 0
    finally:
        member.close()


def test_share_fetch_needs_read_on_the_group_and_the_topic(secured):
    from minibroker.security.authorizer.acls import Operation, ResourceType
    from tests.integration.authz import binding, on_cluster

    read = Operation.READ
    broker = secured(
        [
            on_cluster(Operation.CREATE),
            binding("shared", read),
            binding("shared", Operation.DESCRIBE),
            binding("shared", Operation.WRITE),
            binding("private", Operation.DESCRIBE),
            binding("workers", read, resource_type=ResourceType.GROUP),
        ]
    )
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "shared", 1)
    create_topic(bootstrap, "private", 1)
    shared, private = topic_id(bootstrap, "shared"), topic_id(bootstrap, "private")
    refused_group = Member(bootstrap, "others", shared, "r")
    allowed = Member(bootstrap, "workers", private, "a")
    try:
        assert refused_group.fetch().error_code == Error.GROUP_AUTHORIZATION_FAILED
        answer = allowed.fetch()
        assert answer.error_code == 0
        assert answer.responses[0].partitions[0].error_code == Error.TOPIC_AUTHORIZATION_FAILED
        # The session now holds both: the shared topic is served, the private one refused.
        allowed.topic = shared
        answer = allowed.fetch()
        assert answer.error_code == 0
        errors = {t.topic_id: [p.error_code for p in t.partitions] for t in answer.responses}
        assert errors == {private: [Error.TOPIC_AUTHORIZATION_FAILED]}
        produce(bootstrap, "shared", 1, per_batch=1)
        answer = allowed.fetch(max_wait_ms=10_000)
        served = {t.topic_id: [ranges(p) for p in t.partitions] for t in answer.responses}
        assert served[shared] == [[(0, 0, 1)]]
    finally:
        refused_group.close()
        allowed.close()


def test_a_groups_share_configs_apply_to_records_in_flight(broker: Cluster):
    """Kafka 4.4 reads a group's share.record.lock.duration.ms, share.delivery.count.limit
    and share.renew.acknowledge.enable at each use, so a change applies to a share partition
    that already exists: the answers' AcquisitionLockTimeoutMs is the group's (KafkaApis'
    recordLockDurationMsOrDefault), RENEW is refused once disabled (INVALID_RECORD_STATE),
    and records acquired after the change are locked for the group's 1.5 s and archived at
    its limit of 2 deliveries when that lock expires: the start offset passes them. (Before,
    a share partition kept the configs of its creation: 3 s locks and 5 deliveries; the lock's
    timing is checked under MockClock in tests/unit/test_share_partition_manager.py.)"""
    bootstrap = broker.bootstrap_servers
    topic, group = "share-live-configs", "live-configs"
    create_topic(bootstrap, topic, 1)
    tid = topic_id(bootstrap, topic)
    member = Member(bootstrap, group, tid, "a")
    try:
        assert member.fetch().acquisition_lock_timeout == datetime.timedelta(milliseconds=LOCK_MS)
        produce(bootstrap, topic, 10, per_batch=10)
        assert ranges(partition_of(member.fetch(max_wait_ms=5000))) == [(0, 9, 1)]
        set_group_configs(
            bootstrap,
            group,
            {
                "share.record.lock.duration.ms": "1500",
                "share.delivery.count.limit": "2",
                "share.renew.acknowledge.enable": "false",
            },
        )
        renewed = member.acknowledge([(0, 9, RENEW)])
        assert renewed.responses[0].partitions[0].error_code == Error.INVALID_RECORD_STATE
        released = member.acknowledge([(0, 9, RELEASE)])
        assert released.responses[0].partitions[0].error_code == 0
        again = member.fetch(max_wait_ms=5000)
        assert again.acquisition_lock_timeout == datetime.timedelta(milliseconds=1500)
        assert ranges(partition_of(again)) == [(0, 9, 2)]
        # DescribeShareGroupOffsets needs the group's coordinator (its member checks then
        # apply: no fetch of this member after this).
        coordinator_ready(bootstrap, group)
        wait_for(lambda: start_offset(bootstrap, group, topic) == 10, 15, "records archived")
    finally:
        member.close()
