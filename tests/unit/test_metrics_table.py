"""The Metrics table of the docs (docs/compose-and-metrics.md) names every metric of the
broker's registry (its counters) and of the connection collector.
(The other collectors of live state, which need a running
broker, are not checked here.)"""

from minibroker.common.metrics import BrokerMetrics
from minibroker.node.connection_limits import ConnectionQuotas, MemoryPool
from minibroker.node.metrics import ConnectionCollector
from tests.readme import section_text

PAGE = "docs/compose-and-metrics.md"


def test_every_registered_and_connection_metric_is_in_the_readme_table():
    table = section_text("Metrics", PAGE)
    metrics = BrokerMetrics()
    names = [
        family.name
        for family in metrics.registry.collect()
        if not family.name.startswith(("process_", "python_"))
    ]
    quotas = ConnectionQuotas()
    quotas.admit("PLAINTEXT", "127.0.0.1")
    names += [family.name for family in ConnectionCollector(quotas, MemoryPool(10)).collect()]
    assert "minibroker_connections_closed" in names
    assert "kafka_network_socketserver_memorypoolused" in names
    missing = [name for name in names if f"`{name}" not in table]
    assert not missing, f"metrics not in the Metrics table of {PAGE}: {missing}"
