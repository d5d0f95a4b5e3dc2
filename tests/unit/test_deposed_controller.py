"""A controller deposed while it decides a request answers NOT_CONTROLLER, not
UNKNOWN_SERVER_ERROR.

In ZooKeeper mode an elected controller's save fails as a whole once it is deposed (its
session expired while ZooKeeper restarted, or another broker won an election): the
ZooKeeperStore raises ControllerMoved. A request that was being decided then is answered as
Kafka's ZooKeeper-mode controller answers on ControllerMovedException: NOT_CONTROLLER, which
clients and brokers retry after looking up the controller again. (CI once saw an admin
client's CreateTopics fail with UNKNOWN_SERVER_ERROR right after a ZooKeeper restart.)

The real controller service runs in-process on trio's MockClock, through dispatch as a
connection would call it; its store raises ControllerMoved from the moment it is deposed.
"""

import trio

from minibroker.apis import Connection, RequestContext
from minibroker.apis.dispatch import dispatch
from minibroker.apis.registry import served_versions
from minibroker.cluster.controller_client import build_request
from minibroker.common.metrics import BrokerMetrics
from minibroker.controller.zk_store import ControllerMoved
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import RequestHeader, parse_response_header
from minibroker.protocol.versions import ApiKey
from tests.unit.test_controller_service import Cluster


class DeposableStore:
    """The service's own store until ``deposed`` is set, then what ZooKeeperStore does for
    a deposed controller: every save and allocation raises ControllerMoved."""

    def __init__(self, store) -> None:
        self._store = store
        self.deposed = False

    async def load(self):
        return await self._store.load()

    async def save(self, state) -> None:
        if self.deposed:
            raise ControllerMoved("this controller was deposed")
        await self._store.save(state)

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        if self.deposed:
            raise ControllerMoved("this controller was deposed")
        return await self._store.allocate_producer_id_block()


async def answer(cluster: Cluster, request, client_id: str = "rdkafka", *, active: bool = True):
    """The decoded response dispatch sends for ``request`` (on the node's only listener,
    PLAINTEXT, which is also its inter-node one); with ``active`` False the node holds no
    controller service (ZooKeeper mode: not elected, or elected and still loading)."""
    api_key, version = request.__api_key__, request.__version__
    header = RequestHeader(api_key, version, 7, client_id)

    def make_context(header):
        return RequestContext(
            header,
            "PLAINTEXT",
            cluster.service.config,
            "mock-cluster",
            served_versions(broker=False, controller=True),
            replicas=None,
            controller=cluster.service if active else None,
            metrics=BrokerMetrics(),
            connection=Connection("/127.0.0.1"),
        )

    chunks = await dispatch(header, bytearray(codec.encode_entity(request)), 0, make_context)
    frame = b"".join(bytes(chunk) for chunk in chunks)[4:]
    flexible = codec.response_uses_flexible_header(api_key, version)
    _, offset = parse_response_header(frame, flexible_header=flexible)
    return codec.decode_response(api_key, version, frame, offset)


def create_topics(name: str):
    return build_request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 3,
                    "assignments": (),
                    "configs": (),
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )


async def test_requests_decided_while_the_controller_is_deposed_answer_not_controller(
    autojump_clock, tmp_path
):
    cluster = Cluster(tmp_path)
    store = DeposableStore(cluster.service.store)
    cluster.service.store = store
    async with trio.open_nursery() as nursery:
        await nursery.start(cluster.service.run)
        for node_id in cluster.brokers:
            await cluster.register(node_id)
        created = await answer(cluster, create_topics("before"))
        assert [t.error_code.value for t in created.topics] == [Error.NONE]

        store.deposed = True
        # A client's CreateTopics: each topic NOT_CONTROLLER (retriable), with the reason.
        refused = await answer(cluster, create_topics("after"))
        assert [t.error_code.value for t in refused.topics] == [Error.NOT_CONTROLLER]
        assert "deposed" in refused.topics[0].error_message
        # A broker's AllocateProducerIds, one of the controller's own APIs: NOT_CONTROLLER.
        allocation = build_request(
            ApiKey.ALLOCATE_PRODUCER_IDS, {"broker_id": 1, "broker_epoch": cluster.epochs[1]}
        )
        allocated = await answer(cluster, allocation, client_id="broker-1")
        assert allocated.error_code.value == Error.NOT_CONTROLLER
        nursery.cancel_scope.cancel()


async def test_a_broker_connection_closing_after_the_service_stopped_is_ignored(
    autojump_clock, tmp_path
):
    """A deposed controller's service stops while connections from brokers are still open
    (ZooKeeper mode: the node goes on as a broker); one of them closing afterwards must not
    start the broker probe in the service's closed nursery (CI: a RuntimeError there
    crashed the node)."""
    cluster = Cluster(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(cluster.service.run)
        for node_id in cluster.brokers:
            await cluster.register(node_id)
        nursery.cancel_scope.cancel()
    cluster.service.broker_connection_lost(2)
    assert not cluster.service.state.brokers[2].fenced


async def test_a_forwarded_request_reaching_a_node_that_is_not_the_active_controller(
    autojump_clock, tmp_path
):
    """A broker forwarded a CreateTopics to the node it took for the controller, which is
    not (yet) running its controller service: NOT_CONTROLLER at once, never forwarded
    again. (Under load in CI, a broker elected but still loading its state forwarded such
    a request to itself and waited on its own forwarding channel until the 15 s timeout.)"""
    cluster = Cluster(tmp_path)
    with trio.fail_after(1):
        refused = await answer(
            cluster, create_topics("orders"), client_id="broker-2-forwarding", active=False
        )
    assert [t.error_code.value for t in refused.topics] == [Error.NOT_CONTROLLER]
