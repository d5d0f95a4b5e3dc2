"""A streaming query into Parquet over a 3-broker cluster while a partition leader is killed
(SIGKILL): the query rides through the failover and the output holds every offset of every
partition exactly once, with the records the log holds there."""

from __future__ import annotations

from tests.cluster.conftest import (  # noqa: F401 - `cluster` is a fixture
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    cluster,
    create_replicated_topic,
    high_watermarks,
    lost_and_duplicated,
    read_partitions,
    wait_for_new_leader,
)
from tests.spark.conftest import (
    SPARK_TIMEOUT,
    RestartingQuery,
    parquet_rows,
    source_end_offsets,
    wait_until,
)

PARTITIONS = 3


def test_leader_killed_during_a_streaming_query(spark, cluster, tmp_path):  # noqa: F811
    topic = "spark-failover"
    create_replicated_topic(cluster, topic, PARTITIONS)
    output = tmp_path / "out"
    query = None
    with BackgroundProducer(cluster.bootstrap, topic, PARTITIONS) as producer:
        producer.wait_for_acks(500)
        query = RestartingQuery(
            lambda: (
                spark.readStream.format("minibroker")
                .option("kafka.bootstrap.servers", cluster.bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .load()
                .writeStream.format("parquet")
                .option("path", str(output))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="500 milliseconds")
                .start()
            )
        )
        try:
            wait_until(
                lambda: query.exception() or sum(source_end_offsets(query).values()) >= 500,
                SPARK_TIMEOUT,
                "the query to read 500 records",
            )
            assert query.exception() is None, query.exception()
            victim = cluster.leader_of(topic, 0)
            cluster.brokers[victim].kill()
            wait_for_new_leader(cluster, topic, 0, victim, CONVERGENCE_TIMEOUT)
            producer.wait_for_acks(len(producer.acked) + 1500)
        except BaseException:
            query.stop()
            raise
        producer.stop()
    try:
        assert producer.undelivered == 0 and not producer.errors, producer.errors[:5]
        ends = high_watermarks(cluster.bootstrap, topic, PARTITIONS)

        def caught_up():
            if query.exception() is not None:
                return True
            done = source_end_offsets(query)
            return all(done.get((topic, p), 0) >= end for p, end in ends.items())

        wait_until(caught_up, SPARK_TIMEOUT, f"the query to reach the high watermarks {ends}")
        assert query.exception() is None, query.exception()
    finally:
        query.stop()

    log = read_partitions(cluster.bootstrap, topic, PARTITIONS)
    lost, _ = lost_and_duplicated(producer.acked, log)
    assert not lost, f"acknowledged records missing from the log: {lost[:5]}"
    rows = parquet_rows(spark, output)
    positions = [(row["partition"], row["offset"]) for row in rows]
    assert len(positions) == len(set(positions)), "an offset was written twice"
    assert sorted(positions) == sorted(log), "the output and the log hold different offsets"
    for row in rows:
        assert bytes(row["value"]) == log[(row["partition"], row["offset"])]


def test_leader_killed_during_an_exactly_once_write(spark, cluster, tmp_path):  # noqa: F811
    """A stream writing with exactlyOnce=true into a replicated topic while the leader of one
    of its output partitions is killed (SIGKILL): the open transactions ride through the
    failover (librdkafka sends the records again to the new leader, within the transaction),
    and a read_committed reader sees every input row exactly once."""
    from collections import Counter

    from tests.spark.conftest import produce
    from tests.spark.test_exactly_once import read_all

    source, sink = "eos-failover-in", "eos-failover-out"
    create_replicated_topic(cluster, source, PARTITIONS)
    create_replicated_topic(cluster, sink, PARTITIONS)
    values = [b"f%05d" % i for i in range(3000)]
    produce(
        cluster.bootstrap, source, [{"value": v, "partition": i % 3} for i, v in enumerate(values)]
    )
    query = RestartingQuery(
        lambda: (
            spark.readStream.format("minibroker")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "300")
            .load()
            .select("value")
            .writeStream.format("minibroker")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("topic", sink)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
    )
    try:
        wait_until(
            lambda: query.exception() or sum(source_end_offsets(query).values()) >= 600,
            SPARK_TIMEOUT,
            "the query to write two micro-batches",
        )
        assert query.exception() is None, query.exception()
        victim = cluster.leader_of(sink, 0)
        cluster.brokers[victim].kill()
        wait_for_new_leader(cluster, sink, 0, victim, CONVERGENCE_TIMEOUT)
        assert query.awaitTermination(SPARK_TIMEOUT), "the query did not finish"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    seen = Counter(read_all(cluster.bootstrap, sink, PARTITIONS, "read_committed"))
    assert seen == Counter(values)
