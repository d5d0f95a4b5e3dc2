"""ZooKeeper mode against a real ZooKeeper (the Debian package's, started per test): the
controller is a broker elected through /controller; killing it with another leader, pausing
it past its session, and restarting ZooKeeper itself leave the cluster serving and lose
nothing acknowledged."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kio.schema.errors import ErrorCode

from minibroker.tools.launcher import (
    BrokerStartError,
    Cluster,
    ZooKeeperServer,
    zookeeper_installed,
)
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    create_replicated_topic,
    lost_and_duplicated,
    read_partitions,
    wait_for_new_leader,
)
from tests.cluster.test_controller_requests import TOPIC as COMMANDED_TOPIC
from tests.cluster.test_controller_requests import make_leader_and_isr
from tests.conftest import TEST_CLIENT_ID, exchange, wait_for
from tests.integration.test_client_quotas import alter as alter_quotas
from tests.integration.test_client_quotas import describe as describe_quotas
from tests.integration.test_client_quotas import described as quotas_described
from tests.integration.test_client_quotas import entity as quota_entity
from tests.integration.test_client_quotas import produce_throttle_ms
from tests.integration.test_client_quotas import setting as quota_setting

pytestmark = pytest.mark.skipif(
    not zookeeper_installed(),
    reason="ZooKeeper is not installed (apt-get install zookeeper: /usr/share/java/zookeeper.jar)",
)

CHROOT = "/minibroker"
SESSION_TIMEOUT_MS = 3000
ZOOKEEPER_OVERRIDES = {**CLUSTER_OVERRIDES, "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}
PARTITIONS = 3


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer.start(tmp_path / "zookeeper" / "data")
    yield server
    server.kill()


@pytest.fixture
def zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    """The test's own view of ZooKeeper, inside the cluster's chroot."""
    client = KazooClient(
        hosts=zookeeper.connect_string(CHROOT),
        timeout=10,
        connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
    )
    client.start(30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_cluster(tmp_path: Path, zookeeper: ZooKeeperServer, request) -> Iterator[Cluster]:
    """Brokers on ZooKeeper, three unless the test is parametrized (indirectly) with
    ``{"brokers": N}`` and/or ``{"overrides": {...}}``; at teardown the running ones must stop
    cleanly."""
    shape = getattr(request, "param", {})
    started = Cluster.start(
        tmp_path,
        brokers=shape.get("brokers", 3),
        overrides={**ZOOKEEPER_OVERRIDES, **shape.get("overrides", {})},
        zookeeper_connect=zookeeper.connect_string(CHROOT),
    )
    yield started
    print("node logs:", *(str(node.stderr_path) for node in started.nodes), sep="\n  ")
    problems = [
        f"broker {node.node_id} exited on its own with code {node.exit_code}:\n{node.log_tail()}"
        for node in started.nodes
        if node.exit_code not in (None, 0, -signal.SIGKILL)
    ]
    for node in started.nodes:
        if node.paused:
            node.resume()
    still_running = {node.node_id for node in started.nodes if node.running}
    try:
        exit_codes = started.stop()
    except BrokerStartError as hung:
        problems.append(str(hung))
        exit_codes = {}
    problems += [
        f"broker {node} exited with {exit_codes[node]} on SIGTERM"
        for node in still_running
        if exit_codes.get(node, 0) != 0
    ]
    if problems:
        pytest.fail("unclean cluster shutdown\n" + "\n".join(problems))


def controller_and_epoch(zk: KazooClient) -> tuple[int, int] | None:
    """The elected broker and the controller epoch, as ZooKeeper holds them; None between
    two controllers, and while the test's own session is being re-established (it can
    expire while ZooKeeper restarts on a loaded machine; kazoo then opens a new one)."""
    try:
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        return controller, int(zk.get("/controller_epoch")[0])
    except (NoNodeError, ConnectionLoss, SessionExpiredError):
        return None


def partition_states(zk: KazooClient, topic: str, partitions: int = PARTITIONS) -> dict[int, dict]:
    return {
        partition: json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])
        for partition in range(partitions)
    }


def wait_for_new_controller(zk: KazooClient, old: tuple[int, int]) -> tuple[int, int]:
    return wait_for(
        lambda: (now := controller_and_epoch(zk)) is not None and now[0] != old[0] and now,
        CONVERGENCE_TIMEOUT,
        f"a controller other than broker {old[0]}",
    )


class IdempotentProducer(BackgroundProducer):
    """The failover tests' background producer with idempotence on, as the brief's clients
    run it: a retry after the failover must not store a message twice."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        super().__init__(bootstrap, topic, partitions)
        self._settings["enable.idempotence"] = True


