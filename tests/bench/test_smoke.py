"""The benchmark harness in smoke mode: every row runs against its systems and yields numbers.

This keeps the harness from rotting as the broker changes; it asserts nothing about speed,
since CI machines are shared and slow in unpredictable ways.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.kafka_ref import missing_reason
from bench.rows import JAVA_PRODUCER_KEY, PRODUCE, SMOKE_SIZES, rows
from bench.targets import KAFKA, MOCK

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

REPOSITORY = Path(__file__).resolve().parents[2]
# About 45 s on an idle 2-core machine and 2-3 minutes on a loaded one (the group rows start
# their members as processes and wait for a rebalance; the startup rows and the failover row
# start clusters; the mock's group rows can wait out a 9 s join window, see
# docs/benchmarks/index.md's first-rebalance note). At a load average of 17 (five sessions'
# suites on 2 cores) a run
# passed 420 s. The bound only keeps a hung run from holding CI.
SMOKE_TIMEOUT = 600
NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def table_cells(output: str) -> dict[tuple[str, str], dict[str, str]]:
    """(row, metric) -> {column heading: cell} of the markdown table whose first heading is
    "row" and which has a workload column (the targets table below it has none)."""
    cells = {}
    headings: list[str] | None = None
    for line in output.splitlines():
        if not line.startswith("|"):
            headings = None
            continue
        columns = [column.strip() for column in line.strip().strip("|").split("|")]
        if columns[:2] == ["row", "workload"]:
            headings = columns
        elif headings is not None and not columns[0].startswith("---"):
            named = dict(zip(headings, columns, strict=True))
            cells[(named["row"], named["metric"])] = named
    return cells


def first_number(cell: str) -> float:
    found = NUMBER.search(cell)
    assert found is not None, f"no number in {cell!r}"
    return float(found.group().replace(",", ""))


def test_smoke_run_fills_every_row_with_positive_numbers():
    try:
        finished = subprocess.run(
            [sys.executable, "-m", "bench", "--smoke"],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=SMOKE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(
            f"python -m bench --smoke ran for more than {SMOKE_TIMEOUT}s:\n{timeout.stderr}"
        )
    assert finished.returncode == 0, (
        f"exit {finished.returncode}; stderr:\n{finished.stderr[-5000:]}"
    )

    cells = table_cells(finished.stdout)
    # Kafka is measured in a smoke run only on request, and only with its jars cached.
    kafka = os.environ.get("MINIBROKER_BENCH_KAFKA") == "1" and missing_reason("kafka") is None
    smoke_rows = rows(SMOKE_SIZES, kafka, spark=False)
    expected = [(row.name, line.metric) for row in smoke_rows for line in row.lines]
    assert sorted(cells) == sorted(expected), finished.stdout
    measured = {row.name: row.systems for row in smoke_rows}
    not_measured_on_mock = {row.name for row in smoke_rows if MOCK in row.not_measured}
    java_lines = {line.metric for line in PRODUCE if line.key == JAVA_PRODUCER_KEY}
    for key, named in cells.items():
        ours, mock, ratio = named["minibroker"], named["mock"], named["minibroker / mock"]
        assert first_number(ours) > 0, f"{key}: {ours}\n{finished.stdout}"
        if MOCK in measured[key[0]] and key[1] not in java_lines:
            assert first_number(mock) > 0, f"{key}: {mock}\n{finished.stdout}"
            assert first_number(ratio) > 0, f"{key}: {ratio}\n{finished.stdout}"
        elif key[0] in not_measured_on_mock:  # a row that says why the mock has no figure
            assert (mock, ratio) == ("skipped", "n/a"), f"{key}\n{finished.stdout}"
        else:  # the mock cannot run it (a restart, the Java client): nothing to compare with
            assert (mock, ratio) == ("n/a", "n/a"), f"{key}\n{finished.stdout}"
        kafka_cell = named["Apache Kafka"]
        if KAFKA in measured[key[0]]:
            assert first_number(kafka_cell) > 0, f"{key}: {kafka_cell}\n{finished.stdout}"
            assert first_number(named["minibroker / Kafka"]) > 0, f"{key}\n{finished.stdout}"
        else:
            assert kafka_cell == "skipped", f"{key}: {kafka_cell}\n{finished.stdout}"
            assert named["minibroker / Kafka"] == "n/a", f"{key}\n{finished.stdout}"
