"""A thousand topics in one CreateTopics and one DeleteTopics: answered within the client's
timeout, and no broker misses a heartbeat meanwhile (nobody is fenced).

The brokers heartbeat and judge their followers at Kafka's defaults here (a heartbeat every 2 s,
fenced after 9 s without one; a follower out of the ISR after 30 s behind), not at the suite's
200 ms / 1.5 s / 1.5 s: the claim is Kafka's, that a controller busy with a large request still
answers heartbeats within a broker's session. At 1.5 s the test measured the machine instead:
on two cores shared with other work (load average 9) the controller process was not scheduled
for 1.5 s at a time and fenced brokers, and followers creating 1,000 logs fell 1.5 s behind, so
the leaders shrank and grew 1,000 ISRs through the controller, while it passed on a quiet
machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import BROKERS, CLUSTER_OVERRIDES, _check_clean_stop

TOPICS = 1000
# Long enough for a loaded CI machine (the fresh-clone run of e41ba3d, three workers on 2 cores,
# timed out at 60 s; about 50 s on an idle one), for every call of the test and for librdkafka's
# own request deadline (the run of c3ff680 failed with "Failed while waiting for response from
# broker" in one of them): what is asserted is that nobody is fenced.
CLIENT_TIMEOUT_S = 180
KAFKA_DEFAULTS = {
    "broker.heartbeat.interval.ms": 2000,
    "broker.session.timeout.ms": 9000,
    "replica.lag.time.max.ms": 30000,
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster.start(tmp_path, brokers=BROKERS, overrides=CLUSTER_OVERRIDES | KAFKA_DEFAULTS)
    yield started
    _check_clean_stop(started)


def test_a_thousand_topics_created_and_deleted_with_nobody_fenced(cluster: Cluster):
    admin = AdminClient(
        {"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": CLIENT_TIMEOUT_S * 1000}
    )
    names = [f"many-{index:04d}" for index in range(TOPICS)]
    created = admin.create_topics(
        [NewTopic(name, 1, 3) for name in names],
        request_timeout=CLIENT_TIMEOUT_S,
        operation_timeout=CLIENT_TIMEOUT_S,
    )
    for future in created.values():
        future.result(timeout=CLIENT_TIMEOUT_S + 10)
    listed = admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics
    assert set(names) <= set(listed)
    assert all(len(listed[name].partitions[0].replicas) == 3 for name in names)

    deleted = admin.delete_topics(
        names, request_timeout=CLIENT_TIMEOUT_S, operation_timeout=CLIENT_TIMEOUT_S
    )
    for future in deleted.values():
        future.result(timeout=CLIENT_TIMEOUT_S + 10)
    assert not set(names) & set(admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics)
    controller_log = cluster.controller.stderr_path.read_text()
    # The controller's own line (broker_lifecycle.watch_sessions), not any "fenced": the
    # stall watchdog's stacks may quote code such as channel_manager's even_if_fenced.
    assert "fenced broker(s)" not in controller_log, "a broker missed its heartbeats meanwhile"
