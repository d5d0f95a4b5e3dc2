"""Run confluent-kafka-python's own schema-registry integration tests against minibroker. Issue 37.

Not collected by pytest (its name does not start with ``test_``); run it by hand from the
repository root with the project's venv:

    .venv/bin/python tests/compat/confluent_kafka_registry_suite.py
    .venv/bin/python tests/compat/confluent_kafka_registry_suite.py -- -k test_api_ -x

Everything after ``--`` goes to the suite's pytest. Environment (all optional):

    CK_GIT      where confluent-kafka-python's git history comes from: a bare git dir or a URL
                (default https://github.com/confluentinc/confluent-kafka-python.git)
    CK_REF      the tag to run (default: v<the venv's confluent-kafka>; when CK_GIT has no such
                tag, the newest release tag below it, said on stderr)
    CK_CACHE    source, the suite's venv and each run's logs go here
                (default ~/.cache/minibroker-confluent-kafka-python)
    CK_BROKERS  brokers in the cluster (default 3)

What it does, in order:

1. extracts ``tests/`` of that tag (``git archive``) into the cache. The sdist on PyPI holds
   no tests, so the source is the git history.
2. makes a venv of the suite's own in the cache, once per confluent-kafka version:
   ``confluent-kafka[avro,json,protobuf,schemaregistry]`` at the project venv's version,
   pytest, pytest-asyncio (the async half of the suite is ``async def`` tests in asyncio's
   auto mode, as the upstream pyproject sets it), pytest-timeout, and the trivup that the
   tests ship (``tests/trivup``; ``cluster_fixture.py`` imports it at module level, though
   nothing here starts a trivup cluster). The project venv is not touched.
3. starts a minibroker cluster (``minibroker.testing.Cluster``, 3 brokers, the registry on
   every broker) and hands it to the suite the way the suite takes a cluster it did not start:
   its ``ByoFixture`` (``BROKERS`` and ``SR_URL``, every broker's registry URL, comma
   separated, so that the client may use any of them).
4. runs ``pytest tests/integration/schema_registry`` with this file's directory on the path
   and ``-p confluent_kafka_registry_plugin`` (see that module for what it adds and leaves
   out), a JUnit XML report, then prints the counts and the failures grouped by their error's
   first line. The cluster's logs and the report stay in ``CK_CACHE/runs/<time>/``.

The exit code is pytest's.
"""

from __future__ import annotations

import collections
import importlib.metadata
import os
import re
import subprocess
import sys
import time
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_GIT = "https://github.com/confluentinc/confluent-kafka-python.git"
SUITE = "tests/integration/schema_registry"
TIMEOUT_PER_TEST = 120


def say(message: str) -> None:
    print(f"confluent_kafka_registry_suite: {message}", file=sys.stderr, flush=True)


def git(gitdir: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], check=True, **kwargs)


def release_key(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag[1:].split("."))


def choose_ref(gitdir: Path, version: str) -> str:
    wanted = f"v{version}"
    tags = git(gitdir, "tag", "-l", "v*", capture_output=True, text=True).stdout.split()
    releases = [tag for tag in tags if re.fullmatch(r"v\d+\.\d+\.\d+", tag)]
    if wanted in releases:
        return wanted
    below = sorted(
        (tag for tag in releases if release_key(tag) < release_key(wanted)), key=release_key
    )
    if not below:
        raise SystemExit(f"no tag {wanted} nor an older release tag in {gitdir}")
    say(f"{wanted} is not in {gitdir}: running the tests of {below[-1]}, the newest release below")
    return below[-1]


def source(cache: Path, version: str) -> tuple[str, Path]:
    origin = os.environ.get("CK_GIT", DEFAULT_GIT)
    gitdir = cache / "confluent-kafka-python.git"
    if not gitdir.is_dir():
        filters = [] if Path(origin).is_dir() else ["--filter=blob:none"]
        subprocess.run(["git", "clone", "-q", "--bare", *filters, origin, str(gitdir)], check=True)
    ref = os.environ.get("CK_REF") or choose_ref(gitdir, version)
    tree = cache / f"src-{ref}"
    if not (tree / ".extracted").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = git(gitdir, "archive", ref, "tests", capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        (tree / ".extracted").touch()
    return ref, tree


def suite_venv(cache: Path, version: str, tree: Path) -> Path:
    home = cache / f"venv-{version}"
    python = home / "bin" / "python"
    marker = home / ".installed"
    if marker.exists():
        return python
    say(f"making the suite's venv in {home}")
    venv.create(home, with_pip=True, clear=True)
    trivup = sorted((tree / "tests" / "trivup").glob("trivup-*.tar.gz"))
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            f"confluent-kafka[avro,json,protobuf,schemaregistry]=={version}",
            "pytest",
            "pytest-asyncio",
            "pytest-timeout",
            *(str(path) for path in trivup[-1:]),
        ],
        check=True,
    )
    marker.touch()
    return python


