"""Client quotas on one broker, with real clients: a producer and a consumer held to their
byte-rate quota, told so by throttle_time_ms (librdkafka's throttle events), while clients
without a quota on the same broker keep their rate; DescribeClientQuotas and
AlterClientQuotas with Kafka's answers to bad input; quotas kept across a restart of the
controller. (ZooKeeper mode, where the elected controller pushes to the other brokers:
tests/cluster/test_zookeeper.py.)

confluent-kafka 2.16 and kafka-python 3.0 have no client-quota calls in their admin clients,
so the quota APIs are driven with the wire client and with kafka-python's own messages here,
and with Kafka's own kafka-configs in tests/java/test_tools.py.

The broker measures rates over ``quota.window.num=2`` windows of one second: Kafka's default
of 11 lets a new client send ten seconds' worth of its quota at once before the first
throttle, which a 10-second test could not tell from no quota at all.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, ShareConsumer, TopicPartition
from kafka import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData

from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import (
    BROKER_READY_TIMEOUT,
    TEST_CLIENT_ID,
    create_topic,
    exchange,
    scrape,
    set_group_configs,
    wait_for,
)
from tests.unit.batch_factory import make_batch

QUOTA = 1_000_000  # bytes per second
# Rates are measured after a warm-up: a new client's first window is measured against the
# whole window (Kafka's Rate), so its first second may carry up to twice the quota, and when
# its first window completes the measured window shrinks from two seconds to one, which
# throttles it for about a second (Kafka's Rate.windowSize does the same).
WARM_UP_SECONDS = 3.0
PRODUCE_SECONDS = 7.0
CONSUME_SECONDS = 5.0
VALUE = b"q" * 1000
# A gap over this in a client's records, with no throttle time to explain it, is the machine's.
STALL_SECONDS = 0.5
SPARED_TOPIC = "quota-spared"
SPARED_PARTITIONS = 4
BURST = b"s" * 900_000  # 4 x 900 kB: over three times the quota's bytes in one request


METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    log_dir = Path(tmp_path_factory.mktemp("quotas")) / "data"
    broker = BrokerProcess.start(
        node_id=1, log_dir=log_dir, overrides={"quota.window.num": 2, "metrics.port": METRICS_PORT}
    )
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        yield broker
    finally:
        assert broker.stop() == 0, broker.log_tail()


def alter(bootstrap: str, entries: list[dict], validate_only: bool = False):
    request = codec.build(
        codec.request_class(ApiKey.ALTER_CLIENT_QUOTAS, 1),
        {"entries": entries, "validate_only": validate_only},
    )
    return exchange(bootstrap, request)


def describe(bootstrap: str, components: list[dict], strict: bool = False):
    request = codec.build(
        codec.request_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1),
        {"components": components, "strict": strict},
    )
    return exchange(bootstrap, request)


def entity(**names: str | None) -> list[dict]:
    return [
        {"entity_type": kind.replace("_", "-"), "entity_name": name} for kind, name in names.items()
    ]


def setting(key: str, value: float) -> dict:
    return {"key": key, "value": value, "remove": False}


def described(response) -> dict:
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


@dataclasses.dataclass
class Measured:
    """One client's run: what it was given after the warm-up and what the broker told it."""

    started: float  # monotonic; the warm-up ends at measured_from
    measured_from: float
    ended: float
    received: list[tuple[float, int]]  # (when, value bytes) of each record acked or read
    throttles: list[tuple[float, float]]  # (when, seconds) of each throttled response

    @property
    def rate(self) -> float:
        """Value bytes per second after the warm-up."""
        counted = sum(size for at, size in self.received if at >= self.measured_from)
        return counted / (self.ended - self.measured_from)

    @property
    def throttled(self) -> int:
        return sum(1 for _, seconds in self.throttles if seconds > 0)

    def muted(self) -> list[tuple[float, float]]:
        """The intervals after the warm-up that the broker's throttle times cover: a throttled
        response mutes the client from when it was handed over; overlapping ones (several
        responses in flight) are merged."""
        intervals: list[tuple[float, float]] = []
        for at, seconds in sorted(self.throttles):
            begin, finish = max(at, self.measured_from), min(at + seconds, self.ended)
            if finish <= begin:
                continue
            if intervals and begin <= intervals[-1][1]:
                intervals[-1] = (intervals[-1][0], max(intervals[-1][1], finish))
            else:
                intervals.append((begin, finish))
        return intervals

    def stalled_seconds(self) -> float:
        """The time after the warm-up in which the client got nothing while no throttle time
        held it back, counted where that lasted over STALL_SECONDS: a backlogged client that
        the broker does not mute gets records all the time, unless the machine runs neither
        it nor the broker."""
        times = [self.measured_from]
        times += [at for at, _ in self.received if self.measured_from < at < self.ended]
        times.append(self.ended)
        muted = self.muted()
        stalled = 0.0
        for begin, finish in zip(times, times[1:], strict=False):
            if finish - begin <= STALL_SECONDS:
                continue
            covered = sum(max(0.0, min(finish, b) - max(begin, a)) for a, b in muted)
            if finish - begin - covered > STALL_SECONDS:
                stalled += finish - begin - covered
        return stalled


