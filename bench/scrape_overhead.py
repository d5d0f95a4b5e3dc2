"""Does serving /metrics slow the data path? `python -m bench.scrape_overhead`

One broker with metrics.port; kcat produces 1,000,000 x 100 B (acks=1) into a 64-partition
topic, alternately with nothing scraping and with a scraper fetching /metrics every 100 ms
(150 times Prometheus's default rate), several runs each on a fresh topic. It prints the
median throughput of both and their ratio: the cost of a scrape, since /metrics is rendered on
the broker's own event loop.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import urllib.request
from pathlib import Path

from bench.workloads import PARTITIONS, kcat_produce, record_file
from minibroker.tools.launcher import BrokerProcess, free_port

RECORDS = 1_000_000
RECORD_BYTES = 100
SCRAPE_INTERVAL_S = 0.1


class _Target:
    """What bench.workloads needs of a system under test, for one plain broker."""

    def __init__(self, node: BrokerProcess) -> None:
        self.bootstrap = node.bootstrap
        self._node = node

    def failure(self, what: str) -> RuntimeError:
        return RuntimeError(f"{what}\n{self._node.log_tail()}")


def _scrape_until(port: int, stop: threading.Event, counts: list[int]) -> None:
    while not stop.wait(SCRAPE_INTERVAL_S):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            answer.read()
        counts[0] += 1


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scrape_overhead")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=RECORDS)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="scrape-overhead-"))
    records = record_file(work_dir, args.records, RECORD_BYTES)
    metrics_port = free_port()
    node = BrokerProcess.start(
        1, work_dir / "node" / "data", overrides={"metrics.port": metrics_port}
    )
    node.wait_ready(30)
    target = _Target(node)
    rates: dict[bool, list[float]] = {False: [], True: []}
    scrapes = [0]
    try:
        for run in range(args.runs):
            for scraped in (False, True):
                topic = f"run-{run}-{'scraped' if scraped else 'quiet'}"
                _create_topic(node.bootstrap, topic)
                stop = threading.Event()
                scraper = threading.Thread(
                    target=_scrape_until, args=(metrics_port, stop, scrapes), daemon=True
                )
                if scraped:
                    scraper.start()
                seconds = kcat_produce(target, topic, records, args.records, "1")
                stop.set()
                if scraped:
                    scraper.join()
                rates[scraped].append(args.records / seconds)
    finally:
        node.stop()
    quiet, scraped = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"produce {args.records:,} x {RECORD_BYTES} B, acks=1, 1 broker, {args.runs} runs each")
    interval_ms = SCRAPE_INTERVAL_S * 1000
    print(f"not scraped: {quiet:,.0f} records/s")
    print(f"scraped every {interval_ms:.0f} ms ({scrapes[0]} scrapes): {scraped:,.0f} records/s")
    print(f"scraped / not scraped: {scraped / quiet:.3f}")


if __name__ == "__main__":
    main()
