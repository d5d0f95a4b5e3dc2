"""Message schemas of Kafka 4 that kio 0.6.1 does not have, in kio's generated style.

kio 0.6.1 was generated from Kafka's message definitions before KIP-890 part 2 (Kafka's
transaction protocol version 2) was final. These versions are that protocol, written here as
kio entities so that the codec (protocol/codec.py) reads and writes them like any other:

- EndTxn v5 (clients/.../message/EndTxnRequest.json, EndTxnResponse.json): the request is
  v4's; the response adds ProducerId (int64, default -1) and ProducerEpoch (int16, default -1)
  after ErrorCode, the producer id and epoch the client uses for its next transaction.
- Produce v12 (ProduceRequest.json, ProduceResponse.json): the same as v11 ("Version 12 is
  the same as version 11 (KIP-890)"); a transactional client sends it without
  AddPartitionsToTxn. minibroker decodes and encodes Produce by hand
  (protocol/produce_request.py, produce_response.py); these classes are for the codec's
  header rules and for tests.
- TxnOffsetCommit v5 (TxnOffsetCommitRequest.json): the same as v4; with TV2 it also adds the
  group's offsets partition to the transaction (no AddOffsetsToTxn before it).

- Fetch v18 (FetchRequest.json, FetchResponse.json; KIP-1166): the request's partitions add
  the tagged HighWatermark (int64, tag 1, default 2^63-1: "not supported"), the high
  watermark the fetching replica knows; the response is v17's. kio 0.6.1 has v4-v17.

- UpdateFeatures v2, ListConfigResources v1, WriteShareGroupState v1 and
  ReadShareGroupStateSummary v0-v1 (its response; kio 0.6.1's v0 lacks LeaderEpoch):
  protocol/kafka44_schemas.py, built from Kafka 4.4's JSONs, registered here.

- ConsumerGroupHeartbeat v1 (KIP-848, Kafka 4.0: the request adds SubscribedTopicRegex),
  which librdkafka 2.12+ sends alone: a whole schema of its own, built from Kafka 4.4's JSONs
  in protocol/consumer_group_heartbeat_v1.py, registered here.
- StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89) v0-v1 (KIP-1071) and
  StreamsGroupTopologyDescriptionUpdate (93) v0 (KIP-1331): kio 0.6.1 has none of them;
  protocol/streams_group_schemas.py, built at import time from Kafka 4.4's JSONs
  (protocol/message_json.py).

- ShareFetch and ShareAcknowledge v1-v2 (KIP-932 as Kafka 4.4 serves them; kio has v0):
  protocol/share_fetch_v1.py, built from Kafka 4.4's JSONs, registered here.
- DescribeShareGroupOffsets v0-v1, AlterShareGroupOffsets v0 and DeleteShareGroupOffsets v0
  (KIP-932's admin path, KIP-1226's lag): kio 0.6.1 has none of them;
  protocol/share_group_offsets_schemas.py, built likewise, registered here.

- ShareGroupHeartbeat v1 and ShareGroupDescribe v1 (KIP-932 as Kafka 4.1+ serves it: the
  only version, "validVersions": "1"): the same fields as kio's v0 (the version changed the
  member id to one the client chooses, not the layout), so each class is v0's under version 1.

The classes written here derive from kio's latest version of the same message, so the nested
entities are kio's own; only ``__version__`` and the added fields differ. The modules named
above build theirs from Kafka 4.4's message JSONs (protocol/messages/, protocol/message_json.py).
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.end_txn.v4.request import EndTxnRequest as _EndTxnRequestV4
from kio.schema.end_txn.v4.response import EndTxnResponse as _EndTxnResponseV4
from kio.schema.fetch.v17.request import FetchPartition as _FetchPartitionV17
from kio.schema.fetch.v17.request import FetchRequest as _FetchRequestV17
from kio.schema.fetch.v17.request import FetchTopic as _FetchTopicV17
from kio.schema.fetch.v17.request import ForgottenTopic as _ForgottenTopicV17
from kio.schema.fetch.v17.request import ReplicaState as _ReplicaStateV17
from kio.schema.fetch.v17.response import FetchResponse as _FetchResponseV17
from kio.schema.produce.v11.request import ProduceRequest as _ProduceRequestV11
from kio.schema.produce.v11.response import ProduceResponse as _ProduceResponseV11
from kio.schema.share_group_describe.v0.request import (
    ShareGroupDescribeRequest as _ShareGroupDescribeRequestV0,
)
from kio.schema.share_group_describe.v0.response import (
    ShareGroupDescribeResponse as _ShareGroupDescribeResponseV0,
)
from kio.schema.share_group_heartbeat.v0.request import (
    ShareGroupHeartbeatRequest as _ShareGroupHeartbeatRequestV0,
)
from kio.schema.share_group_heartbeat.v0.response import (
    ShareGroupHeartbeatResponse as _ShareGroupHeartbeatResponseV0,
)
from kio.schema.txn_offset_commit.v4.request import (
    TxnOffsetCommitRequest as _TxnOffsetCommitRequestV4,
)
from kio.schema.txn_offset_commit.v4.response import (
    TxnOffsetCommitResponse as _TxnOffsetCommitResponseV4,
)
from kio.schema.types import ProducerId
from kio.static.primitive import i16, i64

from minibroker.protocol import consumer_group_heartbeat_v1 as _heartbeat_v1
from minibroker.protocol import kafka44_schemas as _kafka44
from minibroker.protocol import share_fetch_v1 as _share_fetch_v1
from minibroker.protocol import share_group_offsets_schemas as _share_offsets
from minibroker.protocol import streams_group_schemas as _streams


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnRequestV5(_EndTxnRequestV4):
    """EndTxn v5: as v4; the coordinator bumps the epoch (KIP-890 part 2)."""

    __version__: ClassVar[i16] = i16(5)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnResponseV5(_EndTxnResponseV4):
    """EndTxn v5: v4 plus the producer id and epoch of the client's next transaction."""

    __version__: ClassVar[i16] = i16(5)
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"}, default=ProducerId(-1))
    """The producer ID."""
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"}, default=i16(-1))
    """The current epoch associated with the producer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRequestV12(_ProduceRequestV11):
    """Produce v12: as v11 (a TV2 client's transactional produce adds the partition)."""

    __version__: ClassVar[i16] = i16(12)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV12(_ProduceResponseV11):
    __version__: ClassVar[i16] = i16(12)


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestV5(_TxnOffsetCommitRequestV4):
    """TxnOffsetCommit v5: as v4 (with TV2 it also adds the offsets partition)."""

    __version__: ClassVar[i16] = i16(5)


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponseV5(_TxnOffsetCommitResponseV4):
    __version__: ClassVar[i16] = i16(5)


# "Not supported": what a replica that does not track the high watermark sends (KIP-1166).
HIGH_WATERMARK_NOT_SUPPORTED = i64(2**63 - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionV18(_FetchPartitionV17):
    __version__: ClassVar[i16] = i16(18)
    high_watermark: i64 = field(
        metadata={"kafka_type": "int64", "tag": 1}, default=HIGH_WATERMARK_NOT_SUPPORTED
    )
    """The high-watermark known by the replica. -1 if the high-watermark is not known and
    9223372036854775807 if the feature is not supported."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicV18(_FetchTopicV17):
    __version__: ClassVar[i16] = i16(18)
    partitions: tuple[FetchPartitionV18, ...]
    """The partitions to fetch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgottenTopicV18(_ForgottenTopicV17):
    __version__: ClassVar[i16] = i16(18)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStateV18(_ReplicaStateV17):
    __version__: ClassVar[i16] = i16(18)


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestV18(_FetchRequestV17):
    """Fetch v18: v17 plus each partition's tagged HighWatermark (KIP-1166)."""

    __version__: ClassVar[i16] = i16(18)
    replica_state: ReplicaStateV18 = field(metadata={"tag": 1}, default=ReplicaStateV18())
    topics: tuple[FetchTopicV18, ...]
    """The topics to fetch."""
    forgotten_topics_data: tuple[ForgottenTopicV18, ...]
    """In an incremental fetch request, the partitions to remove."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponseV18(_FetchResponseV17):
    """Fetch v18: the response is v17's (KIP-1166 changes only the request)."""

    __version__: ClassVar[i16] = i16(18)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupHeartbeatRequestV1(_ShareGroupHeartbeatRequestV0):
    """ShareGroupHeartbeat v1: v0's fields; the member id is the client's."""

    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupHeartbeatResponseV1(_ShareGroupHeartbeatResponseV0):
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupDescribeRequestV1(_ShareGroupDescribeRequestV0):
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupDescribeResponseV1(_ShareGroupDescribeResponseV0):
    __version__: ClassVar[i16] = i16(1)


REQUESTS: dict[tuple[int, int], type] = {
    (76, 1): ShareGroupHeartbeatRequestV1,
    (77, 1): ShareGroupDescribeRequestV1,
    (26, 5): EndTxnRequestV5,
    (0, 12): ProduceRequestV12,
    (28, 5): TxnOffsetCommitRequestV5,
    **_heartbeat_v1.REQUESTS,
    (1, 18): FetchRequestV18,
    **_share_fetch_v1.REQUESTS,
    **_share_offsets.REQUESTS,
    **_streams.REQUESTS,
    **_kafka44.REQUESTS,
}
RESPONSES: dict[tuple[int, int], type] = {
    (76, 1): ShareGroupHeartbeatResponseV1,
    (77, 1): ShareGroupDescribeResponseV1,
    (26, 5): EndTxnResponseV5,
    (0, 12): ProduceResponseV12,
    (28, 5): TxnOffsetCommitResponseV5,
    **_heartbeat_v1.RESPONSES,
    (1, 18): FetchResponseV18,
    **_share_fetch_v1.RESPONSES,
    **_share_offsets.RESPONSES,
    **_streams.RESPONSES,
    **_kafka44.RESPONSES,
}