@pytest.mark.parametrize("zk_cluster", [{"brokers": 4}], indirect=True)
def test_kill_9_of_the_controller_and_a_leader_elects_another_and_loses_nothing(
    zk_cluster: Cluster, zk: KazooClient
):
    """Four brokers; the controller and another leader killed at once under an idempotent
    acks=all producer. Each partition holds at most one of the two, so two of its three
    replicas survive and min.insync.replicas=2 can still be met."""
    topic = "zk-failover"
    first = wait_for(lambda: controller_and_epoch(zk), CONVERGENCE_TIMEOUT, "a controller")
    controller = first[0]
    leader, *survivors = [node for node in zk_cluster.brokers if node != controller]
    assignment = [
        [controller, *survivors],
        [leader, *survivors],
        [survivors[0], controller, survivors[1]],
        [survivors[1], leader, survivors[0]],
    ]
    admin = AdminClient({"bootstrap.servers": zk_cluster.bootstrap})
    admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=len(assignment),
                replica_assignment=assignment,
                config={"min.insync.replicas": "2"},
            )
        ]
    )[topic].result(30)
    for partition, replicas in enumerate(assignment):
        zk_cluster.wait_for_isr(topic, partition, replicas, CONVERGENCE_TIMEOUT)
    assert zk_cluster.leader_of(topic, 0) == controller
    assert zk_cluster.leader_of(topic, 1) == leader
    with IdempotentProducer(zk_cluster.bootstrap, topic, len(assignment)) as producer:
        producer.wait_for_acks(2_000)
        zk_cluster.brokers[controller].kill()
        zk_cluster.brokers[leader].kill()
        second = wait_for_new_controller(zk, first)
        assert second[0] in survivors
        assert second[1] > first[1], "a new election bumps /controller_epoch"
        for partition, old_leader in ((0, controller), (1, leader)):
            wait_for_new_leader(zk_cluster, topic, partition, old_leader, CONVERGENCE_TIMEOUT)
        # Saved before any broker was told: ZooKeeper already holds the new leaders.
        states = partition_states(zk, topic, len(assignment))
        for state in states.values():
            assert state["leader"] in survivors, states
            assert not {controller, leader} & set(state["isr"]), states
        producer.wait_for_acks(len(producer.acked) + 2_000)
        producer.stop()
    assert producer.errors == [], producer.errors[:10]
    assert producer.undelivered == 0
    stored = read_partitions(zk_cluster.bootstrap, topic, len(assignment))
    lost, duplicates = lost_and_duplicated(producer.acked, stored)
    print(f"acknowledged {len(producer.acked)}, stored {len(stored)}, duplicates {duplicates}")
    assert lost == [], f"{len(lost)} acknowledged messages lost, first {lost[:10]}"
    assert duplicates == 0


def test_a_deposed_controller_that_wakes_up_changes_nothing(zk_cluster: Cluster, zk: KazooClient):
    topic = "zk-deposed"
    create_replicated_topic(zk_cluster, topic, PARTITIONS)
    create_replicated_topic(zk_cluster, COMMANDED_TOPIC, 1)
    first = wait_for(lambda: controller_and_epoch(zk), CONVERGENCE_TIMEOUT, "a controller")
    deposed = zk_cluster.brokers[first[0]]
    deposed.pause()
    second = wait_for_new_controller(zk, first)
    for partition in range(PARTITIONS):
        wait_for(
            lambda p=partition: deposed.node_id not in partition_states(zk, topic)[p]["isr"],
            CONVERGENCE_TIMEOUT,
            f"broker {deposed.node_id} out of the ISR of {topic}-{partition}",
        )
    decided = partition_states(zk, topic)
    deposed.resume()
    # Its clocks jumped past every broker's session: as controller it would fence them all.
    # It must find out it was deposed instead, and come back as a plain broker.
    wait_for(
        lambda: (
            f"stopped acting as controller of epoch {first[1]}" in deposed.stderr_path.read_text()
        ),
        CONVERGENCE_TIMEOUT,
        f"broker {deposed.node_id} to notice it was deposed",
    )
    wait_for(
        lambda: zk.exists(f"/brokers/ids/{deposed.node_id}") is not None,
        CONVERGENCE_TIMEOUT,
        f"broker {deposed.node_id} registered again",
    )
    assert controller_and_epoch(zk) == second
    after = partition_states(zk, topic)
    for partition, state in after.items():
        # Only the new controller wrote since: the deposed broker may rejoin the ISR, and its
        # return may move leadership back to a preferred replica, both under the new epoch.
        assert state == decided[partition] or state["controller_epoch"] == second[1], (
            partition,
            decided[partition],
            state,
        )
    metadata = zk_cluster.metadata()
    assert {broker.node_id for broker in metadata.brokers} >= {
        node for node in zk_cluster.brokers if node != deposed.node_id
    }
    # What it would have sent as controller is refused: the brokers know the newer epoch.
    for broker in zk_cluster.brokers.values():
        if broker is not deposed:
            command = make_leader_and_isr(
                zk_cluster, broker, controller_id=deposed.node_id, controller_epoch=first[1]
            )
            refusal = exchange(broker.bootstrap, command)
            assert refusal.error_code == ErrorCode.stale_controller_epoch, refusal