def summarise(report: Path) -> None:
    """The counts and the failures grouped by the first line of their message."""
    root = ET.parse(report).getroot()
    counts: collections.Counter[str] = collections.Counter()
    classes: dict[str, list[str]] = collections.defaultdict(list)
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or child.text or "").strip().splitlines()
                reason = message[0][:160] if message else "(no message)"
                classes[reason].append(name)
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
    total = sum(counts.values())
    outcomes = ("passed", "failed", "error", "skipped")
    print(f"\n{total} tests: " + ", ".join(f"{counts[k]} {k}" for k in outcomes))
    for reason, names in sorted(classes.items(), key=lambda item: -len(item[1])):
        print(f"\n{len(names)} x {reason}")
        for name in names:
            print(f"    {name}")


def prepare(argv: list[str], run_name: str) -> tuple[list[str], str, str, Path, Path, Path]:
    """What each of the three suite scripts starts with: the arguments after ``--`` (for
    pytest), the venv's confluent-kafka version, the suite's tag and tree (fetched into
    CK_CACHE), the suite's venv's python, and this run's directory ``runs/<run_name>``."""
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    version = importlib.metadata.version("confluent-kafka")
    default_cache = Path.home() / ".cache" / "minibroker-confluent-kafka-python"
    cache = Path(os.environ.get("CK_CACHE", default_cache))
    cache.mkdir(parents=True, exist_ok=True)
    ref, tree = source(cache, version)
    python = suite_venv(cache, version, tree)
    run = cache / "runs" / run_name
    run.mkdir(parents=True)
    return extra, version, ref, tree, python, run


def run_pytest(
    python: Path,
    tree: Path,
    env: dict[str, str],
    targets: list[str],
    report: Path,
    timeout_s: int,
    extra: list[str],
    options: tuple[str, ...] = (),
) -> int:
    """The suite's pytest in its own venv, from its tree, with a JUnit report; its exit code
    (the three confluent-kafka suite scripts run it so)."""
    command = [
        str(python),
        "-m",
        "pytest",
        *targets,
        *options,
        "-p",
        "no:cacheprovider",
        f"--timeout={timeout_s}",
        f"--junitxml={report}",
        "-q",
        "-rfE",
        *extra,
    ]
    started = time.monotonic()
    code = subprocess.run(command, cwd=tree, env=env).returncode
    print(f"the suite took {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    return code


def kafka_home(run: Path) -> Path:
    """A directory that looks enough like Kafka's distribution for the suites'
    ``_resolve_kafka_configs_sh``: ``bin/kafka-configs.sh`` runs Kafka's tool through
    ``minibroker kafka`` (of CK_KAFKA_TOOL, by default this venv's)."""
    home = run / "kafka-home"
    script = home / "bin" / "kafka-configs.sh"
    script.parent.mkdir(parents=True)
    tool = os.environ.get("CK_KAFKA_TOOL") or str(Path(sys.executable).with_name("minibroker"))
    script.write_text(f'#!/bin/sh\nexec "{tool}" kafka kafka-configs "$@"\n')
    script.chmod(0o755)
    return home


def main(argv: list[str]) -> int:
    extra, version, ref, tree, python, run = prepare(argv, time.strftime("%Y%m%dT%H%M%S"))
    report = run / "junit.xml"

    from minibroker.testing import Cluster

    brokers = int(os.environ.get("CK_BROKERS", "3"))
    say(f"confluent-kafka {version}, the tests of {ref}; {brokers} brokers; logs in {run}")
    with Cluster(brokers=brokers, data_dir=run / "cluster", schema_registry=True) as cluster:
        env = {
            **os.environ,
            "BROKERS": cluster.bootstrap_servers,
            "SR_URL": cluster.schema_registry_url,
            "PYTHONPATH": os.pathsep.join([str(tree), str(HERE)]),
        }
        say(f"BROKERS={env['BROKERS']} SR_URL={env['SR_URL']}")
        options = ("-p", "confluent_kafka_registry_plugin", "-o", "asyncio_mode=auto")
        code = run_pytest(python, tree, env, [SUITE], report, TIMEOUT_PER_TEST, extra, options)
    if report.exists():
        summarise(report)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
