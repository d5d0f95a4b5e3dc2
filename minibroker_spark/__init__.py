"""Read and write Kafka topics (minibroker's or any Kafka cluster's) from PySpark, as Spark's
Kafka source does, with the Python Data Source API: `spark.read.format("minibroker")`.

Spark finds the source by itself through the top-level module `pyspark_minibroker`; where
that module is not on the Python workers' path, `register(spark)` does it explicitly.
"""

from minibroker.spark.source import DefaultSource

__all__ = ["DefaultSource", "register"]


def register(spark) -> None:
    """Register the `minibroker` format with this session (only needed where Spark's
    discovery of `pyspark_*` modules does not see this package)."""
    spark.dataSource.register(DefaultSource)
