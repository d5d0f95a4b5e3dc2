"""Real minibroker clusters for the tests of applications that use Kafka.

``from minibroker.testing import Cluster`` starts one (see minibroker.testing.cluster); the
pytest plugin (minibroker.testing.plugin, registered through the ``pytest11`` entry point)
gives the fixtures ``kafka_broker`` and ``kafka_cluster``.
"""

from minibroker.testing.cluster import (
    Cluster,
    ClusterError,
    ClusterStartError,
    NodeNotRunningError,
    UnknownNodeError,
)

__all__ = [
    "Cluster",
    "ClusterError",
    "ClusterStartError",
    "NodeNotRunningError",
    "UnknownNodeError",
]
