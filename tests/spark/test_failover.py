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
from tests.spark.conftest import SPARK_TIMEOUT, parquet_rows, source_end_offsets, wait_until

PARTITIONS = 3


def test_leader_killed_during_a_streaming_query(spark, cluster, tmp_path):  # noqa: F811
    topic = "spark-failover"
    create_replicated_topic(cluster, topic, PARTITIONS)
    output = tmp_path / "out"
    query = None
    with BackgroundProducer(cluster.bootstrap, topic, PARTITIONS) as producer:
        producer.wait_for_acks(500)
        query = (
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
