"""Zero-copy reads: PartitionLog.read(zero_copy=True) locates the same bytes as a read, and
the server's writer sends FileRecords with sendfile over a real socket pair, whatever the
socket buffer takes at a time and whatever happens to the file meanwhile."""

import errno
import os
import random
import select
import socket
import threading

import pytest
import trio

from minibroker.apis import CloseConnection
from minibroker.node import server
from minibroker.protocol.record_batch import validate_batches
from minibroker.storage import log as log_module
from minibroker.storage.file_records import FileRecords
from minibroker.storage.log import LogConfig, PartitionLog
from tests.unit.batch_factory import make_batch


def test_zero_copy_reads_return_exactly_the_bytes_of_a_read(tmp_path, monkeypatch):
    monkeypatch.setattr(log_module, "ZERO_COPY_MIN_BYTES", 1)  # every read as FileRecords
    config = LogConfig(segment_bytes=2500, index_interval_bytes=200)
    log = PartitionLog.open(tmp_path / "t-0", config, needs_recovery=False, now_ms=0)
    rng = random.Random(7)
    for _ in range(60):
        log.append_as_leader(make_batch(rng.randint(1, 12)), leader_epoch=0, now_ms=0)
    assert log.segment_count > 3
    end = log.log_end_offset
    checked = files = 0
    for start in range(0, end, 3):
        for max_bytes in (0, 1, 90, 400, 1500, 2499, 7000, 10**6):
            for max_offset in (None, end, start + 1, start + 17, start + 40):
                for min_one_batch in (True, False):
                    args = dict(max_bytes=max_bytes, max_offset=max_offset)
                    expected = log.read(start, **args, min_one_batch=min_one_batch)
                    got = log.read_file_records(start, **args, min_one_batch=min_one_batch)
                    if isinstance(got, FileRecords):
                        files += 1
                        assert len(got) == len(expected)
                        data = got.read()
                        got.close()
                    else:
                        data = got
                    assert data == expected, (start, max_bytes, max_offset, min_one_batch)
                    checked += 1
    assert files > checked // 2
    # Small reads stay bytes with the real threshold.
    monkeypatch.undo()
    small = log.read_file_records(0, max_bytes=500)
    assert isinstance(small, bytes) and validate_batches(small)
    log.close()


def test_out_of_descriptors_a_read_falls_back_to_bytes(tmp_path, monkeypatch):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), needs_recovery=False, now_ms=0)
    for _ in range(20):
        log.append_as_leader(make_batch([(None, b"x" * 1000)] * 10), leader_epoch=0, now_ms=0)
    expected = log.read(0, max_bytes=10**6)
    assert len(expected) >= log_module.ZERO_COPY_MIN_BYTES
    sliced = log.read_file_records(0, max_bytes=10**6)
    assert isinstance(sliced, FileRecords)
    sliced.close()

    def no_descriptors(fd):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "dup", no_descriptors)
    assert log.read_file_records(0, max_bytes=10**6) == expected
    monkeypatch.undo()
    log.close()


def _segment_file(tmp_path, size: int) -> tuple[bytes, int]:
    data = os.urandom(size)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return data, os.open(path, os.O_RDONLY)


# The socket buffers, pinned (a size set by hand is never grown by the kernel's autotuning)
# and set before the connection exists, so that the window it announces is this small from
# the start: together they hold far less than the sends of these tests (the kernel doubles
# each: about 50 kB in all on loopback).
SEND_BUFFER = 8192
RECEIVE_BUFFER = 16384
RECEIVE_TIMEOUT = 30.0


