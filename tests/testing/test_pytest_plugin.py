"""The pytest plugin (minibroker.testing.plugin) as an application's test suite meets it: each
test here writes a small project into a temporary directory and runs pytest on it in a
subprocess (pytester), with the plugin loaded by its entry point, as `pip install minibroker`
leaves it. The inner tests talk to the clusters with real clients (confluent-kafka), and see
the faults as they would see them on Kafka.
"""

from __future__ import annotations

import os
import re

import pytest

from minibroker.testing import Cluster, ClusterStartError
from minibroker.tools.launcher import zookeeper_installed

pytest_plugins = ["pytester"]

# The inner runs' own tests must never hang the outer one.
INNER_TIMEOUT = 120


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=INNER_TIMEOUT)


def test_fixtures_start_share_and_stop_and_a_failure_carries_the_logs(pytester):
    """kafka_broker serves a producer and a consumer; a module-scoped kafka_cluster is one
    cluster for the module's tests; every node is gone after the run; a failing test's report
    has every node's log."""
    pytester.makepyfile(
        test_single="""
        import os
        import pytest
        from confluent_kafka import Consumer, Producer

        pytestmark = pytest.mark.minibroker(scope="module")

        def test_round_trip(kafka_broker):
            kafka_broker.create_topic("greetings")
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
            producer.produce("greetings", b"hello")
            assert producer.flush(15) == 0
            consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers,
                                 "group.id": "g", "auto.offset.reset": "earliest"})
            consumer.subscribe(["greetings"])
            message = None
            for _ in range(30):
                message = consumer.poll(1)
                if message is not None and message.error() is None:
                    break
            consumer.close()
            assert message.value() == b"hello"
            with open("pids", "a") as out:
                out.write(" ".join(str(kafka_broker.node(n).pid) for n in kafka_broker.node_ids))
                out.write("\\n")

        def test_fails(kafka_broker):
            assert kafka_broker.bootstrap_servers == "not this"
        """,
        test_shared="""
        import pytest

        pytestmark = pytest.mark.minibroker(scope="module", brokers=2)
        seen = []

        def test_first(kafka_cluster):
            assert kafka_cluster.broker_ids == [1, 2]
            seen.append(kafka_cluster.bootstrap_servers)
            kafka_cluster.kill(2)  # reset before the next test restarts it

        def test_second(kafka_cluster):
            assert seen == [kafka_cluster.bootstrap_servers]
            kafka_cluster.create_topic("both", partitions=2, replication_factor=2)
            kafka_cluster.wait_until_in_sync("both", timeout=20)
            with open("pids", "a") as out:
                out.write(" ".join(str(kafka_cluster.node(n).pid) for n in kafka_cluster.node_ids))
                out.write("\\n")

        def test_third_fails(kafka_cluster):
            assert kafka_cluster.broker_ids == []
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=3, failed=2)
    output = result.stdout.str()
    assert re.search(r"started node 1 as", output), output[-3000:]
    # Each failing test's report: every node of its cluster, the controller included.
    sections = re.findall(r"-+ (minibroker [\w-]+ log) -+", output)
    assert sorted(sections) == [
        "minibroker broker-1 log",  # test_single's test_fails
        "minibroker broker-1 log",  # test_shared's test_third_fails, and the next two
        "minibroker broker-2 log",
        "minibroker controller-0 log",
    ], sections
    pids = [
        int(pid)
        for line in (pytester.path / "pids").read_text().split("\n")
        for pid in line.split()
    ]
    assert len(pids) == 1 + 3  # one broker for test_single, a controller and two brokers
    alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and _not_zombie(pid)]
    assert alive == []


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_scope_from_the_ini_option_or_a_marker_and_data_under_pytests_temp(pytester):
    """The ini option minibroker_scope = session gives two modules one broker; a marker on a
    class narrows it to the class's tests, a marker on a test to that test; each cluster's
    data and logs are under pytest's base temporary directory."""
    pytester.makeini("[pytest]\nminibroker_scope = session\n")
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def record(tmp_path_factory):
            def record(tag, cluster):
                assert cluster.data_dir.is_relative_to(tmp_path_factory.getbasetemp())
                assert cluster.log_path(1).is_relative_to(cluster.data_dir)
                with open("seen", "a") as out:
                    out.write(f"{tag} {cluster.bootstrap_servers}\\n")
            return record
        """
    )
    pytester.makepyfile(
        test_a="""
        import pytest

        def test_session_a(kafka_broker, record):
            record("session", kafka_broker)

        @pytest.mark.minibroker(scope="class")
        class TestClass:
            def test_one(self, kafka_broker, record):
                record("class", kafka_broker)

            def test_two(self, kafka_broker, record):
                record("class", kafka_broker)

        @pytest.mark.minibroker(scope="function")
        def test_own(kafka_broker, record):
            record("function", kafka_broker)
        """,
        test_b="""
        def test_session_b(kafka_broker, record):
            record("session", kafka_broker)
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=5)
    seen: dict[str, list[str]] = {}
    for line in (pytester.path / "seen").read_text().splitlines():
        tag, servers = line.split()
        seen.setdefault(tag, []).append(servers)
    assert len(seen["session"]) == len(seen["class"]) == 2
    assert len(set(seen["session"])) == len(set(seen["class"])) == 1
    assert len({*seen["session"], *seen["class"], *seen["function"]}) == 3