def assert_held_to_quota(run: Measured, quota: int, low: float) -> None:
    """The quota holds: never more than 10% above it over the measured time. And the broker
    does not hold the client below it: at least ``low`` of it over the time the client was
    not stalled.

    The lower bound is judged without the stalls (see Measured.stalled_seconds), which a
    loaded machine causes (a client or broker not run for seconds: load averages of 19 have
    been seen on the 2-core CI) and which the broker's window makes up for only up to its
    length. A broker that throttles too much does not hide there: it mutes the client by
    throttle times, and muted time is not a stall. What this cannot tell from a stall is a
    broker that holds a client back without a throttle time to say so. The upper bound keeps
    the whole time, stalls included.
    """
    elapsed = run.ended - run.measured_from
    rate = run.rate
    assert rate <= 1.1 * quota, f"{rate:.0f} B/s against a quota of {quota}"
    stalled = run.stalled_seconds()
    active_rate = rate * elapsed / max(elapsed - stalled, 0.001)
    print(f"{rate:.0f} B/s; {active_rate:.0f} B/s without {stalled:.1f} s of stalls")
    assert active_rate >= low * quota, (
        f"{active_rate:.0f} B/s against a quota of {quota} "
        f"({rate:.0f} B/s over {elapsed:.1f} s, {stalled:.1f} s of it stalled)"
    )


def produce_for(
    bootstrap: str, client_id: str, topic: str, seconds: float, warm_up: float = WARM_UP_SECONDS
) -> Measured:
    """Produce as fast as the client is let for the warm-up and ``seconds`` more."""
    throttles: list[tuple[float, float]] = []
    received: list[tuple[float, int]] = []
    started = time.monotonic()
    measured_from = started + warm_up

    def delivered(error, message) -> None:
        if error is None:
            received.append((time.monotonic(), len(message.value())))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "batch.size": 16384,
            "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append((time.monotonic(), event.throttle_time)),
        }
    )
    while time.monotonic() - measured_from < seconds:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    ended = time.monotonic()
    producer.purge()
    producer.flush(10)
    return Measured(started, measured_from, ended, received, throttles)


def produce_burst_throttle_ms(bootstrap: str, client_id: str) -> int:
    """One Produce of SPARED_PARTITIONS batches of 900 kB, as ``client_id``; the throttle time
    it is answered with. Its bytes are over three times the quota's, and the broker measures
    a rate over at most three seconds (two windows and the one in progress), so a client the
    quota applies to is throttled by this request alone, however slow the machine."""
    request = ProduceRequest(
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name=SPARED_TOPIC,
                partition_data=tuple(
                    PartitionProduceData(index=partition, records=make_batch([(None, BURST)]))
                    for partition in range(SPARED_PARTITIONS)
                ),
            ),
        ),
    )
    response = exchange(bootstrap, request, timeout=30.0, client_id=client_id)
    errors = [part.error_code for reply in response.responses for part in reply.partition_responses]
    assert errors == [Error.NONE] * SPARED_PARTITIONS, response
    return int(response.throttle_time.total_seconds() * 1000)


def fetch_burst(bootstrap: str, client_id: str, topic: str) -> tuple[int, int]:
    """One Fetch of up to 4 MB from offset 0, as ``client_id``: the throttle time it is
    answered with, and the bytes of records (see produce_burst_throttle_ms: 3.5 MB or more is
    over three times the quota's bytes)."""
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=4 << 20,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=4 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    response = exchange(bootstrap, request, timeout=30.0, client_id=client_id)
    (answered,) = [part for reply in response.responses for part in reply.partitions]
    assert answered.error_code == Error.NONE, answered
    return int(response.throttle_time.total_seconds() * 1000), len(answered.records or b"")


