"""How the suite runs in parallel (docs/testing.md, "Running in parallel").

pyproject.toml's addopts run every `pytest` with pytest-xdist (`-n auto --dist loadfile`);
tests/conftest.py's hooks then decide, with what is here:

- how many workers `-n auto` means: WORKERS, or MINIBROKER_TEST_WORKERS; none (one process,
  as without xdist) when the command line names tests of one file only;
- what goes to one worker: a test file, as `--dist loadfile` does, so that a module-scoped
  cluster is started once; except the files of one SHARED_WORKER group, which go together to
  one worker (they share a session-scoped fixture, or must not run at the same time); the
  first entry that matches a file decides;
- in which order: the longest units first (FOLDER_ORDER), so that no worker is left with a
  long file at the end while the others are done.

`-n0` runs in one process, as before (not `-p no:xdist`: addopts' `-n` needs xdist).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

# Most of the suite waits on brokers, clients and JVMs in other processes, so more workers than
# the 2 cores may pay (docs/testing.md; three against two and four not yet measured).
WORKERS = 3
WORKERS_VARIABLE = "MINIBROKER_TEST_WORKERS"

# Files that run on one worker, one after the other, and why. Paths relative to tests/.
SHARED_WORKER: dict[str, tuple[str, str]] = {
    # One Spark session per worker (tests/spark/conftest.py's session-scoped `spark`), and
    # every Spark JVM (sessions of the job scripts and of Spark's own connector) at a time:
    # two at once on 2 cores slow each other past their deadlines.
    "spark/": ("spark", "one Spark session for the folder; one Spark JVM at a time"),
    "java/test_spark_kafka.py": ("spark", "a Spark session with Spark's own Kafka connector"),
    # 3-broker clusters on timeouts ten to twenty times shorter than Kafka's (1.5 s sessions,
    # tests/cluster/conftest.py's CLUSTER_OVERRIDES, which the Java tests' clusters use too):
    # with two or three of them at once on 2 cores, beside other work, brokers were fenced and
    # tests failed (docs/testing.md), so these files run one after the other on one worker.
    "cluster/": ("clusters", "3-broker clusters on short timeouts, one at a time"),
    "java/": ("clusters", "3-broker clusters on short timeouts and JVM clients, one at a time"),
}

# Units in this order of their folder (a folder's units by their number of tests, most first):
# the long ones go first.
FOLDER_ORDER = (
    "spark",
    "faults",
    "java",
    "deploy",
    "bench",
    "cluster",
    "integration",
    "testing",
    "unit",
)

TESTS = Path(__file__).resolve().parent


def worker_count(args: list[str], invocation_dir: Path, markexpr: str = "") -> int:
    """What `-n auto` means for this command line (its paths relative to `invocation_dir`):
    no worker for the fast tier (`-m "not slow"`), tests/unit or the tests of one file, which
    run on the CPU in this process: there, workers that each collect the whole suite cost more
    than they save on 2 cores (docs/testing.md)."""
    if (configured := os.environ.get(WORKERS_VARIABLE)) is not None:
        return int(configured)
    if "not slow" in markexpr:
        return 0
    files = set()
    in_unit = True
    for arg in args:
        if arg.startswith("-"):
            continue
        path = Path(arg.split("::", 1)[0])
        path = (invocation_dir / path).resolve()
        in_unit = in_unit and path.is_relative_to(TESTS / "unit")
        if path.is_file():
            files.add(path)
        else:
            files.add(None)  # a folder (or the default testpaths): many files
    return 0 if in_unit or files == set() or len(files) == 1 and None not in files else WORKERS


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or its file's SHARED_WORKER group."""
    file = nodeid.split("::", 1)[0]
    relative = file.removeprefix("tests/")
    for prefix, (group, _) in SHARED_WORKER.items():
        if relative == prefix or (prefix.endswith("/") and relative.startswith(prefix)):
            return f"group:{group}"
    return file


def folder_rank(unit: str) -> int:
    if unit.startswith("group:"):
        return 0
    parts = unit.removeprefix("tests/").split("/")
    return FOLDER_ORDER.index(parts[0]) if parts[0] in FOLDER_ORDER else len(FOLDER_ORDER)


def make_scheduler(config, log):
    """--dist loadfile's scheduler, with SHARED_WORKER's groups and the longest units first."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:
                self.ordered = True
                self.workqueue = OrderedDict(
                    sorted(
                        self.workqueue.items(),
                        key=lambda unit: (folder_rank(unit[0]), -len(unit[1])),
                    )
                )
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)
