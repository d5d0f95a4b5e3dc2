"""A /metrics scrape renders one family at a time and lets the event loop serve between them
(broker/common/metrics.py ``render_parts``, node/metrics.py ``serve_metrics``, issue 40): the
text is the same as prometheus_client's in one step, and a task that wants the loop runs
while a slow scrape is rendered. A real socket on loopback; no sleep that hopes."""

import time

import trio
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily

from minibroker.common.metrics import BrokerMetrics
from minibroker.node.metrics import RENDER_SLICE_S, serve_metrics

FAMILIES = 8


class SlowCollector:
    """Live state that takes a while to read: each family costs 2 slices of CPU."""

    def __init__(self) -> None:
        self.collected = 0

    def collect(self):
        for index in range(FAMILIES):
            busy_until = time.perf_counter() + 2 * RENDER_SLICE_S
            while time.perf_counter() < busy_until:
                pass
            self.collected += 1
            family = GaugeMetricFamily(f"slow_family_{index}", "A family slow to collect.")
            family.add_metric([], index)
            yield family


def test_the_text_is_prometheus_clients():
    metrics = BrokerMetrics()
    metrics.child(metrics.messages_in, "t").inc(3)
    metrics.register(SlowCollector())

    # The process's own CPU and the collector's counts move between two renders.
    def stable(text: bytes) -> list[bytes]:
        return [
            line
            for line in text.splitlines()
            if b"process_" not in line and b"python_gc" not in line
        ]

    rendered = metrics.render()
    assert stable(rendered) == stable(generate_latest(metrics.registry))
    assert b"slow_family_7 7.0" in rendered and b'messagesin_total{topic="t"} 3.0' in rendered


async def test_a_scrape_lets_other_tasks_run_between_families():
    metrics = BrokerMetrics()
    slow = SlowCollector()
    metrics.register(slow)
    seen_during_scrape: list[int] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_metrics, metrics, "127.0.0.1", 0)
        done = trio.Event()

        async def other_client() -> None:
            while not done.is_set():
                if 0 < slow.collected < FAMILIES:
                    seen_during_scrape.append(slow.collected)
                await trio.sleep(0)

        nursery.start_soon(other_client)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        while chunk := await stream.receive_some(65536):
            body += chunk
        done.set()
        nursery.cancel_scope.cancel()
    assert b"200 OK" in body and b"slow_family_7 7.0" in body
    # The other task ran while the scrape was between its first and last family.
    assert len(set(seen_during_scrape)) >= FAMILIES // 2, seen_during_scrape