def test_a_node_that_crashed_or_shut_down_unclean_fails_the_teardown(pytester):
    """A node that died during a test, not by the test's own fault (here a SIGKILL from
    outside the Cluster, as a crash), fails the teardown that closes its cluster, with the
    node and its exit code named; a node killed with the Cluster's fault does not, nor does
    a cluster that stops cleanly."""
    pytester.makepyfile(
        test_crash="""
        import os
        import signal
        import time

        def test_crashed(kafka_broker):
            node = kafka_broker.node(1)
            os.kill(node.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while node.running and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not node.running

        def test_killed_by_the_fault(kafka_broker):
            kafka_broker.kill(1)

        def test_clean(kafka_broker):
            kafka_broker.create_topic("fine")
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_crashed*",
            "*unclean minibroker shutdown:*",
            "*broker 1 exited with code -9 before the cluster was closed*",
        ]
    )


FAULTS = """
import logging
import time

import pytest
from confluent_kafka import KafkaError, Producer

from minibroker.testing import NodeNotRunningError, UnknownNodeError

pytestmark = pytest.mark.minibroker(
    scope="module", brokers=3, server_properties={"replica.lag.time.max.ms": 1000}
)


def produce(cluster, topic, timeout_ms, **config):
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "message.timeout.ms": timeout_ms, "linger.ms": 0, **config})
    errors = []
    producer.produce(topic, b"x", on_delivery=lambda error, message: errors.append(error))
    producer.flush(timeout_ms / 1000 + 10)
    return errors


def test_a_paused_leader_times_a_producer_out_until_it_resumes(kafka_cluster):
    kafka_cluster.create_topic("paused", replication_factor=1)
    assert produce(kafka_cluster, "paused", 10000) == [None]
    leader = kafka_cluster.leader_of("paused", 0)
    kafka_cluster.pause(leader)
    [error] = produce(kafka_cluster, "paused", 1500)
    assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT
    kafka_cluster.resume(leader)
    assert produce(kafka_cluster, "paused", 15000) == [None]


def test_a_cut_off_follower_leaves_the_isr_and_comes_back(kafka_cluster):
    kafka_cluster.create_topic("cut", replication_factor=3)
    kafka_cluster.wait_until_in_sync("cut", timeout=20)
    leader = kafka_cluster.leader_of("cut", 0)
    follower = next(node for node in kafka_cluster.broker_ids if node != leader)
    kafka_cluster.cut_off(follower, from_clients=False)
    deadline = time.monotonic() + 20
    while follower in kafka_cluster.isr_of("cut", 0):
        assert time.monotonic() < deadline, "the cut-off follower stayed in the ISR"
        time.sleep(0.05)
    assert produce(kafka_cluster, "cut", 10000, acks="all") == [None]
    kafka_cluster.heal(follower)
    kafka_cluster.wait_until_in_sync("cut", timeout=20)
    assert follower in kafka_cluster.isr_of("cut", 0)


