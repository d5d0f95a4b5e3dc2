"""The test tiers as pytest collects them (tests/conftest.py marks every test by its folder,
with the listed exceptions; docs/testing.md, "Test tiers"): `pytest -m "not slow"` is every
unit test and the exceptions that are fast, and nothing else; every other test carries what
it needs.

The whole suite is collected once, in this process, with `-m "not slow"` (pytest.main, as
pytester's inline runs do, but without their restoring of sys.modules, which would import
numpy a second time for the Spark tests' modules): the test modules a run has already
imported are not imported again, so inside a run of the suite it costs little more than the
hooks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import FOLDER_MARKS, TIER_EXCEPTIONS

TESTS = Path(__file__).resolve().parents[1]
TIER_MARKERS = {"slow", "cluster", "root", "java", "spark", "kafka"}
CLOCKS = ("autojump_clock", "mock_clock")


class Collected:
    """What a collection selected and deselected, recorded by its hooks."""

    def __init__(self) -> None:
        self.selected: list[pytest.Item] = []
        self.deselected: list[pytest.Item] = []

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.extend(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = list(session.items)


@pytest.fixture(scope="module")
def fast_tier() -> Collected:
    collected = Collected()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTEST_ADDOPTS", raising=False)  # `-n 2` there would start workers
        exit_code = pytest.main(
            [
                "--collect-only",
                "-qq",
                "-p",
                "no:cacheprovider",
                "-n0",  # in this process: pyproject's addopts would start workers
                "--rootdir",
                str(TESTS.parent),
                "-m",
                "not slow",
                str(TESTS),
            ],
            plugins=[collected],
        )
    assert exit_code == pytest.ExitCode.OK
    return collected


def tier(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()} & TIER_MARKERS


def where(nodeid: str) -> tuple[str, str]:
    """("unit/test_x.py", "test_name") of "tests/unit/test_x.py::test_name[param]"."""
    module, _, name = nodeid.removeprefix("tests/").partition("::")
    return module, re.sub(r"\[.*\]$", "", name)


def exception_of(nodeid: str) -> tuple[str, ...] | None:
    module, name = where(nodeid)
    found = TIER_EXCEPTIONS.get(f"{module}::{name}") or TIER_EXCEPTIONS.get(module)
    return None if found is None else found[0]


def test_not_slow_is_the_unit_tests_and_the_fast_exceptions_and_nothing_else(fast_tier):
    every = {item.nodeid: tier(item) for item in fast_tier.selected + fast_tier.deselected}
    fast = [item.nodeid for item in fast_tier.selected]

    assert fast, "the fast tier is empty"
    assert set(fast) == {nodeid for nodeid, marks in every.items() if "slow" not in marks}
    unit = {nodeid for nodeid in every if nodeid.startswith("tests/unit/")}
    slow_in_unit = {nodeid for nodeid in unit if "slow" in (exception_of(nodeid) or ())}
    assert unit - slow_in_unit <= set(fast), "a unit test is missing from the fast tier"
    assert not slow_in_unit & set(fast)
    outside = {nodeid for nodeid in fast if not nodeid.startswith("tests/unit/")}
    assert all(exception_of(nodeid) == () for nodeid in outside), sorted(
        nodeid for nodeid in outside if exception_of(nodeid) != ()
    )

    # Every other folder's tests are slow and carry what the folder needs.
    for nodeid, marks in every.items():
        folder = where(nodeid)[0].split("/")[0]
        expected = exception_of(nodeid)
        expected = FOLDER_MARKS[folder] if expected is None else expected
        assert set(expected) <= marks, f"{nodeid}: {sorted(marks)}, not {expected}"
    # Each exception names a module, or a test of a module, that exists (read from the files:
    # a folder whose conftest skips it, tests/spark without Java, collects nothing).
    stale = [key for key in TIER_EXCEPTIONS if not names_a_test(key)]
    assert not stale, f"exceptions naming no test: {stale}"

    # Some known cases, whatever the tables say.
    assert "tests/unit/test_partition.py::test_high_watermark_never_moves_back" in fast
    isr = (
        "tests/cluster/test_isr.py::test_isr_shrinks_refuses_acks_all_below_min_insync_and_expands"
    )
    assert every[isr] == {"slow", "cluster"}
    kafka = "tests/java/test_clients.py::test_same_answers_as_kafka"
    assert every[kafka] == {"slow", "cluster", "java", "kafka"}
    compose = "tests/deploy/test_deploy.py::test_prometheus_scrapes_the_compose_cluster"
    assert every[compose] == {"slow", "cluster", "root"}
    assert not any(nodeid.startswith(("tests/cluster/", "tests/java/")) for nodeid in fast)


def names_a_test(key: str) -> bool:
    module, _, name = key.partition("::")
    path = TESTS / module
    if not path.is_file():
        return False
    return not name or re.search(rf"^(async )?def {name}\(", path.read_text(), re.M) is not None


def test_no_fast_test_takes_its_clock_through_a_fixture_only(fast_tier):
    """pytest-trio runs a test on the MockClock among the test's own arguments only: a clock
    that only a fixture asks for leaves the test on the real clock, where its timeouts are
    waited out for real and a fetcher that never waits can spin for ever."""
    unclocked = [
        item.nodeid
        for item in fast_tier.selected
        for clock in CLOCKS
        if clock in item.fixturenames and clock not in item._fixtureinfo.argnames
    ]
    assert not unclocked, f"give these tests the clock as an argument: {unclocked}"
