"""Incremental fetch sessions (KIP-227) on a real broker, over raw Fetch requests: a full
fetch with epoch 0 creates a session, incremental fetches carry only what changed and are
answered with only the partitions that have news, a stale epoch or an unknown session id is
refused with Kafka's codes and nothing read, epoch -1 closes the session; the broker's
/metrics count the sessions and their partitions. kafka-python (which uses sessions) and
confluent-kafka (which does not) keep consuming."""

import datetime
import threading

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.fetch.v13.request import FetchPartition as FetchPartitionV13
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.fetch.v13.request import FetchTopic as FetchTopicV13
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData

from minibroker.tools import wire
from minibroker.tools.launcher import free_port
from tests.conftest import TEST_CLIENT_ID, create_topic, scrape

TOPIC = "sessions"
PARTITIONS = 3


@pytest.fixture(scope="module")
def session_broker(tmp_path_factory):
    """One broker for the module (the tests use their own sessions and topics)."""
    from tests.conftest import BROKER_READY_TIMEOUT, BrokerProcess

    port = free_port()
    broker = BrokerProcess.start(
        node_id=1,
        log_dir=tmp_path_factory.mktemp("sessions") / "data",
        overrides={"metrics.port": port},
    )
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        yield broker, port
    finally:
        assert broker.stop() == 0


def produce(client, partition: int, count: int = 3) -> None:
    from tests.unit.batch_factory import make_batch

    response = client.call(
        ProduceRequest(
            acks=1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                TopicProduceData(
                    name=TOPIC,
                    partition_data=(
                        PartitionProduceData(index=partition, records=make_batch(count)),
                    ),
                ),
            ),
        )
    )
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def fetch(
    client,
    offsets: dict[int, int],
    *,
    session_id=0,
    epoch=0,
    forget=(),
    max_wait_ms=0,
    min_bytes=0,
):
    topics = ()
    if offsets:
        partitions = tuple(
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in offsets.items()
        )
        topics = (FetchTopic(topic=TOPIC, partitions=partitions),)
    forgotten = (ForgottenTopic(topic=TOPIC, partitions=tuple(forget)),) if forget else ()
    return client.call(
        FetchRequest(
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=1 << 20,
            session_id=session_id,
            session_epoch=epoch,
            topics=topics,
            forgotten_topics_data=forgotten,
        )
    )


def answered(response) -> dict[int, int]:
    """{partition: bytes of records} of a Fetch response."""
    return {
        p.partition_index: len(p.records or b"")
        for topic in response.responses
        for p in topic.partitions
    }


def test_incremental_fetches_answer_only_changed_partitions(session_broker):
    broker, port = session_broker
    client = wire.connect(broker.bootstrap, 10, client_id=TEST_CLIENT_ID, exact=True)
    try:
        produce(client, 0)
        full = fetch(client, {0: 0, 1: 0, 2: 0}, epoch=0)
        assert full.error_code == ErrorCode.none
        session_id = full.session_id
        assert session_id != 0
        assert set(answered(full)) == {0, 1, 2} and answered(full)[0] > 0
        samples = scrape(port)
        assert samples[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] == 1
        cached = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
        assert samples[(cached, ())] == 3

        # Epoch 1: partition 0's new position; nothing new anywhere: an empty answer.
        nothing = fetch(client, {0: 3}, session_id=session_id, epoch=1)
        assert (nothing.error_code, nothing.session_id) == (ErrorCode.none, session_id)
        assert answered(nothing) == {}

        # Records on partition 1 only: only partition 1 is answered (its HW moved too).
        produce(client, 1)
        changed = fetch(client, {}, session_id=session_id, epoch=2)
        assert answered(changed).keys() == {1} and answered(changed)[1] > 0

        # Bad input: a stale epoch, an unknown session; nothing read, the session intact.
        stale = fetch(client, {}, session_id=session_id, epoch=2)
        assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
        assert (stale.session_id, stale.responses) == (0, ())
        unknown = fetch(client, {0: 0}, session_id=session_id ^ 0x5A5A, epoch=1)
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found
        assert (unknown.session_id, unknown.responses) == (0, ())

        # Epoch 3 is still the session's: forget partition 2, move partition 1 on; a parked
        # fetch (max_wait 10 s) is woken by a produce to partition 2... which it no longer
        # holds, so it waits on; then by one to partition 0, which it answers alone.
        other = wire.connect(broker.bootstrap, 10, client_id=TEST_CLIENT_ID, exact=True)
        result = {}

        def parked():
            result["response"] = fetch(
                client,
                {1: 3},
                session_id=session_id,
                epoch=3,
                forget=[2],
                max_wait_ms=10_000,
                min_bytes=1,
            )

        thread = threading.Thread(target=parked)
        thread.start()
        produce(other, 2)
        produce(other, 0)
        thread.join(15)
        other.close()
        response = result["response"]
        assert response.error_code == ErrorCode.none
        assert answered(response).keys() == {0} and answered(response)[0] > 0
        samples = scrape(port)
        assert samples[(cached, ())] == 2

        # Epoch -1 closes the session: served in full, without a session.
        closing = fetch(client, {0: 0, 1: 0}, session_id=session_id, epoch=-1)
        assert closing.session_id == 0 and set(answered(closing)) == {0, 1}
        samples = scrape(port)
        assert samples[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] == 0
        assert fetch(client, {}, session_id=session_id, epoch=4).error_code == (
            ErrorCode.fetch_session_id_not_found
        )
    finally:
        client.close()