def test_added_latency_shows_in_round_trips(kafka_cluster):
    kafka_cluster.create_topic("slow", replication_factor=1)
    leader = kafka_cluster.leader_of("slow", 0)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "linger.ms": 0})

    def round_trip():
        started = time.monotonic()
        producer.produce("slow", b"x")
        assert producer.flush(10) == 0
        return time.monotonic() - started

    round_trip()  # metadata and connections
    before = min(round_trip() for _ in range(3))
    kafka_cluster.add_latency(leader, 300)
    after = min(round_trip() for _ in range(3))
    assert after - before >= 0.25, (before, after)


def test_a_leader_cut_off_from_clients_times_a_producer_out_until_healed(kafka_cluster):
    kafka_cluster.create_topic("unreachable", replication_factor=1)
    assert produce(kafka_cluster, "unreachable", 10000) == [None]
    leader = kafka_cluster.leader_of("unreachable", 0)
    kafka_cluster.cut_off(leader, from_brokers=False)
    [error] = produce(kafka_cluster, "unreachable", 1500)
    assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT
    kafka_cluster.heal(leader)
    assert produce(kafka_cluster, "unreachable", 15000) == [None]


def test_dropped_connections_make_a_client_reconnect(kafka_cluster):
    kafka_cluster.create_topic("dropped", replication_factor=1)
    leader = kafka_cluster.leader_of("dropped", 0)
    address = kafka_cluster.proxy(leader).address
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("dropped")
    logger.setLevel(logging.INFO)  # librdkafka logs a disconnection at syslog level 6, INFO
    logger.addHandler(Collect())
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "linger.ms": 0,
                         "logger": logger})
    producer.produce("dropped", b"before")
    assert producer.flush(10) == 0
    assert kafka_cluster.drop_connections(leader) >= 1
    producer.produce("dropped", b"after")
    assert producer.flush(15) == 0
    assert any(address in line and "Disconnected" in line for line in lines), lines


def test_a_bandwidth_limit_slows_a_large_produce(kafka_cluster):
    kafka_cluster.create_topic("narrow", replication_factor=1)
    leader = kafka_cluster.leader_of("narrow", 0)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "linger.ms": 0})
    producer.produce("narrow", b"x")
    assert producer.flush(10) == 0  # metadata and connections
    kafka_cluster.limit_bandwidth(leader, 100_000)
    started = time.monotonic()
    producer.produce("narrow", b"x" * 150_000)
    assert producer.flush(20) == 0
    # 150 kB at 100 kB/s: at least 1.5 s however idle the machine (a lower bound only).
    assert time.monotonic() - started >= 1.4


def test_a_stopped_leader_hands_over_and_comes_back_on_restart(kafka_cluster):
    kafka_cluster.create_topic("handover", replication_factor=3)
    kafka_cluster.wait_until_in_sync("handover", timeout=20)
    leader = kafka_cluster.leader_of("handover", 0)
    assert kafka_cluster.stop(leader) == 0
    log = kafka_cluster.log_path(leader).read_text()
    assert "controlled shutdown: leadership moved to other brokers" in log
    deadline = time.monotonic() + 20
    while kafka_cluster.leader_of("handover", 0) in (leader, -1, None):
        assert time.monotonic() < deadline, "the leadership stayed with the stopped broker"
        time.sleep(0.05)
    assert produce(kafka_cluster, "handover", 10000, acks="all") == [None]
    kafka_cluster.restart(leader)
    kafka_cluster.wait_until_in_sync("handover", timeout=20)
    assert leader in kafka_cluster.isr_of("handover", 0)


