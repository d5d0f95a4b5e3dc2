"""Read and write Kafka topics (minibroker's or any Kafka cluster's) from PySpark, as Spark's
Kafka source does, with the Python Data Source API: `spark.read.format("minibroker")`.

Spark finds the source by itself through the top-level module `pyspark_minibroker`; where
that module is not on the Python workers' path, `register(spark)` does it explicitly.

Which Python Spark's workers run. Spark starts its Python workers (the one that discovers the
`pyspark_*` sources, the planners and the readers and writers) with `$PYSPARK_PYTHON`, else
`python3` from PATH, not with the interpreter of the job: Spark 4's JVM reads the variable once,
when its `PythonUtils` class loads (`PYSPARK_DRIVER_PYTHON`, then `PYSPARK_PYTHON`, then
`python3`) and uses that for discovered sources, and PySpark's SparkContext copies
`PYSPARK_PYTHON` (default `python3`) into every function it registers; the configuration key
`spark.pyspark.python` is read by neither on this path (it is for `spark-submit`'s own Python
launcher). A job run as `.venv/bin/python job.py`, venv not activated, then has its workers
start a Python that has neither this package nor its dependencies: DATA_SOURCE_NOT_FOUND, or
"No module named 'minibroker'" after `register(spark)`. So importing this package sets
`PYSPARK_PYTHON` to the interpreter it runs in when the user has set neither variable; the
JVM, started later by the session's builder, inherits it, and both discovery and registration
use it. A variable the user set is never changed. For a session started before this import,
`register(spark)` registers the source to run in this interpreter (see there).

Discovery runs `pkgutil.iter_modules()` in a worker, which lists the modules of the folders on
its path; an editable install (`pip install -e .`, the README's) serves `pyspark_minibroker`
through an import hook instead, which that listing does not see. When the workers run this
interpreter and the module is not in one of its site-packages folders, importing this package
also appends the module's own folder (`minibroker_spark/discovery`, which holds nothing else)
to `PYTHONPATH`, which Spark passes on to its workers.
"""

import os
import shutil
import site
import sys
from importlib.util import find_spec
from pathlib import Path


def _workers_use_this_interpreter() -> None:
    """Default `PYSPARK_PYTHON` to this interpreter, and make the discovery module visible
    to the workers' discovery where an editable install hides it (see the module's doc)."""
    if not os.environ.get("PYSPARK_PYTHON") and not os.environ.get("PYSPARK_DRIVER_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
    workers = os.environ.get("PYSPARK_DRIVER_PYTHON") or os.environ.get("PYSPARK_PYTHON", "")
    # The same environment: the same bin folder (.venv/bin/python3 is .venv/bin/python's).
    here = Path(sys.executable).absolute().parent
    if Path(shutil.which(workers) or workers).absolute().parent != here:
        return  # another interpreter, the user's choice: its path is the user's too
    spec = find_spec("pyspark_minibroker")
    if spec is None or spec.origin is None:
        return
    folder = str(Path(spec.origin).resolve().parent)
    site_folders = {
        str(Path(p).resolve()) for p in [*site.getsitepackages(), site.USER_SITE or ""] if p
    }
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in site_folders and folder not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, folder])


_workers_use_this_interpreter()

from minibroker.spark.source import DefaultSource  # noqa: E402 (after the interpreter is set)

__all__ = ["DefaultSource", "register"]


def register(spark) -> None:
    """Register the `minibroker` format with this session (only needed where Spark's
    discovery of `pyspark_*` modules does not see this package, e.g. a session started before
    `minibroker.spark` was imported, whose JVM looks for sources with `python3` from PATH).

    PySpark registers a Python data source to run in the SparkContext's `pythonExec`, which
    it took from `PYSPARK_PYTHON` when the context started (default `python3`). Unless the
    user chose an interpreter (`PYSPARK_PYTHON` set when the context started), the source is
    registered to run in this interpreter, the one that has this package; the context's own
    setting is put back afterwards, so the user's UDFs run where they ran before."""
    context = spark.sparkContext
    chosen = context.pythonExec
    if chosen == "python3" and os.environ.get("PYSPARK_PYTHON") in (None, "", sys.executable):
        context.pythonExec = sys.executable
    try:
        spark.dataSource.register(DefaultSource)
    finally:
        context.pythonExec = chosen
