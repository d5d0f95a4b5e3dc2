"""Real minibroker clusters for the tests of applications that use Kafka.

``from minibroker.testing import Cluster`` starts one (see minibroker.testing.cluster); the
pytest plugin (minibroker.testing.plugin, registered through the ``pytest11`` entry point)
gives the fixtures ``kafka_broker`` and ``kafka_cluster``.

The names are loaded on first use (PEP 562): pytest imports this package for the plugin in
every run where minibroker is installed, and most runs never start a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name in __all__:
        from minibroker.testing import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
