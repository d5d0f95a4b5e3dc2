"""One member of a consumer group, in a process of its own, driven by the harness.

The group rows run several of these at once: separate processes, as real group members are,
so that neither their librdkafka threads nor their Python work share one interpreter, and
none of it runs in the harness. A confluent-kafka Consumer (librdkafka, as the rest of the
benchmarks) subscribes with the defaults a user has (eager `range,roundrobin` assignors,
3 s heartbeats, auto-commit every 5 s); only its prefetch limit is raised and its session
timeout lowered, see below.

Protocol, one line each way:
    (member)  ready                        the Consumer exists and has found the group's
                                           coordinator; it is in no group yet
    (harness) go                           subscribe now
    (member)  assigned P,P,...             a rebalance gave it these partitions (maybe none);
                                           with --consume they stay paused until `start`
    (member)  revoked                      its partitions were taken away
    (harness) start                        --consume: resume the partitions, read
    (member)  at P:NEXT,P:NEXT,...         consume mode: the next offset of each partition
                                           that moved since the last line (every 50 ms,
                                           and at once when a poll finds it caught up)
    (member)  error TEXT                   a consumer error; the member carries on
    (harness) end of input                 close the consumer (leave the group) and exit
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from confluent_kafka import Consumer, TopicPartition

BATCH = 10_000
POLL_SECONDS = 0.05
REPORT_SECONDS = 0.05
QUEUED_MIN_MESSAGES = 1_000_000
SESSION_TIMEOUT_MS = 10_000
READY_TIMEOUT_S = 30.0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(bootstrap: str, topic: str, group: str, consume: bool) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # librdkafka 2.16 stops prefetching once 100,000 records are queued and then waits
            # fetch.queue.backoff.ms (1 s) before fetching again: that caps one consumer at
            # about 200,000 records/s of 100 B on this machine, against any broker (measured
            # on the mock: 200k/s, 840k/s with this setting). The reading must not be capped
            # by the client, so it may queue a million.
            "queued.min.messages": QUEUED_MIN_MESSAGES,
            # The mock ends a join phase only on a timer: session.timeout.ms - 1 s for any
            # rebalance after its first (44 s with the default 45 s), and a member that misses
            # its first window costs that (seen once in 8 runs). 10 s bounds it at 9 s; nothing
            # on minibroker's path to a formed group depends on the session timeout.
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            # librdkafka's debug contexts (to stderr), for finding out what a member waited on.
            **(
                {"debug": os.environ["MINIBROKER_BENCH_MEMBER_DEBUG"]}
                if os.environ.get("MINIBROKER_BENCH_MEMBER_DEBUG")
                else {}
            ),
        }
    )
    # Connected before the clock: librdkafka starts on the bootstrap address, learns the
    # broker's id from its first Metadata answer, drops the bootstrap connection and opens one
    # to the broker by id, then looks for the group's coordinator; a member that subscribes in
    # the middle of that postpones its JoinGroup ("no usable brokers") by 40-80 ms, so that
    # members told to subscribe at the same moment joined up to 80 ms apart. committed()
    # returns once the coordinator has answered an OffsetFetch: from then on, a subscribe
    # sends its JoinGroup at once (see docs/benchmarks/index.md, first-rebalance).
    consumer.list_topics(topic, timeout=READY_TIMEOUT_S)
    consumer.committed([TopicPartition(topic, 0)], timeout=READY_TIMEOUT_S)
    say("ready")
    if sys.stdin.readline().strip() != "go":
        consumer.close()
        return
    start, stop = threading.Event(), threading.Event()

    def read_commands() -> None:
        for line in sys.stdin:
            if line.strip() == "start":
                start.set()
        stop.set()  # end of input

    threading.Thread(target=read_commands, daemon=True).start()

    def on_assign(consumer: Consumer, partitions) -> None:
        consumer.assign(partitions)
        if consume and not start.is_set():
            consumer.pause(partitions)  # held until the whole group is formed
        say("assigned " + ",".join(str(tp.partition) for tp in partitions))

    def on_revoke(consumer: Consumer, _partitions) -> None:
        consumer.unassign()
        say("revoked")

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    positions: dict[int, int] = {}
    moved: set[int] = set()
    reported = time.monotonic()
    resumed = False
    try:
        while not stop.is_set():
            if consume and start.is_set() and not resumed:
                consumer.resume(consumer.assignment())
                resumed = True
            # consume(n, timeout) waits for n records or the timeout: take what is there, and
            # wait (for one record at most POLL_SECONDS) only when nothing is.
            messages = consumer.consume(BATCH, 0) or consumer.consume(1, POLL_SECONDS)
            # One call per record (this process must not be what limits the group): the last
            # record of each partition in the batch gives the position, and an error (rare:
            # librdkafka retries by itself) is seen when it ends a partition's run.
            last = {message.partition(): message for message in messages}
            for partition, message in last.items():
                if message.error() is not None:
                    say(f"error {message.error()}")
                    continue
                positions[partition] = message.offset() + 1
                moved.add(partition)
            # Promptly once caught up (a short batch), so that the end is seen when it comes.
            caught_up = len(messages) < BATCH
            if moved and (caught_up or time.monotonic() - reported >= REPORT_SECONDS):
                say("at " + ",".join(f"{p}:{positions[p]}" for p in sorted(moved)))
                moved.clear()
                reported = time.monotonic()
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--consume", action="store_true", help="read records and report")
    arguments = parser.parse_args()
    run(arguments.bootstrap, arguments.topic, arguments.group, arguments.consume)


if __name__ == "__main__":
    main()
