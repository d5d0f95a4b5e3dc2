"""The controller's state in ZooKeeper: the store an elected controller saves to.

The same interface the service awaits for its JSON file (``load``, ``save``,
``allocate_producer_id_block``), so the pure state machine and the service are reused as they
are. Each save is one ZooKeeper transaction: a check that ``/controller_epoch`` still has the
version this controller's election left it at, then the creates, sets and deletes that
``zk_layout.plan_writes`` lists, each set and delete conditional on the znode version this
controller last saw. A deposed controller (another broker won an election since, so the
epoch's version moved) or one whose session expired changes nothing: its transaction fails
as a whole and the store raises :class:`ControllerMoved`, as Kafka's controller resigns on
ControllerMovedException.

kazoo's calls block; they run in a worker thread (``trio.to_thread``), never on the loop.

Issue 39 (a controller failover with thousands of partitions): a load reads the znodes with
kazoo's asynchronous calls, every request of a level in flight together, where one blocking
call per znode waited for each answer in turn (three round trips per partition); Kafka's
``KafkaZkClient`` reads the same way (``getPartitionStatesRaw`` and ``getReplicaAssignment
ForTopics`` send one multi-request of async reads, ``retryRequestsUntilConnected``). A save
encodes only the partitions changed since the last one (``zk_layout.EncodedTopics``), and
saves waiting behind the one in flight are committed together (group commit, as the JSON
file's store does).
"""

import contextlib
import logging

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, ZookeeperError
from kazoo.protocol.states import ZnodeStat

from minibroker.controller import zk_layout as layout
from minibroker.controller.state import ControllerState
from minibroker.storage.producer_ids import BLOCK_SIZE

log = logging.getLogger("controller.zookeeper")


class ControllerMoved(Exception):
    """This controller was deposed (or lost its ZooKeeper session): it must stop."""


