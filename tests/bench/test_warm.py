"""`python -m bench --warm`: its options, the rows it keeps, the untimed runs before each
measurement, and the block of the benchmarks page it writes; on made-up targets and figures (no
broker: a warm run takes minutes, and the smoke test runs the cold harness for real)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench import rows as rows_module
from bench.__main__ import parser, warmups_of
from bench.report import (
    BEGIN_MARKER,
    END_MARKER,
    WARM_BEGIN_MARKER,
    WARM_END_MARKER,
    table,
    write_benchmarks,
)
from bench.rows import REAL_SIZES, SMOKE_SIZES, RowResult, measure_once, rows, warm_selection
from bench.targets import KAFKA, MINIBROKER, MOCK

MEASURED_WARM = ["produce-100", "produce-1k", "produce-all-100", "produce-all-1k", "consume"]


def warmups(*argv: str) -> int:
    return warmups_of(parser().parse_args(list(argv)))


def test_options_give_the_untimed_runs_per_measurement():
    assert warmups() == 0
    assert warmups("--warm") == 1
    assert warmups("--warmup", "3", "--only", "consume") == 3
    assert warmups("--warmup", "0") == 0
    with pytest.raises(SystemExit):
        warmups("--warm", "--warmup", "2")
    with pytest.raises(SystemExit):
        warmups("--warmup", "-1")


def test_a_warm_run_leaves_out_the_rows_that_start_their_own_system():
    every = rows(REAL_SIZES)
    assert warm_selection(every, 0) == (every, {})
    kept, left_out = warm_selection(every, 1)
    names = [row.name for row in kept]
    for name in [*MEASURED_WARM, "latency", "resources"]:
        assert name in names
    assert set(left_out) == {
        "startup-1",
        "startup-3",
        "failover",
        "streams-join",
        "restart",
        "spark-count",
        "spark-parquet",
        "spark-latency",
    }
    assert not set(left_out) & set(names)
    assert all(left_out.values())


class FakeTarget:
    """What measure_once needs of a started system: topics made, and a close."""

    def __init__(self) -> None:
        self.topics: dict[str, int] = {}
        self.closed = False

    def create_topic(self, name, partitions, replication_factor, configs) -> None:
        self.topics[name] = partitions

    def close(self) -> None:
        self.closed = True


def test_each_warm_up_runs_on_the_same_target_into_its_own_topic_and_only_the_last_counts(
    monkeypatch, tmp_path: Path
):
    target = FakeTarget()
    started: list[str] = []

    def start(system, brokers, work_dir, overrides, extra_listeners, fork=False):
        started.append(system)
        return target

    calls: list[tuple[str, str]] = []

    def workload(name: str):
        def measure(measured_on, topic, work_dir):
            assert measured_on is target
            calls.append((name, topic))
            return {"records_per_s": float(len(calls))}

        return measure

    monkeypatch.setattr(rows_module, "start", start)
    row = dataclasses.replace(
        next(row for row in rows(SMOKE_SIZES, kafka=False) if row.name == "produce-100"),
        measure=workload("timed"),
        warm_up=workload("warm-up"),
    )
    figures = measure_once(row, MOCK, 4, tmp_path, warmups=2)
    assert started == [MOCK]
    assert calls == [
        ("warm-up", "bench-produce-100-4-warm-0"),
        ("warm-up", "bench-produce-100-4-warm-1"),
        ("timed", "bench-produce-100-4"),
    ]
    assert target.topics == {topic: 8 for _, topic in calls}
    assert figures == {"records_per_s": 3.0}
    assert target.closed

    # A row without a warm-up of its own warms up with its measurement; none when cold.
    calls.clear()
    measure_once(dataclasses.replace(row, warm_up=None), MOCK, 0, tmp_path, warmups=1)
    assert calls == [("timed", "bench-produce-100-0-warm-0"), ("timed", "bench-produce-100-0")]
    calls.clear()
    measure_once(row, MOCK, 0, tmp_path)
    assert calls == [("timed", "bench-produce-100-0")]


def test_produce_rows_warm_up_without_the_java_client():
    for row in rows(REAL_SIZES):
        if row.name in MEASURED_WARM[:4]:
            assert row.warm_up is not None and row.warm_up is not row.measure, row.name
        else:
            assert row.warm_up is None, row.name


def test_a_warm_table_says_so_and_goes_to_its_own_block(tmp_path: Path):
    row = next(row for row in rows(SMOKE_SIZES) if row.name == "consume")
    result = RowResult(
        row,
        {
            MINIBROKER: [{"records_per_s": 3.0, "mb_per_s": 0.1}],
            MOCK: [{"records_per_s": 2.0, "mb_per_s": 0.1}],
            KAFKA: [{"records_per_s": 4.0, "mb_per_s": 0.1}],
        },
        {},
    )
    warm = table([result], 3, 1, {"restart": "why not"})
    assert warm.startswith("**Warm run** (`--warm`)"), warm
    assert "ran once, untimed, on the same started system" in warm
    assert "- restart: why not\n" in warm
    assert "| consume |" in warm and "| 0.75 |" in warm
    assert "Warm run" not in table([result], 3)

    path = tmp_path / "BENCHMARKS.md"
    path.write_text(f"# B\n\n{BEGIN_MARKER}\ncold\n{END_MARKER}\n\n## Warm\n")
    write_benchmarks("warm 1\n", path, warm=True)
    write_benchmarks("warm 2\n", path, warm=True)
    text = path.read_text()
    assert f"{BEGIN_MARKER}\ncold\n{END_MARKER}" in text
    assert text.count(WARM_BEGIN_MARKER) == 1
    assert text.endswith(f"{WARM_BEGIN_MARKER}\nwarm 2\n{WARM_END_MARKER}\n")
    write_benchmarks("cold 2\n", path)
    assert f"{BEGIN_MARKER}\ncold 2\n{END_MARKER}" in path.read_text()
    assert f"{WARM_BEGIN_MARKER}\nwarm 2\n{WARM_END_MARKER}" in path.read_text()


def test_profile_summary_counts_own_and_inclusive_samples_per_function():
    from bench.profile_row import summarize

    raw = (
        "main (broker/cli.py:10);serve (broker/node/server.py:700);append (storage/log.py:5) 6\n"
        "main (broker/cli.py:10);serve (broker/node/server.py:702);append (storage/log.py:9) 2\n"
        "main (broker/cli.py:10);serve (broker/node/server.py:710) 2\n"
        "not a sample line\n"
    )
    total, own, inclusive = summarize(raw, top=5)
    assert total == 10
    assert own == [("append (log.py)", 8), ("serve (server.py)", 2)]
    # main and serve are in every sample: left out as saying nothing.
    assert inclusive == [("append (log.py)", 8)]


def test_a_kafka_cluster_id_never_starts_with_a_dash():
    from bench.kafka_ref import random_cluster_id

    # 0xf8 as the first byte is "-" in URL-safe base64: drawn again, as Kafka's Uuid does.
    draws = iter([b"\xf8" + bytes(15), b"\x00" + bytes(15)])
    assert random_cluster_id(lambda: next(draws)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert not any(random_cluster_id().startswith("-") for _ in range(1000))