def test_a_session_of_topic_names_refuses_a_request_by_topic_id(session_broker):
    broker, _ = session_broker
    with wire.connect(broker.bootstrap, 10, client_id=TEST_CLIENT_ID, exact=True) as client:
        session_id = fetch(client, {0: 0}, epoch=0).session_id
        assert session_id != 0
        metadata_topic_id = None  # any id: the session check comes before the topics
        response = client.call(
            FetchRequestV13(
                max_wait=datetime.timedelta(0),
                min_bytes=0,
                session_id=session_id,
                session_epoch=1,
                topics=(
                    FetchTopicV13(
                        topic_id=metadata_topic_id or __import__("uuid").UUID(int=1),
                        partitions=(
                            FetchPartitionV13(partition=0, fetch_offset=0, partition_max_bytes=1),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        assert response.error_code == ErrorCode.fetch_session_topic_id_error
        assert (response.session_id, response.responses) == (0, ())


def test_kafka_python_and_confluent_kafka_still_consume(session_broker):
    broker, port = session_broker
    topic_partitions = [KafkaTopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    with wire.connect(broker.bootstrap, 10, client_id=TEST_CLIENT_ID, exact=True) as client:
        ends = {}
        for p in range(PARTITIONS):
            produce(client, p, 5)
        for p in range(PARTITIONS):
            ends[p] = fetch(client, {p: 0}, epoch=-1).responses[0].partitions[0].high_watermark
    total = sum(ends.values())

    sessions = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
    before = scrape(port)[(sessions, ())]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=15000)
    try:
        consumer.assign(topic_partitions)
        consumer.seek_to_beginning()
        seen = 0
        for _ in consumer:
            seen += 1
            if seen == total:
                break
        assert seen == total
        # kafka-python fetches in a session (its FetchSessionHandler).
        assert scrape(port)[(sessions, ())] == before + 1
    finally:
        consumer.close()

    confluent = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "s", "enable.auto.commit": False}
    )
    try:
        confluent.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seen = 0
        while seen < total:
            message = confluent.poll(15)
            assert message is not None, f"confluent-kafka read {seen} of {total}"
            assert message.error() is None
            seen += 1
    finally:
        confluent.close()


def test_fetch_v18_behind_high_watermark_is_answered_without_waiting(session_broker):
    """KIP-1166 (Fetch v18): a fetch whose HighWatermark is behind the leader's is answered at
    once, even with nothing to read and min_bytes 1; one that knows the high watermark waits
    its max_wait as before."""
    import time

    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    from minibroker.protocol.schemas import FetchPartitionV18, FetchRequestV18, FetchTopicV18

    broker, _ = session_broker
    with wire.connect(broker.bootstrap, 40, client_id=TEST_CLIENT_ID, exact=True) as client:
        produce(client, 2)
        metadata = client.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        topic_id = metadata.topics[0].topic_id
        end = fetch(client, {2: 0}, epoch=-1).responses[0].partitions[0].high_watermark

        def fetch_v18(known_high_watermark: int, max_wait_ms: int):
            started = time.monotonic()
            response = client.call(
                FetchRequestV18(
                    max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                    min_bytes=1,
                    topics=(
                        FetchTopicV18(
                            topic_id=topic_id,
                            partitions=(
                                FetchPartitionV18(
                                    partition=2,
                                    fetch_offset=end,
                                    partition_max_bytes=1024,
                                    high_watermark=known_high_watermark,
                                ),
                            ),
                        ),
                    ),
                    forgotten_topics_data=(),
                )
            )
            return response, time.monotonic() - started

        behind, elapsed = fetch_v18(end - 1, 30_000)
        assert elapsed < 15, elapsed
        answer = behind.responses[0].partitions[0]
        assert (answer.error_code, answer.high_watermark) == (ErrorCode.none, end)
        current, elapsed = fetch_v18(end, 300)
        assert elapsed >= 0.3 and current.responses[0].partitions[0].high_watermark == end