def _socket_pair():
    """A connected TCP pair on loopback, small pinned buffers so sends come back short."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)  # accepted inherit it
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    client.connect(listener.getsockname())
    accepted, _ = listener.accept()
    listener.close()
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    return trio.SocketStream(trio.socket.from_stdlib_socket(accepted)), client


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int) -> None:
        self.value += amount


def _slices(fd: int, *ranges: tuple[int, int]) -> FileRecords:
    records = FileRecords()
    for position, length in ranges:
        records.add(fd, position, length)
    return records


async def _receive(
    client: socket.socket, size: int, chunk: int = 16384, after: threading.Event | None = None
) -> bytes:
    """Read like a slow consumer: small reads, off the event loop; not before `after` is
    set, when given. Bounded: it gives up waiting for `after`, or for more bytes, after
    RECEIVE_TIMEOUT seconds, and returns what came (the test's assertions tell the rest)."""
    received = bytearray()

    def read_all() -> None:
        if after is not None:
            after.wait(RECEIVE_TIMEOUT)
        client.settimeout(RECEIVE_TIMEOUT)
        while len(received) < size:
            try:
                data = client.recv(min(chunk, size - len(received)))
            except TimeoutError:
                return
            if not data:
                return
            received.extend(data)

    await trio.to_thread.run_sync(read_all)
    return bytes(received)


# The most one sendfile call sends in test_slices_go_in_order...: a socket that takes at most
# this much at a time, whatever the kernel's buffers would take.
SENDFILE_LIMIT = 16384


async def test_slices_go_in_order_between_buffers_through_a_full_socket_buffer(
    tmp_path, monkeypatch
):
    """Rule: a response goes out whole and in order however little the socket takes at a
    time: each slice is resumed where a short send left it, and the writer waits for room
    when the socket buffer is full. Both are made to happen, not left to the kernel (which
    once took a 200,000-byte slice in one call in CI): every sendfile is capped at
    SENDFILE_LIMIT bytes, and the reader starts only once the socket buffer is full (the
    kernel refused bytes, or the socket is no longer writable after a send: the pinned
    buffers hold far less than the response, so one of them must happen)."""
    data, fd = _segment_file(tmp_path, 500_000)
    stream, client = _socket_pair()
    first = _slices(fd, (100, 200_000))
    second = _slices(fd, (250_000, 100_000), (400_000, 99_000))
    buffers = [b"head", first, b"middle", memoryview(b""), second, b"tail"]
    expected = b"head" + data[100:200_100] + b"middle" + data[250_000:350_000]
    expected += data[400_000:499_000] + b"tail"
    counter = _Counter()
    short_sends = []
    socket_full = threading.Event()
    sendfile = os.sendfile

    def limited_sendfile(out_fd, in_fd, offset, count):
        allowed = min(count, SENDFILE_LIMIT)
        try:
            sent = sendfile(out_fd, in_fd, offset, allowed)
        except BlockingIOError:
            socket_full.set()
            raise
        writable = select.poll()
        writable.register(out_fd, select.POLLOUT)
        if sent < allowed or not writable.poll(0):
            socket_full.set()  # what the writer waits on next is room in the socket buffer
        if sent < count:
            short_sends.append((count, sent))
        return sent

    monkeypatch.setattr(os, "sendfile", limited_sendfile)
    os.close(fd)  # the slices hold their own descriptors
    async with trio.open_nursery() as nursery:
        received = []

        async def receive() -> None:
            received.append(await _receive(client, len(expected), after=socket_full))

        nursery.start_soon(receive)
        await server._send_buffers(stream, buffers, counter)
    assert socket_full.is_set()  # the writer met a full socket buffer and waited for room
    assert received[0] == expected
    assert counter.value == 200_000 + 199_000
    # Each slice went in several goes: all but its last send at least came back short.
    slices = (200_000, 100_000, 99_000)
    assert len(short_sends) >= sum(-(-length // SENDFILE_LIMIT) - 1 for length in slices)
    assert first.parts == [] and second.parts == []  # descriptors closed once sent
    client.close()
    await stream.aclose()


async def test_a_deleted_segment_is_still_sent_whole(tmp_path):
    data, fd = _segment_file(tmp_path, 200_000)
    stream, client = _socket_pair()
    records = _slices(fd, (1000, 150_000))
    os.close(fd)
    (tmp_path / "00000000000000000000.log").unlink()  # retention or the cleaner
    async with trio.open_nursery() as nursery:
        received = []

        async def receive() -> None:
            received.append(await _receive(client, 150_000))

        nursery.start_soon(receive)
        await server._send_buffers(stream, [records], None)
    assert received[0] == data[1000:151_000]
    client.close()
    await stream.aclose()


async def test_a_file_truncated_underneath_closes_the_connection_short_of_nothing(tmp_path):
    """The response's length is on the wire: the writer must not end it early as if it
    were whole; it gives up the connection (Kafka's FileRecords.writeTo throws)."""
    _data, fd = _segment_file(tmp_path, 300_000)
    stream, client = _socket_pair()
    records = _slices(fd, (0, 250_000))
    # A leader turned follower cuts its log back below what the response announced.
    os.truncate(tmp_path / "00000000000000000000.log", 100_000)
    os.close(fd)
    received = []
    async with trio.open_nursery() as nursery:

        async def receive() -> None:
            received.append(await _receive(client, 250_000))

        nursery.start_soon(receive)
        with pytest.raises(CloseConnection, match="truncated"):
            await server._send_buffers(stream, [b"size", records], None)
        await stream.aclose()  # what the connection's task does next
    assert len(received[0]) == 4 + 100_000  # the peer sees a cut-off frame, then EOF
    assert records.parts == []
    client.close()


async def test_a_cancelled_send_releases_the_descriptors(tmp_path):
    _data, fd = _segment_file(tmp_path, 2_000_000)
    stream, client = _socket_pair()
    records = _slices(fd, (0, 2_000_000))
    os.close(fd)
    with trio.move_on_after(0.2) as scope:
        await server._send_buffers(stream, [records], None)  # nobody reads: it blocks
    assert scope.cancelled_caught
    assert records.parts == []
    client.close()
    await stream.aclose()