def test_produce_quota_holds_a_producer_to_its_rate_and_spares_others(quota_broker):
    bootstrap = quota_broker.bootstrap
    create_topic(bootstrap, "quota-produce", 1)
    answer = alter(
        bootstrap,
        [{"entity": entity(client_id="slow"), "ops": [setting("producer_byte_rate", QUOTA)]}],
    )
    assert [entry.error_code for entry in answer.entries] == [Error.NONE]
    slow = produce_for(bootstrap, "slow", "quota-produce", PRODUCE_SECONDS)
    # Kafka's metrics per quota entity, while its rate is still in the window.
    samples = scrape(METRICS_PORT)
    labels = (("client_id", "slow"), ("user", ""))
    assert samples[("kafka_server_produce_byte_rate", labels)] > 0
    assert samples[("kafka_server_produce_throttle_time", labels)] > 0
    assert samples[("kafka_server_produce_quota_byte_rate", labels)] == QUOTA
    fast = produce_for(bootstrap, "fast", "quota-produce", 1.5, warm_up=0)
    print(f"throttled: {slow.rate:.0f} B/s, without a quota: {fast.rate:.0f} B/s")
    assert_held_to_quota(slow, QUOTA, low=0.9)
    assert slow.throttled > 0
    assert fast.throttled == 0
    # The client without a quota is spared, which its rate cannot show on a loaded machine
    # (one slow enough stays under the quota whether or not it applies): the same request,
    # far over the quota, is throttled for a client the quota applies to and not for it.
    create_topic(bootstrap, SPARED_TOPIC, SPARED_PARTITIONS)
    assert produce_burst_throttle_ms(bootstrap, "slow") > 0
    assert produce_burst_throttle_ms(bootstrap, "fast") == 0


def test_fetch_quota_holds_a_consumer_to_its_rate(quota_broker):
    bootstrap = quota_broker.bootstrap
    topic = "quota-fetch"
    create_topic(bootstrap, topic, 1)
    # Enough for the warm-up and the measured seconds at the quota (a consumer that runs out of
    # records falls short of it), in small batches: a fetch returns at least one whole batch,
    # whatever its size limit.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "loader",
            "linger.ms": 20,
            "batch.size": 16384,
        }
    )
    for _ in range(10_000):
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(30) == 0
    del producer
    answer = alter(
        bootstrap,
        [
            {
                "entity": entity(client_id="slow-reader"),
                "ops": [setting("consumer_byte_rate", QUOTA)],
            }
        ],
    )
    assert [entry.error_code for entry in answer.entries] == [Error.NONE]

    def consume_for(client_id: str, seconds: float, warm_up: float) -> Measured:
        throttles: list[tuple[float, float]] = []
        received: list[tuple[float, int]] = []
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "group.id": client_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.max.bytes": 16384,
                "max.partition.fetch.bytes": 16384,
                "message.max.bytes": 16384,
                "throttle_cb": lambda event: throttles.append(
                    (time.monotonic(), event.throttle_time)
                ),
            }
        )
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        started = measured_from = None
        try:
            while measured_from is None or time.monotonic() - measured_from < seconds:
                message = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                received.append((time.monotonic(), len(message.value())))
                if measured_from is None:
                    started = time.monotonic()
                    measured_from = started + warm_up
            return Measured(started, measured_from, time.monotonic(), received, throttles)
        finally:
            consumer.close()

    slow = consume_for("slow-reader", CONSUME_SECONDS, WARM_UP_SECONDS)
    fast = consume_for("fast-reader", 1.0, warm_up=0)
    print(f"throttled: {slow.rate:.0f} B/s, without a quota: {fast.rate:.0f} B/s")
    # Below, up to one muted second in the five measured has been seen on this loaded machine
    # (the consumer gets ~1 MB/s again right after), so 20% before the mutes are judged.
    assert_held_to_quota(slow, QUOTA, low=0.8)
    assert slow.throttled > 0
    assert fast.throttled == 0
    # Spared, as the producer without a quota (see that test), with one Fetch far over the
    # quota: throttled for the reader the quota applies to, not for the other.
    assert fetch_burst(bootstrap, "slow-reader", topic)[0] > 0
    throttle_ms, size = fetch_burst(bootstrap, "fast-reader", topic)
    assert size >= 3.5 * QUOTA and throttle_ms == 0, (size, throttle_ms)