def test_zookeeper_restarted_the_cluster_keeps_serving_and_resumes(
    zk_cluster: Cluster, zk: KazooClient, zookeeper: ZooKeeperServer
):
    topic = "zk-restart"
    create_replicated_topic(zk_cluster, topic, PARTITIONS, config={"min.insync.replicas": "2"})
    with IdempotentProducer(zk_cluster.bootstrap, topic, PARTITIONS) as producer:
        producer.wait_for_acks(1_000)
        zookeeper.stop()
        producer.wait_for_acks(len(producer.acked) + 2_000)  # leaders need no ZooKeeper
        zookeeper.launch()
        zookeeper.wait_ready()
        producer.wait_for_acks(len(producer.acked) + 1_000)
        producer.stop()
    assert producer.errors == [], producer.errors[:10]
    stored = read_partitions(zk_cluster.bootstrap, topic, PARTITIONS)
    lost, duplicates = lost_and_duplicated(producer.acked, stored)
    assert lost == [] and duplicates == 0, (lost[:10], duplicates)
    # The controller works again: a new topic is decided, saved in ZooKeeper and served.
    wait_for(lambda: controller_and_epoch(zk), CONVERGENCE_TIMEOUT, "a controller")
    create_replicated_topic(zk_cluster, "zk-after-restart", PARTITIONS)
    assert zk.exists("/brokers/topics/zk-after-restart/partitions/2/state") is not None


# The authorizer on, and every client (PLAINTEXT: ANONYMOUS) a super user, so the test's
# admin client may manage ACLs and users.
SECURED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