def test_bad_use_is_named(kafka_cluster):
    with pytest.raises(UnknownNodeError, match="no node 9 in this cluster; its nodes are"):
        kafka_cluster.pause(9)
    kafka_cluster.stop(2)
    stopped = r"cannot add latency to node 2: it is not running \\(stopped\\)"
    with pytest.raises(NodeNotRunningError, match=stopped):
        kafka_cluster.add_latency(2, 100)
    with pytest.raises(NodeNotRunningError, match="restart"):
        kafka_cluster.kill(2)
"""


def test_faults_are_seen_by_a_real_client(pytester):
    pytester.makepyfile(test_faults=FAULTS)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=8)


def test_xdist_workers_run_clusters_side_by_side(pytester):
    """Two workers, one test each (--dist loadfile): each test waits for the other's cluster
    to be up, so they can only pass side by side, on ports that do not collide."""
    body = """
        import pathlib, time, os

        def test_side_by_side(kafka_broker):
            kafka_broker.create_topic("t")
            me = os.environ["PYTEST_XDIST_WORKER"]
            pathlib.Path(me).write_text(kafka_broker.bootstrap_servers)
            deadline = time.monotonic() + 60
            while len(list(pathlib.Path(".").glob("gw*"))) < 2:
                assert time.monotonic() < deadline, "the other worker's cluster never came up"
                time.sleep(0.05)
        """
    pytester.makepyfile(test_one=body, test_two=body)
    result = run(pytester, "-n", "2", "--dist", "loadfile")
    result.assert_outcomes(passed=2)
    addresses = [(pytester.path / worker).read_text() for worker in ("gw0", "gw1")]
    assert addresses[0] != addresses[1]


def test_a_cluster_that_cannot_start_says_why(tmp_path):
    with (
        pytest.raises(ClusterStartError) as failure,
        Cluster(brokers=1, data_dir=tmp_path, server_properties={"num.partitions": "many"}),
    ):
        pass
    message = str(failure.value)
    assert "did not start" in message
    assert "num.partitions" in message  # from the node's log tail


@pytest.mark.skipif(not zookeeper_installed(), reason="needs ZooKeeper (the Debian package)")
def test_the_zookeeper_mode_serves_a_client(tmp_path):
    from confluent_kafka import Producer

    with Cluster(brokers=1, data_dir=tmp_path, zookeeper=True) as cluster:
        assert cluster.node_ids == [1]  # no controller process: a broker is elected
        assert "zookeeper.connect" in cluster.log_path(1).read_text()
        cluster.create_topic("kept")
        producer = Producer(cluster.client_config())
        errors = []
        producer.produce("kept", b"x", on_delivery=lambda error, message: errors.append(error))
        producer.flush(15)
        assert errors == [None]


def test_a_secure_cluster_takes_sasl_ssl_clients(tmp_path):
    from confluent_kafka import Producer

    with Cluster(brokers=1, data_dir=tmp_path, secure=True) as cluster:
        cluster.create_topic("secret")
        config = cluster.client_config(secure=True)
        assert config["security.protocol"] == "SASL_SSL"
        errors = []
        producer = Producer(config)
        producer.produce("secret", b"x", on_delivery=lambda error, message: errors.append(error))
        producer.flush(15)
        assert errors == [None]
        refused = Producer({**config, "sasl.password": "wrong", "message.timeout.ms": 2000})
        refused.produce("secret", b"x", on_delivery=lambda error, message: errors.append(error))
        refused.flush(10)
        assert errors[1] is not None


def test_a_bad_scope_or_marker_is_named_before_anything_starts(pytester):
    pytester.makeini("[pytest]\nminibroker_scope = forever\n")
    pytester.makepyfile(
        test_bad="""
        import pytest

        def test_scope(kafka_broker):
            pass

        @pytest.mark.minibroker(scope="module", replicas=3)
        def test_marker(kafka_cluster):
            pass
        """
    )
    # In process: nothing starts, so the subprocess's start-up would be the whole cost.
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*minibroker scope 'forever' is not one of function, class, module, session*",
            "*@pytest.mark.minibroker takes keyword arguments*got ?'replicas'?*",
        ]
    )
