"""StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89) v0-v1 (KIP-1071), and
StreamsGroupTopologyDescriptionUpdate (93) v0 (KIP-1331), which kio 0.6.1 lacks: built from
Kafka 4.4's message JSONs in protocol/messages/ by protocol.message_json, in kio's generated
shape, and registered in protocol.schemas.

Each message's class is its JSON name plus ``V<version>`` (``StreamsGroupHeartbeatRequestV1``);
a nested struct's is the message's short name, the struct's and the version
(``HeartbeatRequestTopologyV0``, ``DescribeResponseMemberV1``), 93's without its structs'
``TopologyDescription`` prefix (``TopologyUpdateRequestNodeV0``). Unlike kio, only
ThrottleTimeMs is a timedelta (``throttle_time``): the other ``...Ms`` fields keep their name
and are plain integers.
"""

from minibroker.protocol.message_json import build_module

_SHORT = {
    "StreamsGroupHeartbeat": "Heartbeat",
    "StreamsGroupDescribe": "Describe",
    "StreamsGroupTopologyDescriptionUpdate": "TopologyUpdate",
}


def _class_name(message: str, struct: str, version: int) -> str:
    kind = "Request" if message.endswith("Request") else "Response"
    short = _SHORT[message.removesuffix(kind)]
    if short == "TopologyUpdate" and struct != "TopologyDescription":
        struct = struct.removeprefix("TopologyDescription")
    return f"{short}{kind}{struct}V{version}"


REQUESTS, RESPONSES, _classes = build_module(
    [f"{api}{kind}.json" for api in _SHORT for kind in ("Request", "Response")],
    _class_name,
    __name__,
)
globals().update(_classes)
__all__ = sorted(_classes)
