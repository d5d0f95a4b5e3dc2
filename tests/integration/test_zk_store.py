"""The controller's ZooKeeper store against a real ZooKeeper: what one controller saves the
next one loads, and a deposed controller's saves change nothing."""

from __future__ import annotations

import base64
import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient

from minibroker.controller import ControllerState, create_topic, fence_broker, register_broker
from minibroker.controller import zk_layout as layout
from minibroker.controller.scram_credentials import from_record
from minibroker.controller.zk_store import ControllerMoved, ZooKeeperStore
from minibroker.protocol import sasl
from minibroker.security.authorizer.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from minibroker.tools.launcher import ZooKeeperServer, zookeeper_installed

pytestmark = pytest.mark.skipif(
    not zookeeper_installed(),
    reason="ZooKeeper is not installed (apt-get install zookeeper: /usr/share/java/zookeeper.jar)",
)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer.start(Path(tmp_path_factory.mktemp("zookeeper")) / "data")
    yield server
    server.kill()


@pytest.fixture
def zk(zookeeper: ZooKeeperServer, request) -> Iterator[KazooClient]:
    """A client inside a chroot of this test's own."""
    chroot = f"/{request.node.name}"
    bare = KazooClient(hosts=f"127.0.0.1:{zookeeper.port}")
    bare.start(30)
    bare.ensure_path(chroot)
    bare.stop()
    bare.close()
    client = KazooClient(hosts=zookeeper.connect_string(chroot))
    client.start(30)
    for path in layout.PERSISTENT_PATHS:
        client.ensure_path(path)
    client.create(layout.CONTROLLER_EPOCH, b"0")
    yield client
    client.stop()
    client.close()


def elect(zk: KazooClient) -> tuple[int, int]:
    """Bump /controller_epoch as an election does: (new epoch, its znode version)."""
    data, stat = zk.get(layout.CONTROLLER_EPOCH)
    epoch = int(data) + 1
    return epoch, zk.set(layout.CONTROLLER_EPOCH, str(epoch).encode(), stat.version).version


def three_brokers_and_a_topic(epoch: int) -> ControllerState:
    state = ControllerState(controller_epoch=epoch)
    for node_id in (1, 2, 3):
        register_broker(state, node_id, "localhost", 9000 + node_id, f"i{node_id}", 0)
    create_topic(state, "t", 3, 3, {"retention.ms": "1000"}, rng=random.Random(1))
    return state


async def test_a_new_controller_loads_what_the_previous_one_saved(zk: KazooClient):
    store = ZooKeeperStore(zk, 1, *elect(zk))
    state = await store.load()
    assert state.topics == {}
    state = three_brokers_and_a_topic(state.controller_epoch)
    await store.save(state)
    fence_broker(state, 2, unclean=False)
    await store.save(state)
    del state.topics["t"].configs["retention.ms"]
    await store.save(state)

    successor = ZooKeeperStore(zk, 3, *elect(zk))
    loaded = await successor.load()
    assert loaded.controller_epoch == state.controller_epoch + 1
    assert loaded.topics == state.topics
    assert {n: b.fenced for n, b in loaded.brokers.items()} == {1: False, 2: True, 3: False}
    for index, partition in enumerate(state.topics["t"].partitions):
        saved = json.loads(zk.get(layout.partition_state_path("t", index))[0])
        assert (saved["leader"], saved["isr"]) == (partition.leader, partition.isr)
    fence_broker(loaded, 3, unclean=False)
    await successor.save(loaded)
    assert (await ZooKeeperStore(zk, 1, *elect(zk)).load()).topics == loaded.topics


async def test_a_deposed_controllers_save_fails_and_changes_nothing(zk: KazooClient):
    deposed = ZooKeeperStore(zk, 1, *elect(zk))
    state = three_brokers_and_a_topic((await deposed.load()).controller_epoch)
    await deposed.save(state)
    before = {path: zk.get(path)[0] for path in layout.state_znodes(state)}
    ZooKeeperStore(zk, 2, *elect(zk))  # another broker won an election meanwhile
    fence_broker(state, 1, unclean=False)
    with pytest.raises(ControllerMoved):
        await deposed.save(state)
    assert {path: zk.get(path)[0] for path in before} == before
    assert deposed.deposed.is_set()
    with pytest.raises(ControllerMoved):
        await deposed.allocate_producer_id_block()


