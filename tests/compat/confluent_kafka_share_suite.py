"""Run confluent-kafka-python's own share-consumer integration tests against minibroker. Issue 35.

Not collected by pytest (its name does not start with ``test_``); run it by hand from the
repository root with the project's venv:

    .venv/bin/python tests/compat/confluent_kafka_share_suite.py
    .venv/bin/python tests/compat/confluent_kafka_share_suite.py -- -k test_share_consumer_ack -x

Everything after ``--`` goes to the suite's pytest. Environment (all optional), as for
``confluent_kafka_registry_suite.py``, whose source and venv this script shares:

    CK_GIT      where confluent-kafka-python's git history comes from: a bare git dir or a URL
                (default https://github.com/confluentinc/confluent-kafka-python.git)
    CK_REF      the tag to run (default: v<the venv's confluent-kafka>; when CK_GIT has no such
                tag, the newest release tag below it, said on stderr)
    CK_CACHE    source, the suite's venv and each run's logs go here
                (default ~/.cache/minibroker-confluent-kafka-python)
    CK_BROKERS  brokers in the cluster (default 3)

What it does, in order:

1. extracts ``tests/`` of that tag into the cache and makes the suite's venv (the same
   confluent-kafka as the project's venv, pytest, pytest-timeout, the trivup the tests ship),
   as the registry suite does; the project venv is not touched.
2. starts a minibroker cluster (``minibroker.testing.Cluster``, 3 brokers, the schema registry
   on every broker; share groups are on in a new cluster, ``share.version`` 2, as in a new
   Kafka 4.4 cluster) with the broker configs the suite gives the Kafka it starts
   (``TestUtils.broker_conf()``: a 1 s acquisition lock), less those meant for its one
   broker, and hands it to the suite the way the suite takes a cluster it did not start: its
   ``ByoFixture``, through ``BROKERS`` (the bootstrap servers) and ``SR_URL`` (the registry
   URLs; the deserialization tests use the registry).
3. gives the suite a stand-in ``KAFKA_HOME`` (in the run's directory) whose
   ``bin/kafka-configs.sh`` runs Kafka 4.4's kafka-configs through ``minibroker kafka`` (the
   jars of ``java/fetch.sh``): the throttle-callback tests set a client quota with it, and
   skip themselves without it.
4. runs ``pytest tests/integration/share_consumer`` with a JUnit XML report, then prints the
   counts and the failures grouped by their error's first line. The cluster's logs and the
   report stay in ``CK_CACHE/runs/share-<time>/``. No test is changed and none is left out.

Not run: ``tests/integration/share_consumer_sasl`` and ``share_consumer_oauth``. Their
fixtures always start a trivup Kafka (a SASL/PLAIN one, an OAUTHBEARER one), with no way to
hand them a cluster; see docs/compatibility.md.

The exit code is pytest's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from confluent_kafka_registry_suite import (  # noqa: E402
    kafka_home,
    prepare,
    run_pytest,
    summarise,
)

SUITE = "tests/integration/share_consumer"
TIMEOUT_PER_TEST = 180


def say(message: str) -> None:
    print(f"confluent_kafka_share_suite: {message}", file=sys.stderr, flush=True)


def suite_broker_conf(python: Path, tree: Path) -> dict[str, str]:
    """The broker configs the suite gives the Kafka it starts (``TestUtils.broker_conf()``),
    without those that only fit its one broker (the internal topics' replication factor and
    min.insync.replicas at 1): here three brokers keep Kafka's defaults for those. What is
    left is the suite's 1 s acquisition lock (``group.share.record.lock.duration.ms`` and the
    minimum that allows it), which its lock-expiry tests rely on."""
    printed = subprocess.run(
        [
            str(python),
            "-c",
            "from tests.common import TestUtils; print(chr(10).join(TestUtils.broker_conf()))",
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    conf = dict(line.split("=", 1) for line in printed.splitlines() if "=" in line)
    single_broker = (".replication.factor", ".min.isr")
    return {key: value for key, value in conf.items() if not key.endswith(single_broker)}


def main(argv: list[str]) -> int:
    extra, version, ref, tree, python, run = prepare(argv, time.strftime("share-%Y%m%dT%H%M%S"))
    report = run / "junit.xml"

    from minibroker.testing import Cluster

    brokers = int(os.environ.get("CK_BROKERS", "3"))
    say(f"confluent-kafka {version}, the tests of {ref}; {brokers} brokers; logs in {run}")
    properties = suite_broker_conf(python, tree)
    say(f"the suite's broker configs: {properties}")
    with Cluster(
        brokers=brokers,
        data_dir=run / "cluster",
        schema_registry=True,
        server_properties=properties,
    ) as cluster:
        env = {
            **os.environ,
            "BROKERS": cluster.bootstrap_servers,
            "SR_URL": cluster.schema_registry_url,
            "PYTHONPATH": str(tree),
            "KAFKA_HOME": str(kafka_home(run)),
        }
        say(f"BROKERS={env['BROKERS']} SR_URL={env['SR_URL']}")
        code = run_pytest(python, tree, env, [SUITE], report, TIMEOUT_PER_TEST, extra)
    if report.exists():
        summarise(report)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
