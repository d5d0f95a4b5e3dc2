"""A broker sends AlterPartition at v3 (KIP-903: each ISR member's broker epoch) to a
controller that serves it and at the controller's highest version otherwise, as Kafka's
AlterPartitionManager builds its request for the controller's NodeApiVersions: the broker's
controller channel asks ApiVersions once per connection. The controller here is a small
loopback server that answers ApiVersions with the range it is given and records what it
receives, over a real socket."""

import uuid

import trio

from minibroker.cluster.controller_client import ControllerClient, Described
from minibroker.common.config import BrokerConfig, Voter
from minibroker.protocol import codec
from minibroker.protocol.framing import FrameDecoder, frame_response_header, parse_request_header
from minibroker.protocol.versions import ApiKey

TOPIC_ID = uuid.UUID(int=7)


class FakeController:
    """Answers ApiVersions with AlterPartition ``2``-``highest`` and AlterPartition with an
    empty success; ``received`` holds (api key, version, decoded request) in order."""

    def __init__(self, highest: int) -> None:
        self.highest = highest
        self.received: list[tuple[int, int, object]] = []
        self.connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        decoder = FrameDecoder(1 << 20)
        while data := await stream.receive_some(65536):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                header, offset = parse_request_header(frame)
                key, version = header.api_key, header.api_version
                self.received.append(
                    (key, version, codec.decode_request(key, version, frame, offset))
                )
                if key == ApiKey.API_VERSIONS:
                    body = codec.encode_response(
                        key,
                        version,
                        {
                            "error_code": 0,
                            "api_keys": [
                                {"api_key": key, "min_version": 0, "max_version": 3},
                                {
                                    "api_key": ApiKey.ALTER_PARTITION,
                                    "min_version": 2,
                                    "max_version": self.highest,
                                },
                            ],
                        },
                    )
                else:
                    body = codec.encode_response(key, version, {"error_code": 0, "topics": ()})
                flexible = codec.response_uses_flexible_header(key, version)
                head = frame_response_header(
                    header.correlation_id, len(body), flexible_header=flexible
                )
                await stream.send_all(head + body)


def _isr_change() -> Described:
    return Described(
        ApiKey.ALTER_PARTITION,
        {
            "broker_id": 1,
            "broker_epoch": 5,
            "topics": [
                {
                    "topic_id": TOPIC_ID,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_epoch": 1,
                            "new_isr": (1, 2),
                            "new_isr_with_epochs": [
                                {"broker_id": 1, "broker_epoch": 5},
                                {"broker_id": 2, "broker_epoch": 9},
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": 3,
                        }
                    ],
                }
            ],
        },
    )


async def _sent_alter_partitions(highest: int, count: int) -> tuple[FakeController, list]:
    controller = FakeController(highest)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, controller.serve, listeners)
        config = BrokerConfig(node_id=1)
        client = ControllerClient(config, "cluster", locate=lambda: Voter(0, "127.0.0.1", port))
        for _ in range(count):
            with trio.fail_after(10):
                await client.request(_isr_change())
        await client._requests.aclose()
        nursery.cancel_scope.cancel()
    sent = [(v, r) for k, v, r in controller.received if k == ApiKey.ALTER_PARTITION]
    return controller, sent


async def test_v3_with_each_members_epoch_to_a_controller_that_serves_it():
    controller, sent = await _sent_alter_partitions(highest=3, count=2)
    assert [version for version, _ in sent] == [3, 3]
    members = sent[0][1].topics[0].partitions[0].new_isr_with_epochs
    assert [(m.broker_id, m.broker_epoch) for m in members] == [(1, 5), (2, 9)]
    # ApiVersions once, before the first request on the connection.
    assert [key for key, _, _ in controller.received] == [
        ApiKey.API_VERSIONS,
        ApiKey.ALTER_PARTITION,
        ApiKey.ALTER_PARTITION,
    ]
    assert controller.connections == 1


async def test_v2_without_epochs_to_a_controller_that_serves_no_v3():
    _controller, sent = await _sent_alter_partitions(highest=2, count=1)
    assert [version for version, _ in sent] == [2]
    assert list(sent[0][1].topics[0].partitions[0].new_isr) == [1, 2]
