"""DescribeQuorum (55): the metadata quorum, as `kafka-metadata-quorum.sh describe` shows it.

Kafka's controllers replicate the cluster's metadata as a Raft log, the `__cluster_metadata`
topic's one partition; DescribeQuorum (KafkaRaftClient.handleDescribeQuorumRequest, through
the broker's forwarding to the active controller) answers its leader, epoch and high
watermark, each voter's and observer's (the brokers') log end offset and the times of their
last fetch and last catch-up, and, from v2 (KIP-853), the voters' listeners.

minibroker runs one controller and keeps its decisions as a saved state, not as a log; what it
answers is the true picture of that quorum, in Kafka's terms:

- one voter, the controller, which is the leader; the leader epoch is the controller epoch
  (one more at each start of the controller);
- the high watermark, and the voter's log end offset, is the number of times the controller
  has saved its state (ControllerState.metadata_offset): one more per decision, never back;
- the observers are the registered brokers (a combined node is the voter, not an observer):
  an unfenced broker is caught up (its log end offset the high watermark, its last fetch and
  last catch-up its last heartbeat); a fenced one has fetched at its last heartbeat and is
  not caught up (log end offset -1, Kafka's value for unknown).

ZooKeeper mode has no metadata quorum: Kafka 3.x's ZooKeeper brokers do not serve DescribeQuorum
(its listeners are broker and controller, not zkBroker), and neither does minibroker's
(``kraft_only``), so the tool hears UNSUPPORTED_VERSION there, as from Kafka 3.x.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.authorization import cluster_allowed, wait_for_cluster_acls
from minibroker.apis.forwarding import decided_by_controller
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation

if TYPE_CHECKING:
    from minibroker.controller.service import ControllerService

METADATA_TOPIC = "__cluster_metadata"


def _error_response(request, error: Error) -> dict:
    return {"error_code": error, "error_message": None, "topics": (), "nodes": ()}


def describe(controller: ControllerService, now_ms: int, wall_now_ms: int) -> dict:
    """The answer, from the controller's state (see the module's docstring). ``now_ms`` is the
    controller's clock (monotonic: what heartbeats are timed by); the timestamps answered are
    wall-clock milliseconds, as Kafka's, so they are moved by ``wall_now_ms - now_ms``."""
    shift = wall_now_ms - now_ms
    state = controller.state
    config = controller.config
    offset = state.metadata_offset
    voter = config.controller
    voters = [
        {
            "replica_id": controller.node_id,
            "replica_directory_id": None,
            "log_end_offset": offset,
            "last_fetch_timestamp": wall_now_ms,
            "last_caught_up_timestamp": wall_now_ms,
        }
    ]
    observers = [
        {
            "replica_id": broker.node_id,
            "replica_directory_id": None,
            "log_end_offset": -1 if broker.fenced else offset,
            "last_fetch_timestamp": broker.last_heartbeat_ms + shift,
            "last_caught_up_timestamp": -1 if broker.fenced else broker.last_heartbeat_ms + shift,
        }
        for broker in sorted(state.brokers.values(), key=lambda broker: broker.node_id)
        if broker.node_id != controller.node_id
    ]
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "topics": (
            {
                "topic_name": METADATA_TOPIC,
                "partitions": (
                    {
                        "partition_index": 0,
                        "error_code": Error.NONE,
                        "error_message": None,
                        "leader_id": controller.node_id,
                        "leader_epoch": state.controller_epoch,
                        "high_watermark": offset,
                        "current_voters": tuple(voters),
                        "observers": tuple(observers),
                    },
                ),
            },
        ),
        "nodes": (
            {
                "node_id": controller.node_id,
                "listeners": (
                    {
                        "name": config.controller_listener_name,
                        "host": voter.host,
                        "port": voter.port,
                    },
                ),
            },
        ),
    }


async def _decide(controller: ControllerService, request) -> dict:
    return describe(controller, controller.clock_ms(), int(time.time() * 1000))


@api(
    ApiKey.DESCRIBE_QUORUM,
    versions=(0, 2),
    roles=Role.BOTH,
    senders=Senders.CLIENTS_AND_NODES,
    controller_decides=True,
    kraft_only=True,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    """DESCRIBE on the cluster (Kafka's AclAuthorizer rule for DescribeQuorum); a request for
    another topic or partition than the metadata log's gets Kafka's per-partition answer."""
    await wait_for_cluster_acls(ctx)
    if not cluster_allowed(ctx, Operation.DESCRIBE):
        return _error_response(request, Error.CLUSTER_AUTHORIZATION_FAILED)
    asked = [
        (topic.topic_name, partition.partition_index)
        for topic in request.topics
        for partition in topic.partitions
    ]
    if asked != [(METADATA_TOPIC, 0)]:
        # KafkaRaftClient: a single partition, the metadata log's, else INVALID_REQUEST.
        return _error_response(request, Error.INVALID_REQUEST)
    return await decided_by_controller(
        ctx, request, _decide, lambda failure: _error_response(request, failure.error)
    )
