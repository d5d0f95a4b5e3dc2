"""A pytest plugin for confluent-kafka-python's schema-registry integration tests run against
minibroker by ``confluent_kafka_registry_suite.py`` (loaded there with ``-p``; it runs in the
suite's own venv, so it imports nothing of minibroker).

The suite takes a cluster it did not start through its ``ByoFixture`` (``BROKERS`` and
``SR_URL``). Two things it lacks for that, added here without changing a test:

- ``ByoFixture.async_schema_registry``: the suite's async half asks the cluster fixture for an
  ``AsyncSchemaRegistryClient``, which only ``TrivupFixture`` (the cluster the suite starts
  itself) provides. It is given the same method as ``TrivupFixture``'s, on ``SR_URL``.
- tests that need a second, older Confluent Schema Registry are left out (deselected, and
  named with the reason in the run's header): see ``NOT_APPLICABLE``.
"""

from __future__ import annotations

import os

import pytest

# test id (as pytest names it, below tests/integration/schema_registry/) -> why it does not apply
NOT_APPLICABLE = {
    "test_api_get_register_schema_invalid[kafka_cluster_cp_7_0_1-500-500]": (
        "needs a Confluent Schema Registry 7.0.1 (BROKERS_7_0_1/SR_URL_7_0_1 or a trivup"
        " cluster of that version): it checks that old release's 500 for an invalid schema,"
        " where 7.0.2 and later (and minibroker) answer 422"
    ),
}


def pytest_configure(config: pytest.Config) -> None:
    from confluent_kafka.schema_registry._async.schema_registry_client import (
        AsyncSchemaRegistryClient,
    )

    from tests.integration.cluster_fixture import ByoFixture

    if not hasattr(ByoFixture, "async_schema_registry"):

        def async_schema_registry(self, conf=None):
            if self._sr_url is None:
                raise RuntimeError("No Schema-registry available in Byo cluster")
            sr_conf = {"url": self._sr_url}
            if conf is not None:
                sr_conf.update(conf)
            return AsyncSchemaRegistryClient(sr_conf)

        ByoFixture.async_schema_registry = async_schema_registry


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"minibroker: BROKERS={os.environ.get('BROKERS')} SR_URL={os.environ.get('SR_URL')}"]
    lines += [f"not applicable: {name}: {why}" for name, why in NOT_APPLICABLE.items()]
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, left_out = [], []
    for item in items:
        (left_out if item.name in NOT_APPLICABLE else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