async def test_producer_id_blocks_never_overlap_across_controllers(zk: KazooClient):
    first = ZooKeeperStore(zk, 1, *elect(zk))
    blocks = [await first.allocate_producer_id_block() for _ in range(2)]
    second = ZooKeeperStore(zk, 2, *elect(zk))
    blocks.append(await second.allocate_producer_id_block())
    starts = [start for start, _ in blocks]
    assert starts == sorted(starts) and starts[0] == 0
    assert all(a[0] + a[1] <= b[0] for a, b in zip(blocks, blocks[1:], strict=False))


def _scram_record(password: str) -> dict:
    credential = sasl.new_credential(sasl.SCRAM_SHA_512, password)
    return {
        "salt": base64.b64encode(credential.salt).decode(),
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
        "iterations": credential.iterations,
    }


async def test_a_new_controller_loads_the_acls_and_scram_credentials_saved_before(
    zk: KazooClient,
):
    store = ZooKeeperStore(zk, 1, *elect(zk))
    state = three_brokers_and_a_topic((await store.load()).controller_epoch)
    read_t = AclBinding(
        ResourceType.TOPIC,
        "t",
        PatternType.LITERAL,
        "User:alice",
        "*",
        Operation.READ,
        Permission.ALLOW,
    )
    deny_group = AclBinding(
        ResourceType.GROUP,
        "g/",
        PatternType.PREFIXED,
        "User:bob",
        "*",
        Operation.ALL,
        Permission.DENY,
    )
    write_t = AclBinding(
        ResourceType.TOPIC,
        "t",
        PatternType.LITERAL,
        "User:bob",
        "*",
        Operation.WRITE,
        Permission.ALLOW,
    )
    state.acls = [read_t, deny_group, write_t]
    state.scram_credentials = {
        "alice": {sasl.SCRAM_SHA_512: _scram_record("alice-secret")},
        "bob": {sasl.SCRAM_SHA_512: _scram_record("bob-secret")},
    }
    await store.save(state)
    # What Kafka's tools would read: its paths and JSON.
    entries = json.loads(zk.get("/kafka-acl/Topic/t")[0])["acls"]
    assert [(e["principal"], e["operation"]) for e in entries] == [
        ("User:alice", "Read"),
        ("User:bob", "Write"),
    ]
    assert zk.exists("/kafka-acl-extended/prefixed/Group/g%2F")
    alice = json.loads(zk.get("/config/users/alice")[0])["config"]["SCRAM-SHA-512"]
    assert alice.startswith("salt=") and alice.endswith(",iterations=4096")

    successor = ZooKeeperStore(zk, 2, *elect(zk))
    loaded = await successor.load()
    assert sorted(map(repr, loaded.acls)) == sorted(map(repr, state.acls))
    assert loaded.scram_credentials == state.scram_credentials
    salt = from_record(loaded.scram_credentials["alice"][sasl.SCRAM_SHA_512]).salt
    salted = sasl.salted_password(sasl.SCRAM_SHA_512, "alice-secret", salt, 4096)
    assert from_record(
        loaded.scram_credentials["alice"][sasl.SCRAM_SHA_512]
    ) == sasl.credential_from_salted_password(sasl.SCRAM_SHA_512, salted, salt, 4096)

    # The successor's deletions reach ZooKeeper too, and the next controller sees them.
    loaded.acls.remove(deny_group)
    del loaded.scram_credentials["bob"]
    await successor.save(loaded)
    assert not zk.exists("/kafka-acl-extended/prefixed/Group/g%2F")
    assert not zk.exists("/config/users/bob")
    third = await ZooKeeperStore(zk, 3, *elect(zk)).load()
    assert sorted(map(repr, third.acls)) == sorted(map(repr, [read_t, write_t]))
    assert set(third.scram_credentials) == {"alice"}


