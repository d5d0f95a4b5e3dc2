"""One member of a share group (KIP-932), in a process of its own, driven by the harness.

The share-consume row runs 1, 2 or 4 of these at once on one partition: separate processes, as
real workers of a queue are, so that neither their librdkafka threads nor their Python work
share one interpreter, and none of it runs in the harness (as bench/group_member.py for the
classic group). A confluent-kafka ShareConsumer (librdkafka 2.16's share consumer) with
`share.acknowledgement.mode=explicit`: every record a poll returns is acknowledged ACCEPT one
by one (`acknowledge`), and those acknowledgements travel with the next poll's ShareFetch, as
an application that acknowledges what it has processed does; librdkafka's other defaults.

Protocol, one line each way:
    (member)  ready               the ShareConsumer exists and is subscribed; it has not polled
    (harness) warm                poll (and acknowledge): the group forms, the harness's probe
                                  records arrive
    (harness) hold                stop polling, commit_sync() what was acknowledged
    (member)  held                done: the member is in the group and polls no more
    (harness) go                  poll (and acknowledge) again; the count starts again at 0
    (member)  at N                the records it has acknowledged since `warm` or `go` (every
                                  50 ms while records come, and at once when a poll comes
                                  back empty)
    (harness) commit              stop polling; commit_sync() the acknowledgements not sent yet
    (member)  committed N E       done: N records acknowledged in all, E partitions' commits
                                  that the broker answered with an error
    (member)  error TEXT          a consumer error; the member carries on
    (harness) end of input        close the consumer (leave the group) and exit
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time

from confluent_kafka import KafkaException, ShareConsumer

POLL_SECONDS = 0.05
REPORT_SECONDS = 0.05
COMMIT_TIMEOUT_S = 30.0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(bootstrap: str, topic: str, group: str) -> None:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    say("ready")
    commands: queue.Queue[str | None] = queue.Queue()

    def read_commands() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put(None)  # end of input

    threading.Thread(target=read_commands, daemon=True).start()
    try:
        if commands.get() != "warm":
            return
        stop = read_until_command(consumer, commands)
        if stop != "hold":
            return
        commit(consumer)
        say("held")
        if commands.get() != "go":
            return
        stop = read_until_command(consumer, commands)
        if stop != "commit":
            return
        acknowledged, failed = commit(consumer)
        say(f"committed {acknowledged} {failed}")
        commands.get()  # end of input
    finally:
        consumer.close()


acknowledged_total = 0


def read_until_command(consumer: ShareConsumer, commands: queue.Queue[str | None]) -> str | None:
    """Poll, acknowledging every record ACCEPT, until the harness says something; report the
    records acknowledged since this call began."""
    global acknowledged_total
    acknowledged_total = 0
    reported_count = 0
    reported = time.monotonic()
    while commands.empty():
        messages = consumer.poll(POLL_SECONDS)
        for message in messages:
            if message.error() is not None:
                say(f"error {message.error()}")
                continue
            consumer.acknowledge(message)
            acknowledged_total += 1
        moved = acknowledged_total != reported_count
        if moved and (not messages or time.monotonic() - reported >= REPORT_SECONDS):
            say(f"at {acknowledged_total}")
            reported_count = acknowledged_total
            reported = time.monotonic()
    return commands.get()


def commit(consumer: ShareConsumer) -> tuple[int, int]:
    """commit_sync() of the acknowledgements not yet sent: the records acknowledged by the
    last read_until_command, and the partitions whose commit the broker refused."""
    try:
        results = consumer.commit_sync(COMMIT_TIMEOUT_S)
    except KafkaException as error:
        say(f"error commit_sync: {error}")
        return acknowledged_total, 1
    return acknowledged_total, sum(1 for outcome in results.values() if outcome is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    arguments = parser.parse_args()
    run(arguments.bootstrap, arguments.topic, arguments.group)


if __name__ == "__main__":
    main()
