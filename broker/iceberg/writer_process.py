"""The blocking half of Iceberg topics, as one object (``Tables``) and the loop of the writer
process that serves it (``serve``): the catalog, each topic's table (table.py), the commits
(record decoding, Arrow columns, Parquet files, pyiceberg's catalog commit), maintenance and
drops. No trio here: the service (service.py) calls ``Tables`` either in a worker thread of
the broker (``writer.ThreadWriter``, in-process tests) or, in a broker node, in a process of
its own (``writer.ProcessWriter``) over a socket pair, with this module's framing.

Kafka has no Iceberg topics; Redpanda translates in its broker's own threads (C++, no global
lock). A Python thread holds the interpreter's lock while it decodes records and builds
manifests, and the event loop that serves every client of the broker waits for it meanwhile
(docs/iceberg-topics.md, "What translation costs the broker"); a process of its own does not.

The channel (``send``/``receive``): a frame is a header (the pickled message's length, how many
raw blobs follow, each one's length), the pickled message (protocol 5), then the blobs as they
are (the record batches a commit carries: not pickled, not copied again by pickle). Messages,
broker to writer: ``("call", id, op, args)`` (one at a time: the next is sent after the answer),
``("stop", handle_id)`` (the topic was deleted: ``TopicTable.stop``, acted on at once by the
reading thread, while a call runs; ``("noop",)`` carries stops alone), ``("schema", id,
found)`` (the answer to a schema question);
writer to broker: ``("ready", pid)``, ``("done", id, value)``, ``("failed", id, error)``,
``("schema?", id, schema_id)`` (value_schema_id_prefix: the registry is the broker's, in its
event loop, so the writer asks it while the commit waits).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import queue
import signal
import socket
import struct
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minibroker.iceberg.translation import CommitOutcome, CommitPlan, ReadChunk, TableStopped

if TYPE_CHECKING:
    from minibroker.iceberg.table import TopicTable

log = logging.getLogger("iceberg")

# A frame's header: the pickled message's length and how many blobs follow; then each blob's
# length.
HEADER = struct.Struct(">QI")
LENGTH = struct.Struct(">Q")


@dataclass
class TableHandle:
    """One opening of a topic's table, as the service holds it: what the writer needs to open
    it (again, after a writer process was started again), and whether the topic was deleted."""

    id: int
    topic: str
    topic_id: str
    spec_text: str
    mode: str
    stopped: bool = False


def catalog_settings(config: Any) -> dict[str, Any]:
    """What the writer needs of the broker's config (BrokerConfig), picklable."""
    return {
        "type": config.iceberg_catalog_type,
        "name": config.iceberg_catalog_name,
        "rest": {**config.iceberg_file_io, **config.iceberg_rest_catalog},
        "uri": config.iceberg_uri,
        "warehouse": config.iceberg_warehouse,
        "file_io": dict(config.iceberg_file_io),
        "namespace": config.iceberg_catalog_namespace,
    }


