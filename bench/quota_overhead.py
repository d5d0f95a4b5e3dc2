"""What do client quotas cost the produce path when they are set but not reached?
`python -m bench.quota_overhead`

Two single brokers, one without quotas and one whose controller state holds a default user
quota of 10 GB/s, a request_percentage of 100,000% and a controller_mutation_rate of a million
partitions a second (they apply to every client, so every Produce is recorded against a byte
rate and a request-time rate and checked, and is never throttled) and 1,000 unrelated user
quotas; kcat produces 1,000,000 x
100 B (acks=1) into a 64-partition topic on each in turn, several runs each on a fresh topic.
It prints the median throughput of both and their ratio (issue 24 asks for >= 0.95), then
what recording one request costs (timeit, in this process).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit
from pathlib import Path

from bench.scrape_overhead import RECORD_BYTES, RECORDS, _create_topic, _Target
from bench.workloads import kcat_produce, record_file
from minibroker.common.quota_manager import USER, BrokerQuotas, entity_key
from minibroker.controller.state import ControllerState
from minibroker.controller.store import STATE_FILE, ControllerStore
from minibroker.tools.launcher import BrokerProcess

NOT_REACHED = 10e9  # bytes per second
REQUEST_NOT_REACHED = 100_000.0  # percent of one thread
MUTATIONS_NOT_REACHED = 1e6  # partitions per second
UNRELATED_QUOTAS = 1000


def _quotas() -> dict:
    quotas = {
        entity_key([(USER, None)]): {
            "producer_byte_rate": NOT_REACHED,
            "request_percentage": REQUEST_NOT_REACHED,
            "controller_mutation_rate": MUTATIONS_NOT_REACHED,
        }
    }
    for index in range(UNRELATED_QUOTAS):
        quotas[entity_key([(USER, f"user-{index}")])] = {"producer_byte_rate": 1000.0}
    return quotas


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quota_overhead")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=RECORDS)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="quota-overhead-"))
    records = record_file(work_dir, args.records, RECORD_BYTES)
    quoted_dir = work_dir / "quoted" / "data"
    quoted_dir.mkdir(parents=True)
    ControllerStore(quoted_dir / STATE_FILE).save(ControllerState(client_quotas=_quotas()))
    nodes = {
        False: BrokerProcess.start(1, work_dir / "open" / "data"),
        True: BrokerProcess.start(2, quoted_dir),
    }
    rates: dict[bool, list[float]] = {False: [], True: []}
    try:
        for node in nodes.values():
            node.wait_ready(30)
        for run in range(args.runs):
            for quoted, node in nodes.items():
                topic = f"run-{run}"
                _create_topic(node.bootstrap, topic)
                seconds = kcat_produce(_Target(node), topic, records, args.records, "1")
                rates[quoted].append(args.records / seconds)
    finally:
        for node in nodes.values():
            node.stop()
    open_rate, quoted_rate = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"produce {args.records:,} x {RECORD_BYTES} B, acks=1, 1 broker, {args.runs} runs each")
    print(f"no quotas: {open_rate:,.0f} records/s")
    print(f"default user quotas not reached: {quoted_rate:,.0f} records/s")
    print(f"quotas / no quotas: {quoted_rate / open_rate:.3f}")
    quotas = BrokerQuotas.create()
    quotas.replace(_quotas())
    calls = 100_000
    clock = iter(range(10**9))
    seconds = timeit.timeit(
        lambda: quotas.produce.record("ANONYMOUS", "rdkafka", 16384, next(clock)), number=calls
    )
    print(f"recording one Produce: {seconds / calls * 1e6:.2f} us")
    seconds = timeit.timeit(
        lambda: quotas.request.record("ANONYMOUS", "rdkafka", 0.05, next(clock)), number=calls
    )
    print(f"recording one request's handler time: {seconds / calls * 1e6:.2f} us")


if __name__ == "__main__":
    main()
