"""Where the Iceberg service's blocking calls run (writer_process.Tables: decoding, Arrow,
Parquet, pyiceberg's commits, maintenance, drops): a process of its own per broker node
(``ProcessWriter``, what a node uses), or a worker thread of the broker (``ThreadWriter``, for
the in-process tests of the service, which hold or patch a call in their own process). Both
answer the same calls, one at a time, and the service cannot tell them apart.

Why a process: the writer's Python code (record decoding, pyiceberg's manifests) holds the
interpreter's lock, and a worker thread's holding it stalls the event loop that serves every
client (docs/iceberg-topics.md, "What translation costs the broker", has the figures). A
process per node, not per topic: one catalog connection and one set of imports (pyiceberg,
pyarrow: about 100 MB) per node, as the thread had; the calls stay one at a time, as two cores
are few.

``ProcessWriter``: multiprocessing's 'spawn' context (a fresh interpreter: the broker is a trio
process with threads, which must not fork), started lazily on the first call (the first Iceberg
topic led here), ended with the service (terminated) or with the broker (its channel closes, and it
exits). A writer that ends (a crash, the OOM killer, a kill
-9) fails the call under way (``WriterLost``: the commit fails and is retried after its delay,
as any failed commit) and is started again on the next call; the tables are opened again in
the new process from their handles, and each partition's writer goes on from the table's
offsets (a commit that landed before the process ended is found there by the next commit's
conditional check: nothing twice). Schema ids (value_schema_id_prefix) are asked back over the
channel while the commit waits: the registry lives in the broker's event loop, and resolving
ids before sending would mean decoding each record's prefix on the loop.

Bounded memory: one call in flight, and a commit carries at most the service's
MAX_COMMIT_BYTES (32 MiB) of record batches plus one read (service._read), so at most that
much of batches is on the way to or held by the writer at once, besides what Arrow and Parquet
make of them there. A call cancelled while the writer works on it (the topic deleted, the
broker stopping) is not abandoned: the next call first waits for its answer, so the writer never
holds two.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import pickle
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import trio

from minibroker.iceberg.translation import CommitOutcome, CommitPlan, ReadChunk, TableStopped
from minibroker.iceberg.writer_process import (
    HEADER,
    LENGTH,
    TableHandle,
    Tables,
    encode,
    pack_reads,
    serve,
)

log = logging.getLogger("iceberg")

T = TypeVar("T")
# (schema type, schema text, references' texts) of an id, or None: asked on the event loop.
FindSchema = Callable[[int], Awaitable[tuple[str, str, Any] | None]]
# A PROTOBUF schema's text and references built into a FileDescriptor (pure).
BuildProtobuf = Callable[[str, dict[str, str]], Any]
# How long a new writer process may take to say it is ready (an interpreter's start-up and
# this package's imports; pyiceberg is imported on the first call, not counted here).
START_TIMEOUT_S = 60.0
RECEIVE_BYTES = 1 << 16


class WriterLost(Exception):
    """The writer process ended (or its channel broke) before it answered."""


class ThreadWriter:
    """The calls in a worker thread of the broker (``trio.to_thread.run_sync``), one at a
    time; schema ids asked of the event loop with ``trio.from_thread``."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.tables = Tables(settings)
        self.started = 0
        self._limiter = trio.CapacityLimiter(1)
        self._next_handle = 0

    async def _blocking(self, function: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(
            functools.partial(function, *args), limiter=self._limiter
        )

    async def open(self, topic: str, topic_id: str, spec_text: str, mode: str) -> TableHandle:
        self._next_handle += 1
        handle = TableHandle(self._next_handle, topic, topic_id, spec_text, mode)
        await self._blocking(self.tables.open, handle)
        return handle

    async def offsets(self, handle: TableHandle) -> dict[int, int]:
        return await self._blocking(self.tables.offsets, handle)

    async def commit(
        self,
        handle: TableHandle,
        plan: CommitPlan,
        reads: Mapping[int, list[ReadChunk]],
        find: FindSchema | None = None,
        build: BuildProtobuf | None = None,
    ) -> CommitOutcome:
        lookup = None
        if find is not None:

            def lookup(schema_id: int) -> tuple[str, str, Any] | None:
                # In the worker thread: the registry's state is read on the event loop (None:
                # the id is not registered; an exception when that cannot be known fails the
                # commit), a Protobuf schema is built here.
                found = trio.from_thread.run(find, schema_id)
                if found is None:
                    return None
                schema_type, text, dependencies = found
                built: Any = None
                if schema_type == "PROTOBUF" and build is not None:
                    try:
                        built = build(text, dependencies)
                    except Exception as error:
                        built = error
                return schema_type, text, built

        return await self._blocking(self.tables.commit, handle, plan, reads, lookup)

    async def compact(self, handle: TableHandle) -> Any:
        return await self._blocking(self.tables.compact, handle)

    async def expire(self, handle: TableHandle) -> Any:
        return await self._blocking(self.tables.expire, handle)

    async def drop(self, topic: str, topic_id: str) -> list[str]:
        return await self._blocking(self.tables.drop, topic, topic_id)

    def stop(self, handle: TableHandle) -> None:
        """The topic was deleted: a commit running in the worker thread writes nothing more
        after its next check, and no later call of the handle runs."""
        handle.stopped = True
        self.tables.stop(handle.id)

    async def send_stops(self) -> None:
        """Nothing to send: ``stop`` reached the table at once."""

    async def aclose(self) -> None:
        pass


class ProcessWriter:
    """The calls in a process of its own (module docstring), over a socket pair."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        # Writer processes started (a second one: the first ended).
        self.started = 0
        self.pid: int | None = None
        self._process: Any = None
        self._stream: trio.SocketStream | None = None
        self._buffer = bytearray()
        self._calls = trio.Lock()
        self._sending = trio.Lock()
        self._next_call = 0
        self._next_handle = 0
        # The call sent and not yet answered (its caller was cancelled): answered first.
        self._outstanding: int | None = None
        # Handles stopped whose stop is not yet sent (sent before the next frame).
        self._stops: list[int] = []

    # -- the process ----------------------------------------------------------------------------

    async def _connection(self) -> trio.SocketStream:
        if self._stream is not None and self._process is not None and self._process.is_alive():
            return self._stream
        await self._lose()
        await self._reap()
        ours, theirs = socket.socketpair()
        context = multiprocessing.get_context("spawn")
        process = context.Process(
            target=serve,
            args=(theirs, self.settings),
            name="minibroker-iceberg-writer",
            daemon=True,
        )
        try:
            # A fork and exec of a fresh interpreter, and the start-up data written to it: off
            # the event loop.
            await trio.to_thread.run_sync(process.start)
        finally:
            theirs.close()
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        self._process, self._stream, self._buffer = process, stream, bytearray()
        self._outstanding = None
        self._stops.clear()
        try:
            with trio.fail_after(START_TIMEOUT_S):
                kind, pid = await self._receive()
        except BaseException:
            await self._lose()
            raise
        assert kind == "ready", kind
        self.pid = pid
        self.started += 1
        log.info("started the Iceberg writer process (pid %d)", pid)
        return stream

    async def _reap(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.is_alive():
            process.kill()
        await trio.to_thread.run_sync(process.join, 10)
        log.warning(
            "the Iceberg writer process (pid %s) ended with exit code %s: starting another",
            process.pid,
            process.exitcode,
        )

    async def _lose(self) -> None:
        """The channel is broken: closed here, the process reaped on the next call."""
        stream, self._stream = self._stream, None
        self._outstanding = None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    # -- the channel ----------------------------------------------------------------------------

    async def _send(self, message: Any, blobs: list[bytes] | tuple[()] = ()) -> None:
        stream = self._stream
        if stream is None:
            raise WriterLost("the Iceberg writer process is not running")
        frames = encode(message, blobs)
        # A frame half sent would garble the channel: sending is never cancelled midway.
        with trio.CancelScope(shield=True):
            async with self._sending:
                while self._stops:
                    for part in encode(("stop", self._stops.pop(0))):
                        await stream.send_all(part)
                for part in frames:
                    await stream.send_all(part)

    async def _exactly(self, size: int) -> bytes:
        stream = self._stream
        assert stream is not None
        while len(self._buffer) < size:
            data = await stream.receive_some(max(RECEIVE_BYTES, size - len(self._buffer)))
            if not data:
                raise WriterLost(self._ended())
            self._buffer += data
        found = bytes(self._buffer[:size])
        del self._buffer[:size]
        return found

    async def _receive(self) -> Any:
        body_size, count = HEADER.unpack(await self._exactly(HEADER.size))
        for _ in range(count):  # the writer sends no blobs
            await self._exactly(LENGTH.unpack(await self._exactly(LENGTH.size))[0])
        return pickle.loads(await self._exactly(body_size))

    def _ended(self) -> str:
        process = self._process
        code = None if process is None else process.exitcode
        return (
            "the Iceberg writer process ended before it answered"
            + ("" if code is None else f" (exit code {code})")
            + ": it is started again on the next call"
        )

    async def _answer(self, call_id: int, find: FindSchema | None) -> tuple[str, Any]:
        """The writer's answer to ``call_id`` ("done" and the value, or "failed" and the
        error), the schema questions of that call answered meanwhile (those of a call whose
        caller has gone are answered with an error)."""
        while True:
            message = await self._receive()
            kind, answered = message[0], message[1]
            if kind == "schema?":
                found: Any
                if answered != call_id or find is None:
                    found = RuntimeError("the commit that asked was cancelled")
                else:
                    try:
                        found = await find(message[2])
                    except trio.Cancelled:
                        await self._send(("schema", answered, RuntimeError("cancelled")))
                        raise
                    except Exception as error:
                        found = error
                await self._send(("schema", answered, found))
                continue
            if answered != call_id:
                continue  # an earlier call's, already given up
            self._outstanding = None
            return kind, message[2]

    async def _call(
        self, op: str, args: tuple[Any, ...], blobs: list[bytes] | None = None, find=None
    ) -> Any:
        async with self._calls:
            try:
                await self._connection()
                if self._outstanding is not None:
                    # An earlier call whose caller was cancelled: the writer finishes it
                    # before this one (one call's batches at a time).
                    await self._answer(self._outstanding, None)
                self._next_call += 1
                call_id = self._next_call
                self._outstanding = call_id
                await self._send(("call", call_id, op, args), blobs or ())
                kind, value = await self._answer(call_id, find)
            except (WriterLost, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                await self._lose()
                if isinstance(e, WriterLost):
                    raise
                raise WriterLost(f"{self._ended()} ({type(e).__name__}: {e})") from e
        if kind == "failed":
            # The writer's own error (an OSError among them: the warehouse's disk), not the
            # channel's.
            raise value
        return value

    # -- the calls ------------------------------------------------------------------------------

    async def open(self, topic: str, topic_id: str, spec_text: str, mode: str) -> TableHandle:
        self._next_handle += 1
        handle = TableHandle(self._next_handle, topic, topic_id, spec_text, mode)
        await self._call("open", (handle,))
        return handle

    async def offsets(self, handle: TableHandle) -> dict[int, int]:
        return await self._call("offsets", (self._live(handle),))

    async def commit(
        self,
        handle: TableHandle,
        plan: CommitPlan,
        reads: Mapping[int, list[ReadChunk]],
        find: FindSchema | None = None,
        build: BuildProtobuf | None = None,
    ) -> CommitOutcome:
        shape, blobs = pack_reads(reads)
        builder = None
        if find is not None:
            # The registry's protobuf_file, sent by reference (a function of its module); a
            # writer with no builder counts a PROTOBUF id as one it cannot map.
            builder = build if build is not None else _no_protobuf
        args = (self._live(handle), plan, shape, builder)
        return await self._call("commit", args, blobs, find)

    async def compact(self, handle: TableHandle) -> Any:
        return await self._call("compact", (self._live(handle),))

    async def expire(self, handle: TableHandle) -> Any:
        return await self._call("expire", (self._live(handle),))

    async def drop(self, topic: str, topic_id: str) -> list[str]:
        return await self._call("drop", (topic, topic_id))

    def stop(self, handle: TableHandle) -> None:
        """The topic was deleted: no later call of the handle runs, and a commit the writer
        is running for it writes nothing more after its next check (the stop is sent ahead of
        the next frame; ``send_stops`` sends it at once)."""
        handle.stopped = True
        self._stops.append(handle.id)

    async def send_stops(self) -> None:
        """The stops not yet sent, sent now (while a call may be running in the writer)."""
        if self._stops and self._stream is not None:
            with contextlib.suppress(
                trio.BrokenResourceError, trio.ClosedResourceError, OSError, WriterLost
            ):
                await self._send(("noop",))

    @staticmethod
    def _live(handle: TableHandle) -> TableHandle:
        if handle.stopped:
            raise TableStopped(f"{handle.topic}: the topic was deleted")
        return handle

    async def aclose(self) -> None:
        """The writer ended with the service: terminated (a commit under way either landed
        or did not; the next writer of the partitions finds out from the table)."""
        await self._lose()
        process, self._process = self._process, None
        if process is not None and process.is_alive():
            process.terminate()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(process.join, 10)
            if process.is_alive():
                process.kill()


def _no_protobuf(text: str, dependencies: dict[str, str]) -> Any:
    raise RuntimeError("no Protobuf schema builder was given to the Iceberg writer")