def _acl(principal: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        "audited",
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def _described_acls(admin: AdminClient) -> set[tuple[str, str]]:
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return {
        (binding.principal, binding.operation.name)
        for binding in admin.describe_acls(every).result(15)
    }


def _scram_iterations(admin: AdminClient, user: str) -> list[int] | None:
    """The user's credentials' iterations, or None while the request fails."""
    try:
        described = admin.describe_user_scram_credentials([user])[user].result(15)
    except KafkaException as error:
        print(f"DescribeUserScramCredentials: {error}")
        return None
    return [item.iterations for item in described.scram_credential_infos]


def _created(admin: AdminClient, binding: AclBinding) -> bool:
    """CreateAcls succeeded (creating an existing ACL succeeds too, so it may be retried)."""
    try:
        admin.create_acls([binding])[binding].result(15)
    except KafkaException as error:
        print(f"CreateAcls: {error}")
        return False
    return True


@pytest.mark.parametrize("zk_cluster", [{"overrides": SECURED}], indirect=True)
def test_acls_scram_users_and_quotas_survive_a_kill_9_of_the_controller(
    zk_cluster: Cluster, zk: KazooClient
):
    first = wait_for(lambda: controller_and_epoch(zk), CONVERGENCE_TIMEOUT, "a controller")
    alice = quota_entity(user="alice")
    set_alice = [{"entity": alice, "ops": [quota_setting("producer_byte_rate", 4096)]}]
    wait_for(
        lambda: (
            alter_quotas(zk_cluster.brokers[1].bootstrap, set_alice).entries[0].error_code
            == ErrorCode.none
        ),
        CONVERGENCE_TIMEOUT,
        "the controller to set alice's quota",
    )
    admin = AdminClient({"bootstrap.servers": zk_cluster.bootstrap})
    admin.create_acls([_acl("User:alice", AclOperation.READ)])[
        _acl("User:alice", AclOperation.READ)
    ].result(15)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"alice-secret")]
    )["alice"].result(15)

    # The user's quota and credential share Kafka's /config/users/alice znode.
    saved = json.loads(zk.get("/config/users/alice")[0])["config"]
    assert saved["producer_byte_rate"] == "4096" and "SCRAM-SHA-512" in saved

    zk_cluster.brokers[first[0]].kill()
    successor = wait_for_new_controller(zk, first)
    # librdkafka sends these requests to the controller its first Metadata answer names and
    # waits for that broker: a survivor the new controller's UpdateMetadata has not reached yet
    # names the dead one (seen in CI: DescribeUserScramCredentials unanswered for 15 s).
    wait_for_survivors_to_name(zk_cluster, first[0], successor[0])
    survivors = ",".join(
        broker.bootstrap for node, broker in zk_cluster.brokers.items() if node != first[0]
    )
    admin = AdminClient({"bootstrap.servers": survivors})
    # The new controller answers for the users itself (retried: a request may still fail while
    # it loads).
    iterations = wait_for(
        lambda: _scram_iterations(admin, "alice"),
        CONVERGENCE_TIMEOUT,
        "the new controller to describe alice's SCRAM credential",
    )
    assert iterations == [8192]
    # A change makes the new controller push its whole ACL set to every broker: the ACL
    # created under the previous controller must be in it.
    wait_for(
        lambda: _created(admin, _acl("User:bob", AclOperation.WRITE)),
        CONVERGENCE_TIMEOUT,
        "the new controller to create an ACL",
    )
    expected = {("User:alice", "READ"), ("User:bob", "WRITE")}
    wait_for(
        lambda: _described_acls(admin) == expected,
        CONVERGENCE_TIMEOUT,
        f"DescribeAcls to show {expected}",
    )
    living = [broker for node, broker in zk_cluster.brokers.items() if node != first[0]]
    users = [{"entity_type": "user", "match_type": 2, "match": None}]
    described = wait_for(
        lambda: (
            (answer := describe_quotas(living[0].bootstrap, users)).error_code == ErrorCode.none
            and quotas_described(answer)
        ),
        CONVERGENCE_TIMEOUT,
        "the new controller to describe alice's quota",
    )
    assert described == {(("user", "alice"),): {"producer_byte_rate": 4096.0}}
    # The new controller pushes a quota to both remaining brokers, which throttle with it.
    tests_client = quota_entity(client_id=TEST_CLIENT_ID)
    answer = alter_quotas(
        living[1].bootstrap,
        [{"entity": tests_client, "ops": [quota_setting("producer_byte_rate", 1000)]}],
    )
    assert answer.entries[0].error_code == ErrorCode.none
    admin.create_topics([NewTopic("zk-quota", 2, 1)])["zk-quota"].result(15)
    for partition in range(2):
        leader = wait_for(
            lambda partition=partition: zk_cluster.leader_of("zk-quota", partition),
            CONVERGENCE_TIMEOUT,
            f"a leader of zk-quota-{partition}",
        )
        broker = zk_cluster.brokers[leader]
        throttle = wait_for(
            lambda broker=broker, partition=partition: produce_throttle_ms(
                broker, "zk-quota", partition
            ),
            CONVERGENCE_TIMEOUT,
            f"broker {leader} to lead zk-quota-{partition}",
        )
        assert throttle > 0, f"broker {leader} did not throttle"
    assert {zk_cluster.leader_of("zk-quota", p) for p in range(2)} <= {b.node_id for b in living}


def named_controller(bootstrap: str) -> int | None:
    """The controller confluent-kafka's describe_cluster reports, asking one broker only;
    None while the broker names none (librdkafka then times out "waiting for controller", as
    right after a controller's death on a busy machine), so that wait_for asks again."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        controller = admin.describe_cluster(request_timeout=10).result(15).controller
    except KafkaException as error:
        if error.args[0].code() != KafkaError._TIMED_OUT:
            raise
        return None
    return None if controller is None else controller.id


def wait_for_survivors_to_name(cluster: Cluster, dead: int, controller: int) -> None:
    """Until every broker but `dead` names `controller` in its Metadata answers."""
    for node_id, node in cluster.brokers.items():
        if node_id != dead:
            wait_for(
                lambda node=node: named_controller(node.bootstrap) == controller,
                CONVERGENCE_TIMEOUT,
                f"broker {node_id} to name broker {controller}",
            )


def test_every_broker_names_the_elected_controller(zk_cluster: Cluster, zk: KazooClient):
    """ZooKeeper-mode Kafka's brokers name the broker /controller names (from the controller's
    UpdateMetadata), not themselves; after a kill -9 of it, the one elected next."""
    elected = wait_for(lambda: controller_and_epoch(zk), CONVERGENCE_TIMEOUT, "a controller")
    for node_id, node in zk_cluster.brokers.items():
        assert named_controller(node.bootstrap) == elected[0], f"asked broker {node_id}"
    zk_cluster.brokers[elected[0]].kill()
    successor = wait_for_new_controller(zk, elected)
    wait_for_survivors_to_name(zk_cluster, elected[0], successor[0])
