"""ConsumerGroupHeartbeat v1 (KIP-848, Kafka 4.0), which kio 0.6.1 lacks: request and response,
built from Kafka 4.4's ConsumerGroupHeartbeatRequest.json and ConsumerGroupHeartbeatResponse.json
(protocol/messages/) by protocol.message_json, in kio's generated shape, with kio's names for
its time fields (``rebalance_timeout``, ``heartbeat_interval``: timedeltas), and registered in
protocol.schemas. v1 adds SubscribedTopicRegex to the request (the response is v0's; its
TopicPartitions is ``AssignedTopicPartitions`` here, as both share this module); from v1 the
client chooses its member id (KIP-1082). librdkafka 2.12+ sends only v1.
"""

from minibroker.protocol.message_json import KIO_TIMEDELTA_NAMES, build_module

TIMEDELTA_NAMES = KIO_TIMEDELTA_NAMES


def _class_name(message: str, struct: str, version: int) -> str:
    if message.endswith("Response") and struct == "TopicPartitions":
        return "AssignedTopicPartitions"
    return struct


REQUESTS, RESPONSES, _classes = build_module(
    ["ConsumerGroupHeartbeatRequest.json", "ConsumerGroupHeartbeatResponse.json"],
    _class_name,
    __name__,
    timedelta_names=TIMEDELTA_NAMES,
    versions=[1],
)
globals().update(_classes)
ConsumerGroupHeartbeatRequest = REQUESTS[(68, 1)]
ConsumerGroupHeartbeatResponse = RESPONSES[(68, 1)]
__all__ = sorted([*_classes, "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse"])
