"""Run confluent-kafka-python's own integration tests (all but the share-consumer and
schema-registry ones, which have their own scripts) against minibroker. Issue 34.

Not collected by pytest (its name does not start with ``test_``); run it by hand from the
repository root with the project's venv:

    .venv/bin/python tests/compat/confluent_kafka_integration_suite.py
    .venv/bin/python tests/compat/confluent_kafka_integration_suite.py -- -k test_transactions

Everything after ``--`` goes to the suite's pytest. The environment is that of
``confluent_kafka_share_suite.py`` (CK_GIT, CK_REF, CK_CACHE, CK_BROKERS), whose source, venv,
broker configs and stand-in ``KAFKA_HOME`` this script shares, and:

    CK_KAFKA_TOOL  the ``minibroker`` whose ``kafka`` command runs Kafka's kafka-configs for
                   the stand-in KAFKA_HOME (default: this venv's; an older checkout without
                   that command can borrow another's)

What it runs: ``tests/integration`` of that tag less ``share_consumer*`` (see
confluent_kafka_share_suite.py) and ``schema_registry`` (confluent_kafka_registry_suite.py).
``serialization`` uses the schema registry: it runs only when the broker serves one
(``minibroker.testing.Cluster(schema_registry=True)``), and is said to be left out otherwise.
The cluster is 3 brokers with the suite's own broker configs (``TestUtils.broker_conf()``, less
those meant for its one broker) and trivup's authorizer settings, handed to the suite through
``BROKERS`` (its ``ByoFixture``).
Per test a 180 s pytest-timeout; a JUnit report and the cluster's logs stay in
``CK_CACHE/runs/integration-<time>/``. The exit code is pytest's.
"""

from __future__ import annotations

import inspect
import os
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
from confluent_kafka_share_suite import suite_broker_conf  # noqa: E402

TIMEOUT_PER_TEST = 180
LEFT_OUT = ("share_consumer", "share_consumer_sasl", "share_consumer_oauth", "schema_registry")


def say(message: str) -> None:
    print(f"confluent_kafka_integration_suite: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    extra, version, ref, tree, python, run = prepare(
        argv, f"{time.strftime('integration-%Y%m%dT%H%M%S')}-{os.getpid()}"
    )
    report = run / "junit.xml"

    from minibroker.testing import Cluster

    with_registry = "schema_registry" in inspect.signature(Cluster).parameters
    left_out = LEFT_OUT if with_registry else (*LEFT_OUT, "serialization")
    integration = tree / "tests" / "integration"
    suite = sorted(
        str(path.relative_to(tree))
        for path in integration.iterdir()
        if path.name not in left_out
        and (
            path.is_dir() and path.name != "__pycache__" or path.name.startswith("integration_test")
        )
    )
    brokers = int(os.environ.get("CK_BROKERS", "3"))
    say(f"confluent-kafka {version}, the tests of {ref}; {brokers} brokers; logs in {run}")
    say(f"running {' '.join(suite)}; left out: {' '.join(left_out)}")
    # The authorizer of the Kafka the suite starts (trivup 0.15's KafkaBrokerApp: the
    # StandardAuthorizer, super.users=User:admin, allow.everyone.if.no.acl.found=true);
    # test_basic_operations creates and deletes ACLs.
    properties = {
        **suite_broker_conf(python, tree),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "true",
    }
    say(f"the suite's broker configs: {properties}")
    cluster_args = {"schema_registry": True} if with_registry else {}
    with Cluster(
        brokers=brokers, data_dir=run / "cluster", server_properties=properties, **cluster_args
    ) as cluster:
        env = {
            **os.environ,
            "BROKERS": cluster.bootstrap_servers,
            "PYTHONPATH": str(tree),
            "KAFKA_HOME": str(kafka_home(run)),
        }
        if with_registry:
            env["SR_URL"] = cluster.schema_registry_url
        say(f"BROKERS={env['BROKERS']}")
        code = run_pytest(python, tree, env, suite, report, TIMEOUT_PER_TEST, extra)
    if report.exists():
        summarise(report)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
