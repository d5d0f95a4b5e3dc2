"""Iceberg topics (issue 38, docs/iceberg-topics.md): a topic's records in an Apache Iceberg
table, written exactly once by the leader of each of its partitions.

- ``translation``: the pure core (which offsets to write next, the commit bookkeeping, the
  records of a read turned into rows), no I/O, time passed in;
- ``table``: the blocking part on pyiceberg and pyarrow (catalog, table, conditional
  commits), never run on the event loop;
- ``writer_process``: that blocking part behind one object, and the loop of the writer
  process that serves it; ``writer``: where it runs, a process of its own per node or (for
  in-process tests) a worker thread, with one interface;
- ``service``: the thin trio shell on the partition leader and its metrics.
"""
