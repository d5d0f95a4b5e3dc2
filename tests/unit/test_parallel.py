"""tests/parallel.py: what `-n auto` means for a command line, and which tests share a worker
(docs/testing.md, "Running in parallel")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import parallel
from tests.conftest import FOLDER_MARKS
from tests.parallel import WORKERS, folder_rank, unit_of, worker_count

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv(parallel.WORKERS_VARIABLE, raising=False)


@pytest.mark.parametrize(
    ("args", "markexpr", "workers"),
    [
        (["tests"], "", WORKERS),  # the README's `pytest` (testpaths)
        (["tests"], "not slow", 0),  # the fast tier: in process
        (["tests"], "slow and not root", WORKERS),
        (["tests/integration"], "", WORKERS),
        (["tests/integration", "tests/cluster"], "", WORKERS),
        (["tests/unit"], "", 0),
        (["tests/unit/test_partition.py", "tests/unit/test_purgatory.py"], "", 0),
        (["tests/integration/test_wire.py"], "", 0),  # one file: in process
        (["tests/integration/test_wire.py::test_a", "tests/integration/test_wire.py::b"], "", 0),
        (["tests/integration/test_wire.py", "tests/integration/test_kcat.py"], "", WORKERS),
        (["tests/unit/test_partition.py", "tests/integration"], "", WORKERS),
    ],
)
def test_worker_count(args, markexpr, workers):
    assert worker_count(args, REPO, markexpr) == workers


def test_worker_count_from_the_command_line_dir_and_the_variable(monkeypatch):
    assert worker_count(["integration/test_wire.py"], REPO / "tests") == 0
    assert worker_count(["integration"], REPO / "tests") == WORKERS
    monkeypatch.setenv(parallel.WORKERS_VARIABLE, "4")
    assert worker_count(["tests/unit"], REPO, "not slow") == 4


def test_a_file_is_a_unit_and_the_spark_files_are_one():
    assert unit_of("tests/faults/test_chaos.py::test_x[a::b]") == "tests/faults/test_chaos.py"
    assert unit_of("tests/spark/test_demo.py::test_x") == "group:spark"
    assert unit_of("tests/spark/test_batch.py::test_y") == "group:spark"
    assert unit_of("tests/java/test_spark_kafka.py::test_z") == "group:spark"
    assert unit_of("tests/java/test_clients.py::test_z") == "group:clusters"
    assert unit_of("tests/cluster/test_isr.py::test_z") == "group:clusters"
    assert unit_of("tests/integration/test_wire.py::t") == "tests/integration/test_wire.py"
    assert unit_of("tests/sparkle/test_a.py::t") == "tests/sparkle/test_a.py"


def test_every_shared_worker_entry_names_files_that_exist():
    for prefix in parallel.SHARED_WORKER:
        assert (parallel.TESTS / prefix).exists(), prefix


def test_long_folders_go_first():
    ranks = [
        folder_rank(unit)
        for unit in (
            "group:spark",
            "tests/faults/test_chaos.py",
            "tests/deploy/test_deploy.py",
            "tests/bench/test_smoke.py",
            "tests/integration/test_wire.py",
            "tests/unit/test_partition.py",
        )
    ]
    assert ranks == sorted(ranks)
    assert len(set(ranks)) == len(ranks)
    # Every folder of a tier has its place.
    assert set(FOLDER_MARKS) <= set(parallel.FOLDER_ORDER)
