"""A broker's ZooKeeper session (``zookeeper.connect``): registration, the controller
election, and the controller's address for the broker's controller client.

As in ZooKeeper-mode Kafka, every broker registers an ephemeral ``/brokers/ids/<id>`` and
competes for the ephemeral ``/controller``. The winner bumps ``/controller_epoch`` in the same
transaction that creates ``/controller`` (so two brokers can never both believe they won the
same epoch) and runs the controller service in-process, on a :class:`ZooKeeperStore`, until
it is deposed: its ZooKeeper session ends (the ephemeral ``/controller`` goes with it and
another broker wins) or a save fails because the epoch's version moved. Brokers learn the
controller from ``/controller`` (watched) and the broker's znode it names.

kazoo's calls block and run in worker threads. Its watches and state changes arrive on its
own thread; they only wake trio tasks, through ``TrioToken.run_sync_soon`` (which never
blocks kazoo's thread), and the tasks then read ZooKeeper again, so a wake-up that comes twice
or late loses nothing.
"""

import contextlib
import logging
import time
from collections.abc import Callable

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, ZookeeperError
from kazoo.handlers.threading import KazooTimeoutError

from minibroker.common.config import BrokerConfig, Voter
from minibroker.controller import zk_layout as layout
from minibroker.controller.service import ControllerService
from minibroker.controller.zk_store import ControllerMoved, ZooKeeperStore

log = logging.getLogger("zookeeper")

