"""The controller's state on disk: one JSON file, replaced atomically on every save.

The shell saves a new state before it sends anything that depends on it, so a broker never acts
on a decision that a crash could take back. ``save`` writes ``<path>.tmp``, fsyncs it, renames
it over ``<path>`` and fsyncs the directory: after a crash the file is either the previous state
or the new one, never a mix. A ``.tmp`` left by a crash is an unfinished save; ``load`` ignores
it and the next save overwrites it.
"""

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from minibroker.controller.client_quotas import entities_from_json, entities_to_json
from minibroker.controller.state import BrokerInfo, ControllerState, PartitionState, TopicState
from minibroker.security.authorizer.acls import AclBinding
from minibroker.storage.checkpoint import write_file_atomically
from minibroker.storage.producer_ids import ProducerIdAllocator

_FORMAT_VERSION = 1
# The single controller's state file, in its first log dir.
STATE_FILE = "controller-state.json"


class ControllerStore:
    """Load and save one :class:`ControllerState` at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> ControllerState:
        """The saved state (a fresh one if there is none) under a new controller epoch.

        Every load starts a new controller: its epoch is one more than the saved one and is
        saved before this returns. Brokers reject LeaderAndIsr and UpdateMetadata carrying an
        epoch older than the newest they have seen (STALE_CONTROLLER_EPOCH), so requests still
        in flight from the controller's previous life cannot overwrite the new one's decisions.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            state = ControllerState()
        else:
            state = _state_from_json(text, self.path)
        state.controller_epoch += 1
        self.save(state)
        return state

    def save(self, state: ControllerState) -> None:
        """Replace the saved state with ``state``, durably and atomically."""
        self.write(self.encode(state))

    @staticmethod
    def encode(state: ControllerState) -> bytes:
        """The file's bytes for ``state`` (taken on the state's owner: the state is not
        thread-safe)."""
        return json.dumps(_state_to_dict(state), separators=(",", ":")).encode("utf-8")

    def write(self, data: bytes) -> None:
        """Replace the file with ``data``, durably and atomically (safe in any thread, one
        call at a time)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.path, data)


def _state_to_dict(state: ControllerState) -> dict:
    return {
        "version": _FORMAT_VERSION,
        "controller_epoch": state.controller_epoch,
        "next_broker_epoch": state.next_broker_epoch,
        "brokers": [asdict(broker) for broker in state.brokers.values()],
        "topics": [
            {
                "name": topic.name,
                "topic_id": str(topic.topic_id),
                "configs": topic.configs,
                "partitions": [_partition_to_dict(partition) for partition in topic.partitions],
            }
            for topic in state.topics.values()
        ],
        "broker_configs": state.broker_configs,
        "group_configs": state.group_configs,
        "client_metrics_configs": state.client_metrics_configs,
        "acls": [asdict(binding) for binding in state.acls],
        "scram_credentials": state.scram_credentials,
        "client_quotas": entities_to_json(state.client_quotas),
        "finalized_features": state.finalized_features,
        "features_epoch": state.features_epoch,
        "metadata_offset": state.metadata_offset,
    }


def _partition_to_dict(partition: PartitionState) -> dict:
    """``asdict(partition)`` without its deep copy: the state is saved whole on every
    decision, and with 20,000 partitions asdict's recursion cost 40 times this (issue 39).
    Every field, by name, so the file reads back as ``PartitionState(**entry)``."""
    return {
        "replicas": partition.replicas,
        "isr": partition.isr,
        "leader": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "partition_epoch": partition.partition_epoch,
        "adding_replicas": partition.adding_replicas,
        "removing_replicas": partition.removing_replicas,
        "eligible_leader_replicas": partition.eligible_leader_replicas,
        "last_known_elr": partition.last_known_elr,
    }


def _state_from_json(text: str, path: Path) -> ControllerState:
    """Parse a saved state; an unreadable file stops the controller rather than letting it
    start empty and forget the cluster's topics."""
    try:
        data = json.loads(text)
        if data.get("version") != _FORMAT_VERSION:
            raise ValueError(f"unsupported format version {data.get('version')!r}")
        brokers = [
            BrokerInfo(
                **{
                    **broker,
                    "listeners": {
                        name: tuple(endpoint)
                        for name, endpoint in broker.get("listeners", {}).items()
                    },
                }
            )
            for broker in data["brokers"]
        ]
        topics = [
            TopicState(
                name=topic["name"],
                topic_id=uuid.UUID(topic["topic_id"]),
                partitions=[PartitionState(**partition) for partition in topic["partitions"]],
                configs=topic["configs"],
            )
            for topic in data["topics"]
        ]
        return ControllerState(
            controller_epoch=data["controller_epoch"],
            brokers={broker.node_id: broker for broker in brokers},
            topics={topic.name: topic for topic in topics},
            next_broker_epoch=data["next_broker_epoch"],
            broker_configs=data.get("broker_configs", {}),
            group_configs=data.get("group_configs", {}),
            client_metrics_configs=data.get("client_metrics_configs", {}),
            acls=[AclBinding(**binding) for binding in data.get("acls", [])],
            scram_credentials=data.get("scram_credentials", {}),
            client_quotas=entities_from_json(data.get("client_quotas", [])),
            finalized_features=data.get("finalized_features"),
            features_epoch=data.get("features_epoch", 0),
            metadata_offset=data.get("metadata_offset", 0),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a readable controller state: {exc}") from exc


# How the blocking writes run: in a worker thread; the in-process tests under trio's
# MockClock pass a function that runs them inline (as replication/log_io.py's ``inline``).
RunBlocking = Callable[..., Awaitable[Any]]


class LocalStore:
    """The single controller's store: the JSON state file and the producer-id block file in
    its log dir, behind the awaitable interface the ZooKeeper store has.

    Each write (the file, its fsync, the rename, the directory's fsync: 10-100 ms on a
    busy disk) runs in a worker thread (``run_blocking``), so that the event loop serving
    every client never waits for it (issue 40), while ``save`` still returns only once the
    state is durable: the service announces nothing before (ControllerService.save). The
    bytes are taken on the loop, where the state changes, when the save's turn comes; saves
    run one at a time in the order they were asked for, so a later state is never
    overwritten by an earlier one. Cancellation cannot cut a write in two (the thread runs
    to its end)."""

    def __init__(
        self, directory: Path, run_blocking: RunBlocking = trio.to_thread.run_sync
    ) -> None:
        self._state = ControllerStore(directory / STATE_FILE)
        self._producer_ids = ProducerIdAllocator(directory)
        self._run_blocking = run_blocking
        self._state_lock = trio.Lock()
        self._producer_ids_lock = trio.Lock()
        # Group commit: saves asked for (one more each) and the newest of them that a write
        # already covered.
        self._asked = 0
        self._covered = 0

    async def load(self) -> ControllerState:
        return self._state.load()

    async def save(self, state: ControllerState) -> None:
        """Durable once this returns. Saves waiting for the one in flight are written
        together (group commit): the first of them to get its turn encodes the state as it
        is then, which holds every change whose save was asked for so far (the service
        changes the state before it asks), and the others find their change covered and
        return without writing. A burst of decisions (thousands of ISR changes after a
        restart) then costs a few writes, not one encoding of the whole state each (issue
        39: with 20,000 partitions each encoding takes a fraction of a second)."""
        self._asked += 1
        mine = self._asked
        async with self._state_lock:
            if self._covered >= mine:
                return
            covers = self._asked
            data = self._state.encode(state)
            with trio.CancelScope(shield=True):
                await self._run_blocking(self._state.write, data)
            self._covered = covers

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        async with self._producer_ids_lock:
            start, end = self._producer_ids.next_block()
            with trio.CancelScope(shield=True):
                await self._run_blocking(self._producer_ids.reserve, end)
            return self._producer_ids.take_block(start, end)
