"""DescribeShareGroupOffsets (90) v0-v1, AlterShareGroupOffsets (91) v0 and
DeleteShareGroupOffsets (92) v0 (KIP-932, KIP-1226 as Kafka 4.4 serves them), which kio 0.6.1
lacks: built from Kafka 4.4's message JSONs in protocol/messages/ by protocol.message_json, in
kio's generated shape, and registered in protocol.schemas.

Each class is named as the JSON struct without ``ShareGroupOffsets``, plus ``V<version>``:
``DescribeShareGroupOffsetsRequestV1``, ``DescribeRequestGroupV1``, ``AlterResponseTopicV0``.
Describe v1 adds the partition's Lag (int64, default -1) after LeaderEpoch in the response.
"""

from minibroker.protocol.message_json import build_module

REQUESTS, RESPONSES, _classes = build_module(
    [
        f"{api}ShareGroupOffsets{kind}.json"
        for api in ("Describe", "Alter", "Delete")
        for kind in ("Request", "Response")
    ],
    lambda _message, struct, version: f"{struct.replace('ShareGroupOffsets', '')}V{version}",
    __name__,
)
globals().update(_classes)
__all__ = sorted(_classes)
