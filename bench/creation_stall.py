"""Does creating a big topic stall everyone else? `python -m bench.creation_stall`

One broker; a client on its own connection sends ApiVersions, waits for the answer, and again,
the whole time, while an admin client creates a topic of 500 partitions and then deletes it.
Making a partition's directory and files takes milliseconds of blocking file-system calls on
the broker's event loop. It prints how long creation and deletion took and the other client's
round trips during each (median and worst): the time any client can be kept waiting.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess

PARTITIONS = 500
ADMIN_TIMEOUT_S = 120


class Pinger(threading.Thread):
    """ApiVersions v0 round trips, back to back, each timed, until `stop` is set."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.round_trips: list[float] = []

    def run(self) -> None:
        with wire.connect(("127.0.0.1", self.port)) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                client.api_versions()
                self.round_trips.append(time.monotonic() - started)

    def during(self, action) -> tuple[float, list[float]]:
        """Run `action`; its seconds and the round trips that ended meanwhile."""
        first = len(self.round_trips)
        started = time.monotonic()
        action()
        return time.monotonic() - started, self.round_trips[first:]


def _report(what: str, seconds: float, round_trips: list[float]) -> None:
    median = statistics.median(round_trips) * 1000 if round_trips else float("nan")
    worst = max(round_trips) * 1000 if round_trips else float("nan")
    print(
        f"{what}: {seconds:.2f} s; the other client's ApiVersions meanwhile:"
        f" {len(round_trips)} round trips, median {median:.1f} ms, worst {worst:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.creation_stall")
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="creation-stall-"))
    node = BrokerProcess.start(1, work_dir / "node" / "data")
    node.wait_ready(30)
    pinger = Pinger(node.port)
    pinger.start()
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    try:
        _report(
            f"create a topic of {args.partitions} partitions",
            *pinger.during(
                lambda: admin.create_topics([NewTopic("big", args.partitions, 1)])["big"].result(
                    ADMIN_TIMEOUT_S
                )
            ),
        )
        _report(
            "delete it",
            *pinger.during(lambda: admin.delete_topics(["big"])["big"].result(ADMIN_TIMEOUT_S)),
        )
    finally:
        pinger.stop.set()
        pinger.join()
        node.stop()


if __name__ == "__main__":
    main()
