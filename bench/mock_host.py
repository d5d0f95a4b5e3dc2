"""A process that hosts only librdkafka's mock cluster, driven by a line protocol on stdin.

Why a process of its own: the mock is C threads inside whatever process created it. Hosting it
here, with nothing else running, keeps the harness's own Python work (pacing a producer,
counting latencies) off its threads and makes its CPU time and peak memory measurable, as the
broker's are.

Why ctypes: the mock answers ApiVersions without CreateTopics and names controller id 0, which
is no broker, so AdminClient cannot create a topic on it, and auto-creation gives every topic 4
partitions. The mock keeps about 5 MiB or 100k messages per partition, so the benchmarks need
64. librdkafka exports `rd_kafka_mock_topic_create` (rdkafka_mock.h) for exactly this; the
confluent-kafka wheel bundles that librdkafka, and this process calls it on its own client
handle, which started the mock because of `test.mock.num.brokers`.

Protocol, one line each way (the parent waits for every answer):
    topic NAME PARTITIONS REPLICATION_FACTOR  ->  ok | error CODE_NAME
    usage                                     ->  CPU_SECONDS PEAK_RSS_BYTES
    (end of input)                            ->  the process exits
The first line written is `bootstrap HOST:PORT[,HOST:PORT...]`.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import confluent_kafka

from bench.procfs import peak_rss_bytes

RD_KAFKA_PRODUCER = 0
RD_KAFKA_CONF_OK = 0
ERRSTR_SIZE = 512


def bundled_librdkafka() -> ctypes.CDLL:
    """The librdkafka that confluent_kafka loaded into this process (not a system copy, whose
    version could differ), found by its mapping in /proc/self/maps."""
    confluent_kafka.libversion()  # the C extension, and so librdkafka, is loaded by now
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "librdkafka" in Path(path).name:
            library = ctypes.CDLL(path)
            break
    else:
        raise RuntimeError("confluent_kafka's librdkafka is not mapped into this process")
    library.rd_kafka_conf_new.restype = ctypes.c_void_p
    library.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    library.rd_kafka_new.restype = ctypes.c_void_p
    library.rd_kafka_new.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    library.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    library.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    library.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    library.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    library.rd_kafka_mock_topic_create.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    library.rd_kafka_err2name.restype = ctypes.c_char_p
    library.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return library


class MockCluster:
    """A mock cluster of `brokers` brokers, owned by an otherwise idle producer handle."""

    def __init__(self, library: ctypes.CDLL, brokers: int):
        self.library = library
        errstr = ctypes.create_string_buffer(ERRSTR_SIZE)
        conf = library.rd_kafka_conf_new()
        # log_level 4 (warnings) leaves out the notice that the mock replaced bootstrap.servers.
        for key, value in (("test.mock.num.brokers", str(brokers)), ("log_level", "4")):
            result = library.rd_kafka_conf_set(
                conf, key.encode(), value.encode(), errstr, ERRSTR_SIZE
            )
            if result != RD_KAFKA_CONF_OK:
                raise RuntimeError(f"{key}={value}: {errstr.value.decode()}")
        # rd_kafka_new owns conf from here on, whether it succeeds or not.
        self.handle = library.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, ERRSTR_SIZE)
        if not self.handle:
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
        self.cluster = library.rd_kafka_handle_mock_cluster(self.handle)
        if not self.cluster:
            raise RuntimeError("the client handle started no mock cluster")

    @property
    def bootstrap(self) -> str:
        return self.library.rd_kafka_mock_cluster_bootstraps(self.cluster).decode()

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> str:
        """Create the topic; return "ok" or "error <NAME>" for the protocol."""
        error = self.library.rd_kafka_mock_topic_create(
            self.cluster, name.encode(), partitions, replication_factor
        )
        if error:
            return f"error {self.library.rd_kafka_err2name(error).decode()}"
        return "ok"

    def close(self) -> None:
        self.library.rd_kafka_destroy(self.handle)


def serve(brokers: int) -> None:
    mock = MockCluster(bundled_librdkafka(), brokers)
    try:
        print(f"bootstrap {mock.bootstrap}", flush=True)
        for line in sys.stdin:
            command, *arguments = line.split()
            if command == "topic":
                name, partitions, replication_factor = arguments
                answer = mock.create_topic(name, int(partitions), int(replication_factor))
            elif command == "usage":
                answer = f"{time.process_time()} {peak_rss_bytes('self')}"
            else:
                answer = f"error unknown command {command!r}"
            print(answer, flush=True)
    finally:
        mock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1)
    serve(parser.parse_args().brokers)


if __name__ == "__main__":
    main()
