"""The group coordinator service under trio's MockClock (the harness of
test_group_coordinator_service): a group's configs as the controller pushed them to this
broker, applied at each ConsumerGroupHeartbeat; and group.consumer.migration.policy's answer
to a ConsumerGroupHeartbeat for a live classic group."""

import dataclasses

import pytest
import trio

from minibroker.coordinator.group.consumer_group import HeartbeatRequest
from minibroker.protocol.errors import Error
from tests.unit.test_group_coordinator_service import Broker, cluster_state, join_request


def member_join(member_id: str = "") -> HeartbeatRequest:
    return HeartbeatRequest(
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t",),
        owned={},
    )


async def test_the_groups_configs_apply_at_each_heartbeat(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        joined = await coordinator.consumer_heartbeat("g", member_join())
        assert joined.error == Error.NONE
        assert joined.heartbeat_interval_ms == broker.config.group_consumer_heartbeat_interval_ms
        # The controller's push: the group's own interval and session.
        broker.replicas.group_configs["g"] = {
            "consumer.heartbeat.interval.ms": "1500",
            "consumer.session.timeout.ms": "4000",
        }
        again = HeartbeatRequest(member_id=joined.member_id, member_epoch=joined.member_epoch)
        answer = await coordinator.consumer_heartbeat("g", again)
        assert (answer.error, answer.heartbeat_interval_ms) == (Error.NONE, 1500)
        # Its session is the group's 4 s, not the broker's 45 s.
        await trio.sleep(3.5)
        assert joined.member_id in coordinator.groups["g"].members
        await trio.sleep(1.0)
        assert joined.member_id not in coordinator.groups["g"].members
        # Another group keeps the broker's settings.
        other = await coordinator.consumer_heartbeat("h", member_join())
        assert other.heartbeat_interval_ms == broker.config.group_consumer_heartbeat_interval_ms
        nursery.cancel_scope.cancel()
    broker.stop()


@pytest.mark.parametrize(
    ("policy", "protocol_type", "message"),
    [
        (
            "disabled",
            "consumer",
            "Cannot upgrade classic group g to consumer group because online upgrade is disabled.",
        ),
        (
            "downgrade",
            "consumer",
            "Cannot upgrade classic group g to consumer group because online upgrade is disabled.",
        ),
        (
            "bidirectional",
            "connect",
            "Cannot upgrade classic group g to consumer group because the group does not use "
            "the consumer embedded protocol.",
        ),
        # A subscription that is not the consumer protocol's: Kafka's message.
        (
            "upgrade",
            "consumer",
            "Cannot upgrade the classic group g to consumer group because the embedded "
            "consumer protocol is malformed.",
        ),
    ],
)
async def test_a_live_classic_group_is_not_upgraded(
    autojump_clock, tmp_path, policy, protocol_type, message
):
    broker = Broker(tmp_path)
    broker.config = dataclasses.replace(broker.config, group_consumer_migration_policy=policy)
    broker.coordinator.config = broker.config
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        joined = await coordinator.join(
            "g", dataclasses.replace(join_request(), protocol_type=protocol_type)
        )
        assert joined.error == Error.NONE
        answer = await coordinator.consumer_heartbeat("g", member_join())
        assert (answer.error, answer.message) == (Error.GROUP_ID_NOT_FOUND, message)
        nursery.cancel_scope.cancel()
    broker.stop()