async def test_a_new_controller_loads_the_group_configs_saved_before(zk: KazooClient):
    """Group configs (KIP-848's GROUP resources) live in /config/groups/<group>, the group id
    URL-encoded; a successor loads them, and a group whose configs are all deleted loses its
    znode."""
    store = ZooKeeperStore(zk, 1, *elect(zk))
    state = await store.load()
    state.group_configs = {
        "g1": {"consumer.session.timeout.ms": "50000"},
        "team/a": {"consumer.heartbeat.interval.ms": "6000"},
    }
    await store.save(state)
    saved = json.loads(zk.get(f"{layout.GROUP_CONFIGS}/team%2Fa")[0])
    assert saved == {"version": 1, "config": {"consumer.heartbeat.interval.ms": "6000"}}
    successor = ZooKeeperStore(zk, 2, *elect(zk))
    loaded = await successor.load()
    assert loaded.group_configs == state.group_configs
    del loaded.group_configs["g1"]
    await successor.save(loaded)
    assert zk.exists(f"{layout.GROUP_CONFIGS}/g1") is None
    assert (await ZooKeeperStore(zk, 1, *elect(zk)).load()).group_configs == {
        "team/a": {"consumer.heartbeat.interval.ms": "6000"}
    }


def _many_partitions(epoch: int, topics: int) -> ControllerState:
    state = ControllerState(controller_epoch=epoch)
    for node_id in (1, 2, 3):
        register_broker(state, node_id, "localhost", 9000 + node_id, f"i{node_id}", 0)
    for number in range(topics):
        create_topic(state, f"t{number}", 50, 3, {}, rng=random.Random(number))
    return state


def _shrink_isr(state: ControllerState, topic: str, index: int) -> None:
    """What an ISR change does to one partition (a new PartitionState in the topic's list,
    as state.py's transitions put one)."""
    partitions = state.topics[topic].partitions
    before = partitions[index]
    partitions[index] = dataclasses.replace(
        before, isr=before.isr[:-1], partition_epoch=before.partition_epoch + 1
    )


async def test_a_save_encodes_only_the_partitions_changed_since_the_last(
    zk: KazooClient, monkeypatch
):
    """Issue 39: every save encoded every partition's state znode (and parsed the one saved
    before), however few partitions the decision changed, so a burst of decisions cost
    decisions x partitions. Counted, not timed: the partition state znodes a save encodes."""
    first = ZooKeeperStore(zk, 1, *elect(zk))
    state = _many_partitions((await first.load()).controller_epoch, topics=8)  # 400 partitions
    await first.save(state)
    encoded = []
    real = layout._partition_state
    monkeypatch.setattr(
        layout,
        "_partition_state",
        lambda partition, *args: encoded.append(partition) or real(partition, *args),
    )
    _shrink_isr(state, "t3", 7)
    await first.save(state)
    assert len(encoded) == 1

    # A new controller: its load remembers what it read, so its first save encodes only
    # what changed since (and nothing when nothing did).
    encoded.clear()
    successor = ZooKeeperStore(zk, 2, *elect(zk))
    loaded = await successor.load()
    assert loaded.topics == state.topics
    await successor.save(loaded)
    _shrink_isr(loaded, "t0", 0)
    _shrink_isr(loaded, "t7", 49)
    await successor.save(loaded)
    assert len(encoded) == 2
    reloaded = await ZooKeeperStore(zk, 3, *elect(zk)).load()
    assert reloaded.topics == loaded.topics
    assert reloaded.topics["t7"].partitions[49].isr == loaded.topics["t7"].partitions[49].isr


async def test_saves_waiting_for_the_one_in_flight_are_committed_together(
    zk: KazooClient, monkeypatch
):
    """Group commit: decisions whose saves queue behind a transaction in flight are written
    by one transaction, the state encoded once for them all, not once each."""
    store = ZooKeeperStore(zk, 1, *elect(zk))
    state = _many_partitions((await store.load()).controller_epoch, topics=2)
    await store.save(state)
    encodings = []
    real = layout.state_znodes
    monkeypatch.setattr(layout, "state_znodes", lambda *args: encodings.append(1) or real(*args))

    async def decide_and_save(index: int) -> None:
        _shrink_isr(state, "t1", index)
        await store.save(state)

    async with trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(decide_and_save, index)
    # Once for the first save to get its turn, at most once more for those queued behind it
    # (one each before: 20).
    assert len(encodings) <= 2
    loaded = await ZooKeeperStore(zk, 2, *elect(zk)).load()
    assert loaded.topics == state.topics