ZOOKEEPER_ERRORS = (KazooException, ZookeeperError)
# What a first connection that never succeeds raises.
CONNECT_ERRORS = (*ZOOKEEPER_ERRORS, KazooTimeoutError)
CONNECT_TIMEOUT_S = 30.0


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ZooKeeperBroker:
    """One broker's life in ZooKeeper: its registration, its part in controller elections,
    and, while it has won, the controller service it runs."""

    def __init__(
        self,
        config: BrokerConfig,
        make_controller: Callable[[ZooKeeperStore, str], ControllerService],
        on_controller: Callable[[ControllerService | None], None],
    ) -> None:
        # Only a ZooKeeper-mode broker (config.zookeeper_mode) has one.
        assert config.zookeeper_connect is not None, "a ZooKeeperBroker without zookeeper.connect"
        self.config = config
        self._zookeeper_connect = config.zookeeper_connect
        self._make_controller = make_controller
        self._on_controller = on_controller
        self.zk = KazooClient(
            hosts=self._zookeeper_connect,
            timeout=config.zookeeper_session_timeout_ms / 1000,
            # Keep reconnecting for ever: ZooKeeper restarting is not this broker's death.
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
        )
        self.cluster_id: str | None = None
        # The elected controller's inter-broker endpoint, or None while there is none.
        self.controller: Voter | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._connected = trio.Event()
        self._session_lost = trio.Event()
        self._controller_changed = trio.Event()
        self._brokers_changed = trio.Event()
        self._closing = False

    # -- kazoo's thread -> trio ---------------------------------------------------------

    def _in_trio(self, function: Callable[..., object], *args: object) -> None:
        """Run ``function`` in trio's thread. Kazoo calls its listeners and watches in its
        own thread, and connect() takes the token before it registers any of them."""
        assert self._token is not None, "a kazoo callback before connect()"
        self._token.run_sync_soon(function, *args)

    def _on_state(self, state: str) -> None:
        self._in_trio(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            if self._connected.is_set():
                self._connected = trio.Event()
            if state == KazooState.LOST:
                if not self._closing:
                    log.warning("ZooKeeper session expired")
                self._session_lost.set()
        self._controller_changed.set()

    def _watch_controller(self, _event=None) -> None:
        self._in_trio(self._controller_changed.set)

    def _watch_brokers(self, _event=None) -> None:
        self._in_trio(self._brokers_changed.set)

    # -- the session ------------------------------------------------------------------

    async def connect(self, new_cluster_id: Callable[[], str]) -> str:
        """Open the session (creating the chroot if needed) and the persistent paths; return
        the cluster id from ``/cluster/id``, which the first broker creates (Kafka's
        ZooKeeper mode: no format step)."""
        self._token = trio.lowlevel.current_trio_token()
        hosts, _, chroot = self._zookeeper_connect.partition("/")
        if chroot:
            await trio.to_thread.run_sync(_create_chroot, hosts, "/" + chroot)
        self.zk.add_listener(self._on_state)
        try:
            await trio.to_thread.run_sync(self.zk.start, CONNECT_TIMEOUT_S)
        except CONNECT_ERRORS as error:
            await trio.to_thread.run_sync(self.zk.stop)
            raise SystemExit(
                f"cannot reach ZooKeeper at {self.config.zookeeper_connect} within"
                f" {CONNECT_TIMEOUT_S:g} s: {error!r}"
            ) from None
        self._connected.set()
        self.cluster_id = await trio.to_thread.run_sync(self._cluster_id, new_cluster_id)
        return self.cluster_id

    def _cluster_id(self, new_cluster_id: Callable[[], str]) -> str:
        for path in layout.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(layout.CLUSTER_ID, layout.cluster_id_znode(new_cluster_id()))
        return layout.cluster_id_from(self.zk.get(layout.CLUSTER_ID)[0])

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Register and take part in elections, session after session, until cancelled;
        the ZooKeeper session is closed at the end (its ephemeral znodes go at once, so
        another broker takes over as controller without waiting for a timeout)."""
        try:
            started = False
            while True:
                self._session_lost = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_cancel_when, self._session_lost, nursery.cancel_scope)
                    await self._retrying(self._register)
                    if not started:
                        task_status.started()
                        started = True
                    await self._elect()
                self.controller = None
                await self._connected.wait()
        finally:
            self._closing = True
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.zk.stop)
                await trio.to_thread.run_sync(self.zk.close)

    async def _retrying(self, operation):
        """Run a blocking ZooKeeper operation, again after each reconnection if the
        connection was lost meanwhile."""
        while True:
            try:
                return await trio.to_thread.run_sync(operation)
            except ZOOKEEPER_ERRORS as error:
                log.info("ZooKeeper unavailable (%r); waiting for the connection", error)
                await self._connected.wait()

    def _register(self) -> None:
        """Create ``/brokers/ids/<id>`` for this session. One left by a previous life of
        this broker (killed before its session expired) is replaced: the log dir's lock
        guarantees that no other process runs this broker."""
        inter_broker = self.config.inter_broker_listener
        listeners = [inter_broker] + [
            item for item in self.config.advertised if item.name != inter_broker.name
        ]
        data = layout.broker_znode(
            [(item.name, item.host, item.port) for item in listeners],
            {item.name: self.config.security_protocol(item.name) for item in listeners},
            _wall_clock_ms(),
            self.config.broker_rack,
        )
        path = f"{layout.BROKER_IDS}/{self.config.node_id}"
        try:
            self.zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            _, stat = self.zk.get(path)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return
            self.zk.delete(path, stat.version)
            self.zk.create(path, data, ephemeral=True)
        log.info("registered in ZooKeeper at %s", path)

    # -- the election -----------------------------------------------------------------

    async def _elect(self) -> None:
        while True:
            self._controller_changed = trio.Event()
            try:
                outcome = await trio.to_thread.run_sync(self._contend)
            except ZOOKEEPER_ERRORS as error:
                # The controller elected last most likely still is: keep talking to it.
                log.info("election: ZooKeeper unavailable (%r)", error)
                await self._connected.wait()
                continue
            if outcome is None:
                continue  # another broker won at the same moment: read who
            kind, value = outcome
            if kind == "won":
                epoch, epoch_version = value
                await self._serve_as_controller(epoch, epoch_version)
                await self._retrying(self._resign)
                continue
            if value != self.controller:
                log.info("controller is %s", value)
            self.controller = value
            await self._controller_changed.wait()

    def _contend(self):
        """One round: ("other", the controller's endpoint or None) when a controller is
        elected, ("won", (epoch, epoch's znode version)) when this broker just won, None when
        another broker won in between."""
        try:
            data, _ = self.zk.get(layout.CONTROLLER, watch=self._watch_controller)
        except NoNodeError:
            pass
        else:
            controller_id = layout.controller_id_from(data)
            try:
                host, port = layout.broker_endpoint(
                    self.zk.get(f"{layout.BROKER_IDS}/{controller_id}")[0]
                )
            except NoNodeError:
                return "other", None
            return "other", Voter(controller_id, host, port)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(layout.CONTROLLER_EPOCH, b"0")
        epoch_data, epoch_stat = self.zk.get(layout.CONTROLLER_EPOCH)
        epoch = int(epoch_data) + 1
        transaction = self.zk.transaction()
        transaction.create(
            layout.CONTROLLER,
            layout.controller_znode(self.config.node_id, _wall_clock_ms()),
            ephemeral=True,
        )
        transaction.set_data(layout.CONTROLLER_EPOCH, str(epoch).encode(), epoch_stat.version)
        results = transaction.commit()
        if any(isinstance(result, Exception) for result in results):
            return None
        # Watch our own /controller too: if it goes, so did our claim.
        self.zk.exists(layout.CONTROLLER, watch=self._watch_controller)
        return "won", (epoch, results[1].version)

    def _resign(self) -> None:
        """Give up ``/controller`` if this session still holds it (the controller stopped
        for another reason than losing the session): the next election bumps the epoch."""
        try:
            _, stat = self.zk.get(layout.CONTROLLER)
        except NoNodeError:
            return
        if stat.ephemeralOwner == self.zk.client_id[0]:
            self.zk.delete(layout.CONTROLLER, stat.version)

    async def _serve_as_controller(self, epoch: int, epoch_version: int) -> None:
        listener = self.config.inter_broker_listener
        self.controller = Voter(self.config.node_id, listener.host, listener.port)
        log.info("elected controller at epoch %d", epoch)
        store = ZooKeeperStore(self.zk, self.config.node_id, epoch, epoch_version)
        assert self.cluster_id is not None  # connect() reads it before run() elects
        service = self._make_controller(store, self.cluster_id)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_when, store.deposed, nursery.cancel_scope)
                await nursery.start(service.run)
                self._on_controller(service)
                nursery.start_soon(self._watch_broker_sessions, service)
        except* ControllerMoved as moved:
            log.warning("no longer controller: %s", _first_leaf(moved))
        except* ZOOKEEPER_ERRORS as failed:
            log.warning("no longer controller: ZooKeeper failed: %r", _first_leaf(failed))
        finally:
            self._on_controller(None)
            self.controller = None
            log.info("stopped acting as controller of epoch %d", epoch)

    async def _watch_broker_sessions(self, service: ControllerService) -> None:
        """Tell the controller which brokers have a session, at start and on every change."""
        while True:
            self._brokers_changed = trio.Event()
            children = await trio.to_thread.run_sync(
                lambda: self.zk.get_children(layout.BROKER_IDS, watch=self._watch_brokers)
            )
            await service.broker_sessions_changed({int(child) for child in children})
            await self._brokers_changed.wait()


def _create_chroot(hosts: str, chroot: str) -> None:
    """The chroot must exist before a client can use it (kazoo does not create it)."""
    client = KazooClient(hosts=hosts)
    try:
        client.start(CONNECT_TIMEOUT_S)
    except CONNECT_ERRORS as error:
        client.stop()
        raise SystemExit(f"cannot reach ZooKeeper at {hosts}: {error!r}") from None
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