def test_alter_and_describe_with_kafkas_rules(quota_broker):
    bootstrap = quota_broker.bootstrap
    answer = alter(
        bootstrap,
        [
            {"entity": entity(user="alice"), "ops": [setting("producer_byte_rate", 2048)]},
            {
                "entity": entity(user="alice", client_id=None),
                "ops": [setting("request_percentage", 12.5)],
            },
            {"entity": entity(ip="10.0.0.1"), "ops": [setting("connection_creation_rate", 5)]},
            {"entity": entity(user="bob"), "ops": [setting("bogus_rate", 1)]},
            {"entity": entity(user="carol"), "ops": [setting("consumer_byte_rate", -1)]},
            {"entity": entity(user="dave"), "ops": [setting("consumer_byte_rate", 1.5)]},
            {
                "entity": entity(ip="10.0.0.2", user="erin"),
                "ops": [setting("producer_byte_rate", 1)],
            },
            {"entity": entity(ip="not-an-ip"), "ops": [setting("connection_creation_rate", 1)]},
            {"entity": entity(user=""), "ops": [setting("producer_byte_rate", 1)]},
            {"entity": [], "ops": [setting("producer_byte_rate", 1)]},
            {"entity": entity(user="frank"), "ops": [setting("connection_creation_rate", 1)]},
        ],
    )
    codes = [entry.error_code for entry in answer.entries]
    assert codes == [Error.NONE] * 3 + [Error.INVALID_REQUEST] * 8, answer
    assert "Invalid configuration key bogus_rate" in answer.entries[3].error_message

    # validate_only checks and changes nothing.
    checked = alter(
        bootstrap,
        [{"entity": entity(user="gina"), "ops": [setting("producer_byte_rate", 10)]}],
        validate_only=True,
    )
    assert checked.entries[0].error_code == Error.NONE

    users = described(
        describe(bootstrap, [{"entity_type": "user", "match_type": 2, "match": None}])
    )
    assert users == {
        (("user", "alice"),): {"producer_byte_rate": 2048.0},
        (("client-id", None), ("user", "alice")): {"request_percentage": 12.5},
    }
    strict = describe(
        bootstrap, [{"entity_type": "user", "match_type": 0, "match": "alice"}], strict=True
    )
    assert described(strict) == {(("user", "alice"),): {"producer_byte_rate": 2048.0}}
    defaults = describe(bootstrap, [{"entity_type": "client-id", "match_type": 1, "match": None}])
    assert described(defaults) == {
        (("client-id", None), ("user", "alice")): {"request_percentage": 12.5}
    }
    ips = describe(bootstrap, [{"entity_type": "ip", "match_type": 2, "match": None}])
    assert described(ips) == {(("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0}}

    refused = describe(
        bootstrap,
        [
            {"entity_type": "ip", "match_type": 2, "match": None},
            {"entity_type": "user", "match_type": 2, "match": None},
        ],
    )
    assert refused.error_code == Error.INVALID_REQUEST and refused.entries is None
    unknown = describe(bootstrap, [{"entity_type": "group", "match_type": 2, "match": None}])
    assert unknown.error_code == Error.UNSUPPORTED_VERSION

    removed = alter(
        bootstrap,
        [
            {
                "entity": entity(user="alice"),
                "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}],
            }
        ],
    )
    assert removed.entries[0].error_code == Error.NONE
    after = described(
        describe(
            bootstrap, [{"entity_type": "user", "match_type": 0, "match": "alice"}], strict=True
        )
    )
    assert after == {}


def produce_throttle_ms(broker: BrokerProcess, topic: str, partition: int = 0) -> int | None:
    """One 10 kB Produce (the tests' client id) to this broker; its throttle time, or None
    while the broker does not lead the partition."""
    request = ProduceRequest(
        acks=1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(
                        index=partition, records=make_batch([(None, b"x" * 10_000)])
                    ),
                ),
            ),
        ),
    )
    response = exchange(broker.bootstrap, request)
    (answer,) = [part for reply in response.responses for part in reply.partition_responses]
    if answer.error_code != Error.NONE:
        return None
    return int(response.throttle_time.total_seconds() * 1000)