class Tables:
    """The catalog (opened on first use) and the tables open in it, by handle id. Every method
    blocks; one call at a time, except ``stop`` (any thread)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings
        self._catalog: Any = None
        self._tables: dict[int, TopicTable] = {}
        self._lock = threading.Lock()

    def catalog(self) -> Any:
        """pyiceberg's catalog, opened on first use: the SQL catalog, or the REST catalog of
        ``iceberg.catalog.type=rest`` (whose server is asked for its config here: an
        unreachable one fails this, and the next call tries again)."""
        from minibroker.iceberg.table import open_catalog, open_rest_catalog

        if self._catalog is None:
            settings = self.settings
            if settings["type"] == "rest":
                self._catalog = open_rest_catalog(settings["name"], settings["rest"])
            else:
                self._catalog = open_catalog(
                    settings["name"], settings["uri"], settings["warehouse"], settings["file_io"]
                )
        return self._catalog

    def open(self, handle: TableHandle) -> None:
        """The topic's table, created on first use; an earlier opening of the topic's table
        is forgotten."""
        from minibroker.iceberg.table import TopicTable
        from minibroker.storage.log import parse_iceberg_partition_spec

        spec = parse_iceberg_partition_spec("iceberg.partition.spec", handle.spec_text)
        table = TopicTable.open(
            self.catalog(),
            self.settings["namespace"],
            handle.topic,
            handle.topic_id,
            spec,
            handle.mode,
        )
        if handle.stopped:
            table.stop()
        with self._lock:
            for key in [k for k, t in self._tables.items() if t.table.name()[-1] == handle.topic]:
                del self._tables[key]
            self._tables[handle.id] = table

    def table(self, handle: TableHandle) -> TopicTable:
        """The handle's table; opened again if this process has not (a writer process started
        again after the last one ended)."""
        if handle.stopped:
            raise TableStopped(f"{handle.topic}: the topic was deleted")
        with self._lock:
            found = self._tables.get(handle.id)
        if found is None:
            self.open(handle)
            with self._lock:
                found = self._tables[handle.id]
        return found

    def stop(self, handle_id: int) -> None:
        """The topic was deleted: its table writes nothing more (TopicTable.stop)."""
        with self._lock:
            found = self._tables.get(handle_id)
        if found is not None:
            found.stop()

    def offsets(self, handle: TableHandle) -> dict[int, int]:
        return self.table(handle).offsets()

    def commit(
        self,
        handle: TableHandle,
        plan: CommitPlan,
        reads: Mapping[int, list[ReadChunk]],
        lookup: Callable[[int], tuple[str, str, Any] | None] | None = None,
    ) -> CommitOutcome:
        return self.table(handle).commit(plan, reads, lookup)

    def compact(self, handle: TableHandle) -> Any:
        return self.table(handle).compact()

    def expire(self, handle: TableHandle) -> Any:
        return self.table(handle).expire()

    def drop(self, topic: str, topic_id: str) -> list[str]:
        """A deleted topic's tables dropped (table.drop_topic_tables)."""
        from minibroker.iceberg.table import drop_topic_tables

        return drop_topic_tables(self.catalog(), self.settings["namespace"], topic, topic_id)


# -- the channel -------------------------------------------------------------------------------


def encode(message: Any, blobs: Sequence[bytes] = ()) -> list[bytes]:
    """A frame: its header and pickled message, then the blobs as they are."""
    body = pickle.dumps(message, protocol=5)
    lengths = b"".join(LENGTH.pack(len(blob)) for blob in blobs)
    return [HEADER.pack(len(body), len(blobs)) + lengths + body, *blobs]


def _exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        count = sock.recv_into(view[got:])
        if count == 0:
            raise EOFError("the channel was closed")
        got += count
    return bytes(buffer)


def receive(sock: socket.socket) -> tuple[Any, list[bytes]]:
    """One frame, blocking: (message, blobs)."""
    body_size, count = HEADER.unpack(_exactly(sock, HEADER.size))
    lengths = [LENGTH.unpack_from(_exactly(sock, LENGTH.size))[0] for _ in range(count)]
    message = pickle.loads(_exactly(sock, body_size))
    return message, [_exactly(sock, length) for length in lengths]


class RemoteError(Exception):
    """An error the writer met, as text ("CommitFailedException: ..."): the broker does not
    import pyiceberg's or pyarrow's classes to read it (an import on its event loop)."""


def portable(error: BaseException) -> BaseException:
    """The error as the broker can unpickle it without importing anything: Python's own (an
    ImportError says pyiceberg is missing, as in the broker), TableStopped, or a RemoteError
    with the type's name and the text."""
    if type(error).__module__ == "builtins" or isinstance(error, TableStopped):
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:
            pass
        else:
            return error
    return RemoteError(f"{type(error).__name__}: {error}")


