"""The report's table, issue 26's targets against Apache Kafka, and the chart's reading of the
table, on made-up figures (no broker: the smoke test runs the real thing)."""

from __future__ import annotations

from bench.chart import panels_from_markdown
from bench.report import format_ratio, kafka_targets, table
from bench.rows import REAL_SIZES, SMOKE_SIZES, RowResult, rows
from bench.targets import KAFKA, MINIBROKER, MOCK


def result(name: str, figures: dict[str, dict[str, float]], kafka: bool = True) -> RowResult:
    row = next(row for row in rows(SMOKE_SIZES, kafka) if row.name == name)
    runs = {system: [] for system in (MINIBROKER, MOCK, KAFKA)}
    for system, values in figures.items():
        runs[system] = [values]
    return RowResult(row, runs, {}, skipped=dict(row.not_measured))


def produce(rate: dict[str, float], java: dict[str, float] | None = None):
    figures = {
        system: {"records_per_s": value, "mb_per_s": value / 1e4} for system, value in rate.items()
    }
    for system, value in (java or {}).items():
        figures[system].update(java_records_per_s=value, java_mb_per_s=value / 1e4)
    return figures


def test_table_has_kafka_column_ratios_and_targets():
    results = [
        result(
            "produce-100",
            produce(
                {MINIBROKER: 300.0, MOCK: 600.0, KAFKA: 200.0}, {MINIBROKER: 90.0, KAFKA: 100.0}
            ),
        ),
        result(
            "resources",
            {
                MINIBROKER: {"cpu_s_per_gb": 3.0, "peak_rss_mib": 100.0},
                MOCK: {"cpu_s_per_gb": 1.0, "peak_rss_mib": 300.0},
                KAFKA: {"cpu_s_per_gb": 2.0, "peak_rss_mib": 1000.0},
            },
        ),
    ]
    text = table(results, 1)
    workload = "produce 10,000 x 100 B, acks=1, 1 broker (kcat, then the Java client)"
    assert (
        f"| produce-100 | {workload} | records/s (MB/s), kcat | 300 (0.0)"
        " | 600 (0.1) | 200 (0.0) | 0.50 | 1.50 |" in text
    ), text
    # The mock has no Java figure (the Java client cannot use it): n/a, and no ratio.
    assert (
        f"| produce-100 | {workload} | records/s (MB/s), Java producer-perf-test | 90 (0.0)"
        " | n/a | 100 (0.0) | n/a | 0.90 |" in text
    ), text
    targets = kafka_targets(results)
    assert "| produce-100 | records/s (MB/s), kcat | 1.50 | >= 1 | met |" in targets
    assert (
        "| produce-100 | records/s (MB/s), Java producer-perf-test | 0.90 | >= 1 | **missed** |"
        in targets
    )
    assert "| resources | CPU s per GB moved | 1.50 | <= 1 | **missed** |" in targets
    assert "| resources | peak RSS MiB | 0.10 | <= 0.25 | met |" in targets


def test_kafka_left_out_says_skipped_once_and_chart_reads_the_table():
    results = [
        result("produce-100", produce({MINIBROKER: 300.0, MOCK: 600.0}), kafka=False),
        result("consume", produce({MINIBROKER: 50.0, MOCK: 100.0}), kafka=False),
    ]
    text = table(results, 1)
    assert text.count("left out of this run") == 1, text
    assert "- kafka, produce-100, consume: left out of this run" in text
    assert "Issue 26's targets" not in text
    panels = panels_from_markdown(text)
    assert [title for title, _ in panels] == [
        "produce-100: records/s (MB/s)",
        "consume: records/s (MB/s)",
    ]
    assert panels[0][1] == [
        (MINIBROKER, 300.0, "300 (0.0)"),
        (MOCK, 600.0, "600 (0.1)"),
        (KAFKA, None, "skipped"),
    ]


