"""Spark's data source discovery finds this module (its name starts with `pyspark_`).

It lives alone in this folder, which is installed as the top level (pyproject's package-dir
""), so that `import minibroker.spark` can put this folder, and nothing else, on the Python
workers' path where an editable install's import hook hides the module from the
`pkgutil.iter_modules()` that Spark's discovery runs (see minibroker.spark)."""

from minibroker.spark import DefaultSource

__all__ = ["DefaultSource"]
