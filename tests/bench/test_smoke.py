"""The benchmark harness in smoke mode: every row runs against its systems and yields numbers.

This keeps the harness from rotting as the broker changes; it asserts nothing about speed,
since CI machines are shared and slow in unpredictable ways.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rows import SMOKE_SIZES, rows
from bench.targets import MOCK

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

REPOSITORY = Path(__file__).resolve().parents[2]
# About 45 s on an idle 2-core machine and 2-3 minutes on a loaded one (the group rows start
# their members as processes and wait for a rebalance; the startup rows start clusters). The
# bound only keeps a hung run from holding CI.
SMOKE_TIMEOUT = 420
NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def table_cells(output: str) -> dict[tuple[str, str], list[str]]:
    """(row, metric) -> [minibroker, mock, ratio] cells of the markdown table (an Apache
    Kafka column, when there is one, is left out)."""
    cells = {}
    for line in output.splitlines():
        columns = [column.strip() for column in line.strip().strip("|").split("|")]
        if len(columns) in (6, 7) and columns[0] not in ("row", "---"):
            name, _workload, metric, *figures = columns
            cells[(name, metric)] = figures[:3]
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
    smoke_rows = rows(SMOKE_SIZES)
    expected = [(row.name, line.metric) for row in smoke_rows for line in row.lines]
    assert sorted(cells) == sorted(expected), finished.stdout
    measured = {row.name: row.systems for row in smoke_rows}
    for key, (ours, mock, ratio) in cells.items():
        assert first_number(ours) > 0, f"{key}: {ours}\n{finished.stdout}"
        if MOCK in measured[key[0]]:
            assert first_number(mock) > 0, f"{key}: {mock}\n{finished.stdout}"
            assert first_number(ratio) > 0, f"{key}: {ratio}\n{finished.stdout}"
        else:  # a row only minibroker has (a restart): nothing to compare with
            assert (mock, ratio) == ("n/a", "n/a"), f"{key}\n{finished.stdout}"
