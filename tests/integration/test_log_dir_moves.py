"""A replica moved between the two log dirs of one real broker while a producer writes
(AlterReplicaLogDirs, KIP-113; replication/log_dir_mover.py): every acknowledged record is
read back afterwards, in order, from the new dir, and DescribeLogDirs names the dir before
and after. Bad moves get Kafka's codes and the broker goes on serving. A log dir cordoned
at run time (KIP-1066, cordoned.log.dirs) takes no new replica and no move.

One broker with two log dirs serves the module; the requests are sent raw (kio), as
confluent-kafka has no AlterReplicaLogDirs and kafka-python's admin no DescribeLogDirs by
partition.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import (
    BROKER_READY_TIMEOUT,
    confluent_read_all,
    create_topic,
    exchange,
    produce_numbers,
    wait_for,
)

TOPIC = "moving"
# Enough data before the move that the copy takes many steps (1 MiB each) while the
# producer goes on writing.
SEEDED = 40_000


@pytest.fixture(scope="module")
def jbod(tmp_path_factory) -> Iterator[tuple[BrokerProcess, list[Path]]]:
    root = tmp_path_factory.mktemp("jbod")
    dirs = [root / "a", root / "b"]
    broker = BrokerProcess.start(
        node_id=1,
        log_dir=dirs[0],
        overrides={"log.dirs": ",".join(str(d) for d in dirs), "log.segment.bytes": 1 << 20},
    )
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        yield broker, dirs
    finally:
        assert broker.stop() == 0, broker.log_tail()


def move(bootstrap: str, path: str, topic: str, *partitions: int) -> dict[int, ErrorCode]:
    answer = exchange(
        bootstrap,
        AlterReplicaLogDirsRequest(
            dirs=(
                AlterReplicaLogDir(
                    path=path,
                    topics=(
                        AlterReplicaLogDirTopic(
                            name=topic, partitions=tuple(i32(p) for p in partitions)
                        ),
                    ),
                ),
            )
        ),
    )
    (result,) = answer.results
    assert result.topic_name == topic
    return {p.partition_index: p.error_code for p in result.partitions}


def placement(bootstrap: str, topic: str, partition: int) -> list[tuple[str, bool]]:
    """(log dir, is future) of each replica of the partition DescribeLogDirs lists."""
    answer = exchange(
        bootstrap,
        DescribeLogDirsRequest(
            topics=(DescribableLogDirTopic(topic=topic, partitions=(i32(partition),)),)
        ),
    )
    assert answer.error_code == ErrorCode.none
    return [
        (result.log_dir, entry.is_future_key)
        for result in answer.results
        for described in result.topics
        if described.name == topic
        for entry in described.partitions
        if entry.partition_index == partition
    ]


def test_a_partition_moves_to_the_other_dir_while_a_producer_writes(jbod):
    broker, dirs = jbod
    create_topic(broker.bootstrap, TOPIC, 1)
    [(home, future)] = placement(broker.bootstrap, TOPIC, 0)
    assert not future
    source, target = (dirs[0], dirs[1]) if home == str(dirs[0]) else (dirs[1], dirs[0])
    produce_numbers(broker.bootstrap, TOPIC, 0, SEEDED)

    acknowledged: list[int] = []
    failed: list[str] = []
    stop = threading.Event()

    def write() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2})

        def delivered(error, message) -> None:
            if error is None:
                acknowledged.append(int(message.value()))
            else:
                failed.append(str(error))

        number = SEEDED
        while not stop.is_set():
            producer.produce(TOPIC, value=str(number).encode(), on_delivery=delivered)
            producer.poll(0)
            number += 1
            if number % 200 == 0:
                producer.flush(10)
        assert producer.flush(30) == 0

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_for(lambda: len(acknowledged) >= 500, 30, "records acknowledged before the move")
        assert move(broker.bootstrap, str(target), TOPIC, 0) == {0: ErrorCode.none}
        wait_for(
            lambda: placement(broker.bootstrap, TOPIC, 0) == [(str(target), False)],
            60,
            "the replica in the other dir, alone",
        )
        moved_at = len(acknowledged)
        wait_for(lambda: len(acknowledged) >= moved_at + 500, 30, "records after the move")
    finally:
        stop.set()
        writer.join(60)
    assert not failed
    assert not (source / f"{TOPIC}-0").exists()
    assert not [p for p in source.iterdir() if p.name.startswith(f"{TOPIC}-0")]
    assert (target / f"{TOPIC}-0").is_dir()
    # Every record acknowledged, in order, from the new dir (which alone holds the files).
    expected = list(range(SEEDED)) + acknowledged
    read = confluent_read_all(broker.bootstrap, TOPIC, {0: 0}, len(expected), timeout=60)
    assert [int(message.value()) for message in read] == expected


def test_bad_moves_get_kafkas_codes_and_the_broker_goes_on(jbod):
    broker, dirs = jbod
    create_topic(broker.bootstrap, "unmoved", 1)
    [(home, future)] = placement(broker.bootstrap, "unmoved", 0)
    assert not future
    # Not a configured dir, and a relative path: LOG_DIR_NOT_FOUND, checked first.
    assert move(broker.bootstrap, str(dirs[0].parent / "c"), "unmoved", 0) == {
        0: ErrorCode.log_dir_not_found
    }
    assert move(broker.bootstrap, dirs[1].name, "unmoved", 0) == {0: ErrorCode.log_dir_not_found}
    # A partition the cluster does not have.
    assert move(broker.bootstrap, str(dirs[1]), "unmoved", 7) == {
        7: ErrorCode.unknown_topic_or_partition
    }
    assert move(broker.bootstrap, str(dirs[1]), "no-such-topic", 0) == {
        0: ErrorCode.unknown_topic_or_partition
    }
    # To the dir it is in: nothing to do.
    assert move(broker.bootstrap, home, "unmoved", 0) == {0: ErrorCode.none}
    assert placement(broker.bootstrap, "unmoved", 0) == [(home, False)]
    produce_numbers(broker.bootstrap, "unmoved", 0, 10)
    read = confluent_read_all(broker.bootstrap, "unmoved", {0: 0}, 10)
    assert [int(message.value()) for message in read] == list(range(10))


def cordon(bootstrap: str, value: str | None) -> None:
    """Set (or with None delete) the broker's cordoned.log.dirs, as kafka-configs does."""
    entry = (
        ConfigEntry("cordoned.log.dirs", value, incremental_operation=AlterConfigOpType.SET)
        if value is not None
        else ConfigEntry("cordoned.log.dirs", "", incremental_operation=AlterConfigOpType.DELETE)
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(15)


def cordoned(bootstrap: str) -> dict[str, bool]:
    with wire.connect(bootstrap, 10, exact=True) as client:
        answer = client.request(ApiKey.DESCRIBE_LOG_DIRS, 5, {"topics": None})
    return {result.log_dir: result.is_cordoned for result in answer.results}


def test_a_cordoned_log_dir_takes_no_new_replica_and_no_move(jbod):
    broker, dirs = jbod
    cordon(broker.bootstrap, str(dirs[0]))
    try:
        wait_for(
            lambda: cordoned(broker.bootstrap) == {str(dirs[0]): True, str(dirs[1]): False},
            15,
            "the first log dir cordoned",
        )
        create_topic(broker.bootstrap, "placed", 4)
        for partition in range(4):
            assert placement(broker.bootstrap, "placed", partition) == [(str(dirs[1]), False)]
        # A move into it: INVALID_REPLICA_ASSIGNMENT, as Kafka 4.4 answers.
        assert move(broker.bootstrap, str(dirs[0]), "placed", 0) == {
            0: ErrorCode.invalid_replica_assignment
        }
        # Only this broker's own log dirs, or `*` alone.
        for value in (str(dirs[0].parent / "c"), "*," + str(dirs[1])):
            with pytest.raises(KafkaException) as refused:
                cordon(broker.bootstrap, value)
            assert refused.value.args[0].name() == "INVALID_REQUEST"
        assert cordoned(broker.bootstrap) == {str(dirs[0]): True, str(dirs[1]): False}
    finally:
        cordon(broker.bootstrap, None)
    wait_for(
        lambda: not any(cordoned(broker.bootstrap).values()), 15, "no log dir cordoned any more"
    )
    assert move(broker.bootstrap, str(dirs[0]), "placed", 0) == {0: ErrorCode.none}


COPY_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


def alter_broker_config(bootstrap: str, name: str, value: str | None) -> None:
    """SET (or with None DELETE) one of broker 1's configs, as kafka-configs does."""
    operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry(name, value if value is not None else "", incremental_operation=operation)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(15)


def described(bootstrap: str, name: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    return admin.describe_configs([resource])[resource].result(15)[name]


def test_the_copy_throttle_is_a_dynamic_broker_config_validated_as_kafka_does(jbod):
    """replica.alter.log.dirs.io.max.bytes.per.second: Kafka's default (Long.MAX_VALUE,
    unbounded), set per broker and applied to the mover's quota (the broker logs the new
    bound), refused as Kafka 4.4 refuses its sibling rates (INVALID_REQUEST, Kafka's
    messages; tests/java/test_replication_throttle.py measured those), nothing stored then.
    How the mover keeps to it: tests/unit/test_log_dir_mover.py on trio's MockClock."""
    broker, _ = jbod
    assert described(broker.bootstrap, COPY_THROTTLE).value == str(2**63 - 1)
    for bad, message in (("fast", "Not a number of type LONG"), ("-1", "Value must be at least 0")):
        with pytest.raises(KafkaException) as refused:
            alter_broker_config(broker.bootstrap, COPY_THROTTLE, bad)
        assert refused.value.args[0].name() == "INVALID_REQUEST", refused.value
        assert f"for configuration {COPY_THROTTLE}: {message}" in refused.value.args[0].str()
    alter_broker_config(broker.bootstrap, COPY_THROTTLE, "1048576")
    try:
        assert described(broker.bootstrap, COPY_THROTTLE).value == "1048576"
        wait_for(
            lambda: f"{COPY_THROTTLE} now 1048576 bytes/s" in broker.log_tail(400),
            15,
            "the broker to apply the copy throttle",
        )
    finally:
        alter_broker_config(broker.bootstrap, COPY_THROTTLE, None)
    assert described(broker.bootstrap, COPY_THROTTLE).value == str(2**63 - 1)
    wait_for(
        lambda: f"{COPY_THROTTLE} now unbounded" in broker.log_tail(400),
        15,
        "the broker to drop the copy throttle",
    )
    # The broker goes on serving: a move still completes.
    create_topic(broker.bootstrap, "after-throttle", 1)
    assert move(broker.bootstrap, str(jbod[1][1]), "after-throttle", 0) == {0: ErrorCode.none}
