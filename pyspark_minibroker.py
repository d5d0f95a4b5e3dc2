"""Spark's data source discovery finds this module (its name starts with `pyspark_`)."""

from minibroker.spark import DefaultSource

__all__ = ["DefaultSource"]
