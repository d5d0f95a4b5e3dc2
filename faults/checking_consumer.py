"""The fault harness's checking consumer, in a process of its own (faults/chaos.py's Workload).

`python -m faults.checking_consumer BOOTSTRAP TOPIC PARTITIONS`: reads every partition of the
topic from offset 0 and writes each record it reads to its stdout, one line each
(``partition offset value-in-hex``), until SIGTERM; then it writes ``end``, closes its stdout
and closes its consumer.

Why a process: librdkafka's consumer close can hang for good (confluent-kafka-python issue
1667, open). CI's run of 2026-12-03 22:06 met it: the harness's checking consumer, a thread
then, stayed in ``close()`` for six minutes, through the cluster's shutdown, and the network
guard failed the module for the client still alive after its network was gone (issue 41's
rule: nothing a test starts outlives it). A thread stuck so cannot be ended; a process can:
the harness has every record read before the close begins (the ``end`` line and the end of
the stream), and kills the process if the close does not end in time
(``Workload.CONSUMER_CLOSE_S``).
"""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, _frame: stopping.append(number))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-checker",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    out = sys.stdout
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while not stopping:
            lines = [
                f"{message.partition()} {message.offset()} {message.value().hex()}\n"
                for message in consumer.consume(500, 0.2)
                if message.error() is None
            ]
            if lines:
                out.write("".join(lines))
                out.flush()
        out.write("end\n")
        out.flush()
    finally:
        out.close()
        consumer.close()


if __name__ == "__main__":
    main()