def test_quotas_survive_a_restart_of_the_controller(quota_broker):
    """The node is its own controller (KRaft mode): the quotas are in its state file, and the
    broker, which starts without any, gets them all when it registers."""
    bootstrap = quota_broker.bootstrap
    create_topic(bootstrap, "quota-restart", 1)
    tests_client = entity(client_id=TEST_CLIENT_ID)
    alter(bootstrap, [{"entity": tests_client, "ops": [setting("producer_byte_rate", 1000)]}])
    assert produce_throttle_ms(quota_broker, "quota-restart") > 0

    quota_broker.restart()
    quota_broker.wait_ready(BROKER_READY_TIMEOUT)
    strict = [{"entity_type": "client-id", "match_type": 0, "match": TEST_CLIENT_ID}]
    assert described(describe(bootstrap, strict, strict=True)) == {
        (("client-id", TEST_CLIENT_ID),): {"producer_byte_rate": 1000.0}
    }
    throttle = wait_for(
        lambda: produce_throttle_ms(quota_broker, "quota-restart"),
        BROKER_READY_TIMEOUT,
        "the restarted broker to lead and throttle",
    )
    assert throttle > 0

    removal = {"key": "producer_byte_rate", "value": 0.0, "remove": True}
    alter(bootstrap, [{"entity": tests_client, "ops": [removal]}])
    assert produce_throttle_ms(quota_broker, "quota-restart") == 0


def test_kafka_python_alters_and_describes_quotas(quota_broker):
    """kafka-python 3.0 has the two messages but no admin methods for them: they go through
    its admin client's own connections (its encoding, its version negotiation)."""
    admin = KafkaAdminClient(bootstrap_servers=quota_broker.bootstrap)
    try:
        entry = AlterClientQuotasRequest.EntryData
        request = AlterClientQuotasRequest(
            entries=[
                entry(
                    entity=[entry.EntityData(entity_type="user", entity_name="kp")],
                    ops=[entry.OpData(key="consumer_byte_rate", value=5000.0, remove=False)],
                ),
                entry(
                    entity=[entry.EntityData(entity_type="user", entity_name=None)],
                    ops=[entry.OpData(key="consumer_byte_rate", value=-1.0, remove=False)],
                ),
            ],
            validate_only=False,
        )
        altered = admin._manager.run(admin._manager.send, request)
        assert [e.error_code for e in altered.entries] == [0, Error.INVALID_REQUEST]
        component = DescribeClientQuotasRequest.ComponentData
        described = admin._manager.run(
            admin._manager.send,
            DescribeClientQuotasRequest(
                components=[component(entity_type="user", match_type=0, match="kp")],
                strict=True,
            ),
        )
        assert described.error_code == 0
        assert [(v.key, v.value) for e in described.entries for v in e.values] == [
            ("consumer_byte_rate", 5000.0)
        ]
    finally:
        admin.close()


def test_share_fetch_counts_against_the_consumer_byte_rate(quota_broker):
    """A ShareFetch response's bytes count against the client's ``consumer_byte_rate``, as
    Kafka's KafkaApis.handleShareFetchRequest records them with the fetch quota: over it, the
    response carries a throttle time, which a confluent-kafka ShareConsumer hands to its
    ``throttle_cb`` (confluent-kafka-python's test_throttle_cb_fires_under_quota found none:
    ShareFetch was never throttled). A share consumer without a quota reads every record
    with no positive throttle time."""
    bootstrap = quota_broker.bootstrap
    topic = "quota-share"
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "loader", "linger.ms": 20})
    for _ in range(200):
        producer.produce(topic, VALUE)
    assert producer.flush(30) == 0
    del producer
    answer = alter(
        bootstrap,
        [{"entity": entity(client_id="share-slow"), "ops": [setting("consumer_byte_rate", 1024)]}],
    )
    assert [entry.error_code for entry in answer.entries] == [Error.NONE]

    def share_consume(client_id: str, stop) -> tuple[int, list[int]]:
        group = f"{client_id}-group"
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
        throttles: list[int] = []
        consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "group.id": group,
                "throttle_cb": lambda event: throttles.append(event.throttle_time),
            }
        )
        consumed = 0
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 60
            while not stop(consumed, throttles) and time.monotonic() < deadline:
                consumed += sum(1 for m in consumer.poll(0.5) or [] if m.error() is None)
        finally:
            consumer.close()
        return consumed, throttles

    consumed, throttles = share_consume(
        "share-slow", lambda consumed, throttles: consumed and any(t > 0 for t in throttles)
    )
    assert consumed > 0 and any(t > 0 for t in throttles), (consumed, throttles)
    consumed, throttles = share_consume("share-fast", lambda consumed, _: consumed >= 200)
    assert consumed == 200 and not any(t > 0 for t in throttles), (consumed, throttles)