def test_spark_rows_have_a_table_of_their_own_with_both_ratios_and_targets():
    from bench.rows import CONSUMER, SPARK_KAFKA

    def spark(name: str, figures: dict[str, dict[str, float]]) -> RowResult:
        row = next(row for row in rows(SMOKE_SIZES) if row.name == name)
        runs = {system: [] for system in (MINIBROKER, MOCK, KAFKA, SPARK_KAFKA, CONSUMER)}
        for system, values in figures.items():
            runs[system] = [values]
        return RowResult(row, runs, {})

    results = [
        result("produce-100", produce({MINIBROKER: 300.0, MOCK: 600.0, KAFKA: 200.0})),
        spark(
            "spark-count",
            {
                MINIBROKER: {"rows_per_s": 300.0},
                SPARK_KAFKA: {"rows_per_s": 200.0},
                CONSUMER: {"rows_per_s": 400.0},
            },
        ),
        spark(
            "spark-latency",
            {
                MINIBROKER: {"median_ms": 900.0, "max_ms": 1500.0},
                SPARK_KAFKA: {"median_ms": 1200.0, "max_ms": 1500.0},
                CONSUMER: {"median_ms": 3.0, "max_ms": 6.0},
            },
        ),
    ]
    text = table(results, 1)
    main, spark_part = text.split("Spark (issue 22)")
    assert "spark-" not in main, text  # not in the brokers' table
    assert "| produce-100 |" in main
    assert (
        "| spark-count | Spark batch read of 20,000 x 100 B, 4 partitions into count(), local[2]"
        " (consumer: every record in one confluent-kafka Consumer) | rows/s | 300 | 200 | 400"
        " | 1.50 | 0.75 |" in spark_part
    ), text
    assert "| spark-count | rows/s | Spark's connector | 1.50 | >= 1 | met |" in spark_part
    assert "| spark-count | rows/s | one consumer | 0.75 | >= 1 | **missed** |" in spark_part
    assert (
        "| spark-latency | median ms of the probes | Spark's connector | 0.75 | <= 1 | met |"
        in spark_part
    )
    titles = [title for title, _ in panels_from_markdown(text)]
    assert "spark-count: rows/s" in titles
    count = dict(panels_from_markdown(text))["spark-count: rows/s"]
    assert count == [
        (MINIBROKER, 300.0, "300"),
        (SPARK_KAFKA, 200.0, "200"),
        (CONSUMER, 400.0, "400"),
    ]


def test_a_ratio_far_below_one_keeps_two_significant_digits():
    # CI once failed on "0.00" for the first rebalance (0.03 s against the mock's 12.01 s): a
    # reader, and the smoke test, took it for a missing figure.
    assert format_ratio(0.03 / 12.01) == "0.0025"
    assert format_ratio(0.099) == "0.099"
    assert format_ratio(0.1) == "0.10"
    assert format_ratio(1.234) == "1.23"
    assert format_ratio(None) == "n/a"
    assert format_ratio(0.0) == "0.00"


def test_only_the_smoke_run_forks_and_never_where_the_process_is_measured():
    real = {row.name: row for row in rows(REAL_SIZES, kafka=True, spark=False)}
    smoke = {row.name: row for row in rows(SMOKE_SIZES, kafka=True, spark=False)}
    assert not any(row.fork for row in real.values())
    assert smoke["produce-100"].fork and smoke["failover"].fork
    assert not smoke["restart"].fork and not smoke["resources"].fork
    assert MOCK in real["first-rebalance"].systems
    assert MOCK not in smoke["first-rebalance"].systems
    assert MOCK in smoke["first-rebalance"].not_measured
    # Every row's topic: Kafka-sized in the real run, 8 partitions in the smoke run.
    assert {row.partitions for row in real.values()} == {64}
    assert {row.partitions for row in smoke.values()} == {8}


def test_the_latency_harness_keeps_its_own_collector_out_and_puts_it_back():
    """Issue 40: the measuring process's first full collection held its consumer's polls
    for 36-59 ms in every fresh `python -m bench`; the latency rows measure with the
    collector paused (everything older frozen) and leave it as they found it."""
    import gc

    from bench.workloads import harness_collector_paused

    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    with harness_collector_paused():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > frozen_before
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
