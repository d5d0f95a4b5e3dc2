"""The time of day stepped on the controller (NTP, an operator's `date -s`): broker sessions
are intervals on the monotonic clock, so a jump forward fences no one and a jump back does
not keep a dead broker alive.

The controller runs under libfaketime (Debian's `faketime` package), which shifts only the
wall clock here (FAKETIME_DONT_FAKE_MONOTONIC); the offset is read from a file on every call,
so the test steps the clock by rewriting it. With sessions on the wall clock, the jump
forward fenced all three brokers at the controller's next check, and after the jump back a
paused broker was never fenced.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minibroker.tools.launcher import BrokerStartError, Cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, CONVERGENCE_TIMEOUT, create_replicated_topic
from tests.conftest import wait_for

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
TOPIC = "clocked"
ONE_DAY_S = 86_400

pytestmark = pytest.mark.skipif(
    not LIBFAKETIME.exists(), reason="needs libfaketime (apt-get install faketime)"
)


@pytest.fixture
def clocked_cluster(tmp_path: Path):
    """A 3-broker cluster whose controller reads its time of day through an offset file."""
    offset_file = tmp_path / "controller-clock-offset"
    offset_file.write_text("+0\n")
    cluster = Cluster.start(tmp_path, brokers=3, overrides=CLUSTER_OVERRIDES)
    cluster.controller.extra_env = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    try:
        cluster.controller.restart()
        cluster.controller.wait_ready()
        cluster.wait_ready()
        create_replicated_topic(cluster, TOPIC, 3)
        yield cluster, offset_file
    finally:
        for node in cluster.nodes:
            if node.paused:
                node.resume()
        try:
            codes = cluster.stop()
        except BrokerStartError as hung:
            pytest.fail(str(hung))
    assert set(codes.values()) <= {0}, f"a node did not stop cleanly: {codes}"
    assert cluster.controller.exit_code == 0


def live_brokers(cluster: Cluster, via: int) -> set[int]:
    return {int(entry.node_id) for entry in cluster.metadata(via=via).brokers}


def fenced_in_controller_log(cluster: Cluster) -> list[str]:
    return [
        line
        for line in cluster.controller.stderr_path.read_text().splitlines()
        if "fenced broker(s)" in line
    ]


def pause_and_wait_until_fenced(cluster: Cluster) -> tuple[int, int]:
    """SIGSTOP broker 3 and wait until the controller fences it (its session expiring is the
    only way: a paused broker's port still accepts). Returns (paused, a live broker)."""
    paused, witness = 3, 1
    cluster.brokers[paused].pause()
    wait_for(
        lambda: paused not in live_brokers(cluster, via=witness),
        CONVERGENCE_TIMEOUT,
        f"the controller to fence paused broker {paused}",
    )
    return paused, witness


def leaders(cluster: Cluster, via: int) -> dict[int, int]:
    (topic,) = cluster.metadata([TOPIC], via).topics
    return {p.partition_index: int(p.leader_id) for p in topic.partitions}


def all_brokers_live(cluster: Cluster) -> int:
    """Wait until every broker is registered and unfenced; return how many fence lines the
    controller has logged so far. On a loaded machine a broker can miss its session once while
    the fixture restarts the controller (CI: broker 3 fenced, then back, before the jump), so a
    test counts the fences after its own step, not since the controller started."""
    wait_for(
        lambda: live_brokers(cluster, via=1) == {1, 2, 3},
        CONVERGENCE_TIMEOUT,
        "every broker to be registered and unfenced",
    )
    return len(fenced_in_controller_log(cluster))


def test_a_jump_forward_fences_no_live_broker(clocked_cluster):
    cluster, offset_file = clocked_cluster
    earlier = all_brokers_live(cluster)
    before = leaders(cluster, via=1)
    offset_file.write_text(f"+{ONE_DAY_S}\n")
    paused, witness = pause_and_wait_until_fenced(cluster)
    # The controller checked sessions after the jump (it fenced the paused broker), and
    # fenced only that one: the partitions the others led kept their leader.
    assert live_brokers(cluster, via=witness) == {1, 2}
    after = leaders(cluster, via=witness)
    kept = {index: leader for index, leader in before.items() if leader != paused}
    assert kept and {index: after[index] for index in kept} == kept
    fenced = fenced_in_controller_log(cluster)[earlier:]
    assert len(fenced) == 1 and f"[{paused}]" in fenced[0], fenced


def test_a_jump_back_still_fences_a_paused_broker(clocked_cluster):
    cluster, offset_file = clocked_cluster
    all_brokers_live(cluster)
    offset_file.write_text(f"-{ONE_DAY_S}\n")
    paused, witness = pause_and_wait_until_fenced(cluster)
    assert live_brokers(cluster, via=witness) == {1, 2}
    cluster.brokers[paused].resume()
    # Continued, it finds itself fenced, registers again and is back in the cluster.
    wait_for(
        lambda: live_brokers(cluster, via=witness) == {1, 2, 3},
        CONVERGENCE_TIMEOUT,
        "the resumed broker to register again",
    )
    assert cluster.controller.running