def plain(value: Any) -> Any:
    """A call's answer as the broker can unpickle it without importing maintenance.py (and
    pyarrow, pyiceberg with it): a dataclass outcome as a namespace of its fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, (type, CommitOutcome)):
        return types.SimpleNamespace(**dataclasses.asdict(value))
    return value


def pack_reads(reads: Mapping[int, list[ReadChunk]]) -> tuple[dict[int, list[Any]], list[bytes]]:
    """A commit's reads as the channel carries them: per partition each chunk's aborted
    transactions, and the chunks' record bytes as blobs, in order."""
    shape: dict[int, list[Any]] = {}
    blobs: list[bytes] = []
    for index, chunks in reads.items():
        shape[index] = [chunk.aborted for chunk in chunks]
        blobs.extend(chunk.records for chunk in chunks)
    return shape, blobs


def unpack_reads(shape: Mapping[int, list[Any]], blobs: list[bytes]) -> dict[int, list[ReadChunk]]:
    reads: dict[int, list[ReadChunk]] = {}
    position = 0
    for index, aborted_list in shape.items():
        chunks = []
        for aborted in aborted_list:
            chunks.append(ReadChunk(blobs[position], aborted))
            position += 1
        reads[index] = chunks
    return reads


# -- the writer process ---------------------------------------------------------------------------


def serve(sock: socket.socket, settings: Mapping[str, Any]) -> None:
    """The writer process's main (multiprocessing's 'spawn' target): calls answered one at a
    time in this thread, the channel read in another (stops and schema answers are acted on
    while a call runs). Ends when the broker closes the channel or ends (the kernel closes its
    end then, whatever way it ended: a kill -9 too). Not Linux's parent-death signal: it
    follows the thread that started the process (a worker thread of the broker's, which trio
    ends when idle), not the broker."""
    # A Ctrl-C at the terminal reaches the whole process group: the broker decides when its
    # writer ends (it closes the channel, or terminates it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s[writer %(process)d]: %(message)s",
    )
    tables = Tables(settings)
    calls: queue.Queue[tuple[Any, list[bytes]]] = queue.Queue()
    answers: queue.Queue[Any] = queue.Queue()
    sending = threading.Lock()

    def send(message: Any) -> None:
        with sending:
            for part in encode(message):
                sock.sendall(part)

    def read() -> None:
        try:
            while True:
                message, blobs = receive(sock)
                if message[0] == "stop":
                    tables.stop(message[1])
                elif message[0] == "noop":
                    continue
                elif message[0] == "schema":
                    answers.put(message)
                else:
                    calls.put((message, blobs))
        except (EOFError, OSError):
            pass
        # The broker closed the channel or ended: nothing is left to write for.
        os._exit(0)

    threading.Thread(target=read, name="channel", daemon=True).start()
    send(("ready", os.getpid()))
    while True:
        (_kind, call_id, op, args), blobs = calls.get()
        try:
            if op == "commit":
                handle, plan, shape, builder = args
                lookup = None
                if builder is not None:
                    lookup = _lookup(call_id, builder, send, answers)
                value: Any = tables.commit(handle, plan, unpack_reads(shape, blobs), lookup)
            else:
                value = getattr(tables, op)(*args)
            reply: Any = ("done", call_id, plain(value))
        except BaseException as error:
            reply = ("failed", call_id, portable(error))
        del blobs
        send(reply)


def _lookup(
    call_id: int,
    builder: Callable[[str, dict[str, str]], Any],
    send: Callable[[Any], None],
    answers: queue.Queue[Any],
) -> Callable[[int], tuple[str, str, Any] | None]:
    """A commit's schema lookup: the id asked of the broker (its registry, on its event loop),
    a Protobuf schema built here with the registry's own ``protobuf_file`` (pure)."""

    def lookup(schema_id: int) -> tuple[str, str, Any] | None:
        send(("schema?", call_id, schema_id))
        _kind, answered, found = answers.get()
        assert answered == call_id, (answered, call_id)
        if isinstance(found, BaseException):
            raise found
        if found is None:
            return None
        schema_type, text, dependencies = found
        built: Any = None
        if schema_type == "PROTOBUF":
            try:
                built = builder(text, dependencies)
            except Exception as error:
                built = error
        return schema_type, text, built

    return lookup