class ZooKeeperStore:
    """Load and save the controller's state under ``/brokers``, ``/config``,
    ``/kafka-acl``, ``/kafka-acl-extended`` and ``/minibroker`` for the controller elected at
    ``controller_epoch``."""

    def __init__(
        self, zk: KazooClient, broker_id: int, controller_epoch: int, epoch_version: int
    ) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._controller_epoch = controller_epoch
        self._epoch_version = epoch_version
        # What this controller knows is in ZooKeeper: data and version of every owned znode.
        self._saved: dict[str, bytes] = {}
        self._versions: dict[str, int] = {}
        # What each topic's znodes were last encoded from (a save encodes what changed).
        self._encoded = layout.EncodedTopics()
        # One transaction at a time, each computed against the previous one's result.
        self._lock = trio.Lock()
        # Group commit: saves asked for, and the last of them a committed transaction covers.
        self._asked = 0
        self._covered = 0
        self.deposed = trio.Event()
        # The brokers that had a session when the state was loaded (the service fences the
        # others before it tells any broker anything, see ControllerService.run).
        self.sessions_at_load: set[int] | None = None

    async def load(self) -> ControllerState:
        """The saved state, under the epoch this controller was elected with (the election
        bumped ``/controller_epoch``, so nothing is written here)."""
        self._saved, self._versions = await trio.to_thread.run_sync(self._read_tree)
        self.sessions_at_load = await trio.to_thread.run_sync(self._broker_sessions)
        self._encoded = layout.EncodedTopics()
        return layout.state_from_znodes(self._saved, self._controller_epoch, self._encoded)

    def _broker_sessions(self) -> set[int]:
        """The brokers with a ZooKeeper session (a ``/brokers/ids`` znode) now."""
        return {int(child) for child in _children(self._zk, layout.BROKER_IDS)}

    def _read_tree(self) -> tuple[dict[str, bytes], dict[str, int]]:
        data: dict[str, bytes] = {}
        versions: dict[str, int] = {}

        def read(path: str) -> bool:
            try:
                value, stat = self._zk.get(path)
            except NoNodeError:
                return False
            data[path] = value
            versions[path] = stat.version
            return True

        read(layout.BROKER_REGISTRY)
        # The topics level by level, each level's reads in flight together.
        topics = self._zk.get_children(layout.TOPICS)
        found = _read_all(self._zk, [f"{layout.TOPICS}/{topic}" for topic in topics])
        topics = [topic for topic in topics if f"{layout.TOPICS}/{topic}" in found]
        paths = [
            path
            for topic in topics
            for path in (f"{layout.TOPICS}/{topic}/partitions", f"{layout.TOPIC_CONFIGS}/{topic}")
        ]
        found.update(_read_all(self._zk, paths))
        parents = [f"{layout.TOPICS}/{topic}/partitions" for topic in topics]
        indexes = _children_all(self._zk, parents)
        paths = [
            path
            for parent, children in indexes.items()
            for index in children
            for path in (f"{parent}/{index}", f"{parent}/{index}/state")
        ]
        found.update(_read_all(self._zk, paths))
        for path, (value, stat) in found.items():
            data[path] = value
            versions[path] = stat.version
        for entity in self._zk.get_children(layout.BROKER_CONFIGS):
            read(f"{layout.BROKER_CONFIGS}/{entity}")
        for group in _children(self._zk, layout.GROUP_CONFIGS):
            read(f"{layout.GROUP_CONFIGS}/{group}")
        for name in _children(self._zk, layout.CLIENT_METRICS_CONFIGS):
            read(f"{layout.CLIENT_METRICS_CONFIGS}/{name}")
        for user in _children(self._zk, layout.USER_CONFIGS):
            read(f"{layout.USER_CONFIGS}/{user}")
            if read(f"{layout.USER_CONFIGS}/{user}/clients"):
                for client in _children(self._zk, f"{layout.USER_CONFIGS}/{user}/clients"):
                    read(f"{layout.USER_CONFIGS}/{user}/clients/{client}")
        for root in (layout.CLIENT_CONFIGS, layout.IP_CONFIGS):
            for entity in _children(self._zk, root):
                read(f"{root}/{entity}")
        for type_path in layout.ACL_TYPE_PATHS:
            for resource in _children(self._zk, type_path):
                read(f"{type_path}/{resource}")
        return data, versions

    async def save(self, state: ControllerState) -> None:
        """Write what changed since the last save, atomically and only while this controller
        is still the elected one; raises ControllerMoved otherwise.

        Saves waiting for the one in flight are committed together (group commit, as
        ``store.LocalStore.save``): the first of them to get its turn writes the state as it
        is then, which holds every change whose save was asked for so far (the service
        changes the state before it asks), and the others find their change covered."""
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if self.deposed.is_set():
                raise ControllerMoved("this controller was deposed")
            if self._covered >= mine:
                return
            covers = self._asked
            after = layout.state_znodes(state, self._saved, self._encoded)
            writes = layout.plan_writes(self._saved, after)
            if not writes:
                self._covered = covers
                return
            try:
                versions = await trio.to_thread.run_sync(self._commit, writes)
            except (KazooException, ZookeeperError) as error:
                self.deposed.set()
                raise ControllerMoved(f"saving the controller state failed: {error!r}") from None
            for write in writes:
                if write.kind == "delete":
                    self._saved.pop(write.path, None)
                    self._versions.pop(write.path, None)
                else:
                    self._saved[write.path] = write.data
            self._versions.update(versions)
            self._covered = covers

    def _commit(self, writes: list[layout.ZnodeWrite]) -> dict[str, int]:
        transaction = self._zk.transaction()
        transaction.check(layout.CONTROLLER_EPOCH, self._epoch_version)
        for write in writes:
            if write.kind == "create":
                transaction.create(write.path, write.data)
            elif write.kind == "set":
                transaction.set_data(write.path, write.data, self._versions[write.path])
            else:
                transaction.delete(write.path, self._versions[write.path])
        results = transaction.commit()
        failures = [result for result in results if isinstance(result, Exception)]
        if failures:
            for write, result in zip(writes, results[1:], strict=False):
                if isinstance(result, Exception) and type(result).__name__ != "RolledBackError":
                    log.warning("%s of %s failed: %r", write.kind, write.path, result)
            raise _first_cause(failures)
        versions = {}
        for write, result in zip(writes, results[1:], strict=True):
            if write.kind == "create":
                versions[write.path] = 0
            elif write.kind == "set":
                versions[write.path] = result.version
        return versions

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        """Reserve the next block of producer ids in ``/latest_producer_id_block``, as Kafka's
        ZooKeeper-mode controller does: read it, then write the next block conditional on the
        version read, so two controllers can never hand out the same ids."""
        async with self._lock:
            if self.deposed.is_set():
                raise ControllerMoved("this controller was deposed")
            try:
                return await trio.to_thread.run_sync(self._allocate_block)
            except (KazooException, ZookeeperError) as error:
                self.deposed.set()
                raise ControllerMoved(f"allocating producer ids failed: {error!r}") from None

    def _allocate_block(self) -> tuple[int, int]:
        try:
            data, stat = self._zk.get(layout.PRODUCER_ID_BLOCK)
        except NoNodeError:
            data, stat = None, None
        start = layout.next_producer_id(data)
        block = layout.producer_id_block_znode(self._broker_id, start, BLOCK_SIZE)
        transaction = self._zk.transaction()
        transaction.check(layout.CONTROLLER_EPOCH, self._epoch_version)
        if stat is None:
            transaction.create(layout.PRODUCER_ID_BLOCK, block)
        else:
            transaction.set_data(layout.PRODUCER_ID_BLOCK, block, stat.version)
        failures = [result for result in transaction.commit() if isinstance(result, Exception)]
        if failures:
            raise _first_cause(failures)
        return start, BLOCK_SIZE


# How many asynchronous reads a load keeps in flight at once.
READ_BATCH = 1000


def _read_all(zk: KazooClient, paths: list[str]) -> dict[str, tuple[bytes, ZnodeStat]]:
    """Read ``paths`` with asynchronous gets, up to READ_BATCH in flight: path -> (data,
    stat) of those that exist."""
    found: dict[str, tuple[bytes, ZnodeStat]] = {}
    for start in range(0, len(paths), READ_BATCH):
        batch = [(path, zk.get_async(path)) for path in paths[start : start + READ_BATCH]]
        for path, pending in batch:
            with contextlib.suppress(NoNodeError):
                found[path] = pending.get()
    return found


def _children_all(zk: KazooClient, paths: list[str]) -> dict[str, list[str]]:
    """The children of each of ``paths`` (none for a path that does not exist), read as
    :func:`_read_all` reads."""
    found: dict[str, list[str]] = {}
    for start in range(0, len(paths), READ_BATCH):
        batch = [(path, zk.get_children_async(path)) for path in paths[start : start + READ_BATCH]]
        for path, pending in batch:
            try:
                found[path] = pending.get()
            except NoNodeError:
                found[path] = []
    return found


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return zk.get_children(path)
    except NoNodeError:
        return []


def _first_cause(failures: list[Exception]) -> Exception:
    """The operation that failed a transaction (ZooKeeper marks the others as rolled back)."""
    for failure in failures:
        if type(failure).__name__ != "RolledBackError":
            return failure
    return failures[0]
