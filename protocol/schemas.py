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
- Produce v13 (KIP-516): each topic named by TopicId (uuid) in place of Name, in the request
  and the response; the nested topic classes are written whole.
- TxnOffsetCommit v5 (TxnOffsetCommitRequest.json): the same as v4; with TV2 it also adds the
  group's offsets partition to the transaction (no AddOffsetsToTxn before it).

- Fetch v18 (FetchRequest.json, FetchResponse.json; KIP-1166): the request's partitions add
  the tagged HighWatermark (int64, tag 1, default 2^63-1: "not supported"), the high
  watermark the fetching replica knows; the response is v17's. kio 0.6.1 has v4-v17.

- ListOffsets v10 and v11 (ListOffsetsRequest.json, ListOffsetsResponse.json; KIP-1075,
  KIP-1023): v10's request adds TimeoutMs (int32, for tiered storage's asynchronous reads)
  after Topics; v11 is v10 (it may ask the earliest pending upload offset, -6); the responses
  are v9's. kio 0.6.1 has v0-v9.

- Metadata v13 (MetadataRequest.json, MetadataResponse.json): the request is v12's; the
  response adds a top-level ErrorCode (int16) after ClusterAuthorizedOperations, the last
  field, so a subclass of v12 is the whole layout. kio 0.6.1 has v0-v12.

- DescribeGroups v6 (DescribeGroupsRequest.json, DescribeGroupsResponse.json; KIP-1043): the
  request is v5's; each described group adds a nullable ErrorMessage after ErrorCode (so
  DescribedGroup is written whole), and a group that does not exist is GROUP_ID_NOT_FOUND.
- DeleteGroups v3 (DeleteGroupsRequest.json, DeleteGroupsResponse.json): the request is v2's;
  each result adds a nullable ErrorMessage, its last field.

- OffsetCommit v10 and OffsetFetch v10 (OffsetCommitRequest.json, OffsetFetchRequest.json
  and their responses; KIP-848): each topic is named by TopicId (uuid) in place of Name, in
  the request and in the response; the rest is v9's. The nested topic classes are written
  whole (the id takes the name's place, first).

- ApiVersions v5 (ApiVersionsRequest.json, ApiVersionsResponse.json; KIP-1242): the request
  adds ClusterId (nullable string, default null) and NodeId (int32, default -1), the cluster
  and node the client means to talk to; the response is v4's (it may carry
  REBOOTSTRAP_REQUIRED).

- ListTransactions v2 (ListTransactionsRequest.json; KIP-1152): the request adds
  TransactionalIdPattern (nullable string, default null), a regular expression the listed
  transactional ids must match; the response is v1's (INVALID_REGULAR_EXPRESSION).

- ConsumerGroupDescribe v1 (ConsumerGroupDescribeResponse.json; KIP-1099): the request is
  v0's; each member adds MemberType (int8, default -1: 0 a classic-protocol member, 1 a
  consumer-protocol one), its last field.

- AlterPartitionReassignments v1 (AlterPartitionReassignmentsRequest.json and its response):
  AllowReplicationFactorChange (bool, default true) after TimeoutMs in the request and after
  ThrottleTimeMs in the response; both written whole (the field sits mid-way).

- DescribeLogDirs v5 (DescribeLogDirsResponse.json): the request is v4's; each result adds
  IsCordoned (bool, default false), its last field.
- DescribeCluster v2 (DescribeClusterRequest.json, DescribeClusterResponse.json; KIP-1073):
  the request adds IncludeFencedBrokers (bool) after EndpointType; each broker adds IsFenced
  (bool), its last field.

- TxnOffsetCommit v6 (TxnOffsetCommitRequest.json and its response; KIP-1319): each topic
  named by TopicId (uuid) in place of Name, in the request and the response; the rest is v5's.

- UpdateFeatures v2, ListConfigResources v1, WriteShareGroupState v1,
  ReadShareGroupStateSummary v0-v1 (its response; kio 0.6.1's v0 lacks LeaderEpoch) and
  BrokerHeartbeat v2 (KIP-1066's CordonedLogDirs):
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

- UpdateMetadata v8 with each partition's ELR and last-known ELR as tagged fields (KIP-966):
  protocol/update_metadata_elr.py, registered here.

- ShareGroupHeartbeat v1 and ShareGroupDescribe v1 (KIP-932 as Kafka 4.1+ serves it: the
  only version, "validVersions": "1"): the same fields as kio's v0 (the version changed the
  member id to one the client chooses, not the layout), so each class is v0's under version 1.

The classes written here derive from kio's latest version of the same message, so the nested
entities are kio's own; only ``__version__`` and the added fields differ. The modules named
above build theirs from Kafka 4.4's message JSONs (protocol/messages/, protocol/message_json.py).
"""

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar

from kio.schema.alter_partition_reassignments.v0.request import (
    ReassignableTopic as _ReassignableTopicV0,
)
from kio.schema.alter_partition_reassignments.v0.response import (
    ReassignableTopicResponse as _ReassignableTopicResponseV0,
)
from kio.schema.api_versions.v4.request import ApiVersionsRequest as _ApiVersionsRequestV4
from kio.schema.api_versions.v4.response import ApiVersionsResponse as _ApiVersionsResponseV4
from kio.schema.consumer_group_describe.v0.request import (
    ConsumerGroupDescribeRequest as _ConsumerGroupDescribeRequestV0,
)
from kio.schema.consumer_group_describe.v0.response import (
    ConsumerGroupDescribeResponse as _ConsumerGroupDescribeResponseV0,
)
from kio.schema.consumer_group_describe.v0.response import (
    DescribedGroup as _ConsumerDescribedGroupV0,
)
from kio.schema.consumer_group_describe.v0.response import Member as _ConsumerMemberV0
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest as _DeleteGroupsRequestV2
from kio.schema.delete_groups.v2.response import DeletableGroupResult as _DeletableGroupResultV2
from kio.schema.delete_groups.v2.response import DeleteGroupsResponse as _DeleteGroupsResponseV2
from kio.schema.describe_cluster.v1.response import (
    DescribeClusterBroker as _DescribeClusterBrokerV1,
)
from kio.schema.describe_cluster.v1.response import (
    DescribeClusterResponse as _DescribeClusterResponseV1,
)
from kio.schema.describe_groups.v5.request import (
    DescribeGroupsRequest as _DescribeGroupsRequestV5,
)
from kio.schema.describe_groups.v5.response import (
    DescribedGroupMember as _DescribedGroupMemberV5,
)
from kio.schema.describe_groups.v5.response import (
    DescribeGroupsResponse as _DescribeGroupsResponseV5,
)
from kio.schema.describe_log_dirs.v4.request import (
    DescribeLogDirsRequest as _DescribeLogDirsRequestV4,
)
from kio.schema.describe_log_dirs.v4.response import (
    DescribeLogDirsResponse as _DescribeLogDirsResponseV4,
)
from kio.schema.describe_log_dirs.v4.response import (
    DescribeLogDirsResult as _DescribeLogDirsResultV4,
)
from kio.schema.end_txn.v4.request import EndTxnRequest as _EndTxnRequestV4
from kio.schema.end_txn.v4.response import EndTxnResponse as _EndTxnResponseV4
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17.request import FetchPartition as _FetchPartitionV17
from kio.schema.fetch.v17.request import FetchRequest as _FetchRequestV17
from kio.schema.fetch.v17.request import FetchTopic as _FetchTopicV17
from kio.schema.fetch.v17.request import ForgottenTopic as _ForgottenTopicV17
from kio.schema.fetch.v17.request import ReplicaState as _ReplicaStateV17
from kio.schema.fetch.v17.response import FetchResponse as _FetchResponseV17
from kio.schema.list_offsets.v9.request import ListOffsetsRequest as _ListOffsetsRequestV9
from kio.schema.list_offsets.v9.response import ListOffsetsResponse as _ListOffsetsResponseV9
from kio.schema.list_transactions.v1.request import (
    ListTransactionsRequest as _ListTransactionsRequestV1,
)
from kio.schema.list_transactions.v1.response import (
    ListTransactionsResponse as _ListTransactionsResponseV1,
)
from kio.schema.metadata.v12.request import MetadataRequest as _MetadataRequestV12
from kio.schema.metadata.v12.response import MetadataResponse as _MetadataResponseV12
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest as _OffsetCommitRequestV9,
)
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequestPartition as _OffsetCommitRequestPartitionV9,
)
from kio.schema.offset_commit.v9.response import (
    OffsetCommitResponse as _OffsetCommitResponseV9,
)
from kio.schema.offset_commit.v9.response import (
    OffsetCommitResponsePartition as _OffsetCommitResponsePartitionV9,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest as _OffsetFetchRequestV9
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequestGroup as _OffsetFetchRequestGroupV9,
)
from kio.schema.offset_fetch.v9.response import OffsetFetchResponse as _OffsetFetchResponseV9
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponseGroup as _OffsetFetchResponseGroupV9,
)
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponsePartitions as _OffsetFetchResponsePartitionsV9,
)
from kio.schema.produce.v11.request import PartitionProduceData as _PartitionProduceDataV11
from kio.schema.produce.v11.request import ProduceRequest as _ProduceRequestV11
from kio.schema.produce.v11.response import (
    PartitionProduceResponse as _PartitionProduceResponseV11,
)
from kio.schema.produce.v11.response import ProduceResponse as _ProduceResponseV11
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
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
from kio.schema.txn_offset_commit.v4.request import (
    TxnOffsetCommitRequestPartition as _TxnOffsetCommitRequestPartitionV4,
)
from kio.schema.txn_offset_commit.v4.response import (
    TxnOffsetCommitResponse as _TxnOffsetCommitResponseV4,
)
from kio.schema.txn_offset_commit.v4.response import (
    TxnOffsetCommitResponsePartition as _TxnOffsetCommitResponsePartitionV4,
)
from kio.schema.types import ProducerId
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from minibroker.protocol import consumer_group_heartbeat_v1 as _heartbeat_v1
from minibroker.protocol import kafka44_schemas as _kafka44
from minibroker.protocol import share_fetch_v1 as _share_fetch_v1
from minibroker.protocol import share_group_offsets_schemas as _share_offsets
from minibroker.protocol import streams_group_schemas as _streams
from minibroker.protocol import update_metadata_elr as _update_metadata_elr


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
class TopicProduceDataV13:
    """Produce v13's topic: by id (KIP-516)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(13)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID."""
    partition_data: tuple[_PartitionProduceDataV11, ...]
    """Each partition to produce to."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRequestV13(_ProduceRequestV11):
    """Produce v13: v12 with each topic named by its id."""

    __version__: ClassVar[i16] = i16(13)
    topic_data: tuple[TopicProduceDataV13, ...]  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceResponseV13:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(13)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID."""
    partition_responses: tuple[_PartitionProduceResponseV11, ...]
    """Each partition that we produced to within the topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV13(_ProduceResponseV11):
    __version__: ClassVar[i16] = i16(13)
    responses: tuple[TopicProduceResponseV13, ...]  # type: ignore[assignment]


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
class ListOffsetsRequestV10(_ListOffsetsRequestV9):
    """ListOffsets v10: v9 plus TimeoutMs (KIP-1075)."""

    __version__: ClassVar[i16] = i16(10)
    timeout: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"}, default=i32Timedelta.parse(timedelta(0))
    )
    """The timeout to await a response in milliseconds for requests that require reading from
    remote storage for topics enabled with tiered storage."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequestV11(ListOffsetsRequestV10):
    """ListOffsets v11: as v10; the timestamp may be -6, the earliest pending upload offset
    (KIP-1023)."""

    __version__: ClassVar[i16] = i16(11)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV10(_ListOffsetsResponseV9):
    __version__: ClassVar[i16] = i16(10)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV11(_ListOffsetsResponseV9):
    __version__: ClassVar[i16] = i16(11)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequestV13(_MetadataRequestV12):
    """Metadata v13: as v12."""

    __version__: ClassVar[i16] = i16(13)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponseV13(_MetadataResponseV12):
    """Metadata v13: v12 plus the top-level error code."""

    __version__: ClassVar[i16] = i16(13)
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"}, default=ErrorCode.none)
    """The top-level error code, or 0 if there was no error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsRequestV6(_DescribeGroupsRequestV5):
    """DescribeGroups v6: as v5."""

    __version__: ClassVar[i16] = i16(6)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroupV6:
    """DescribeGroups v6's group, written whole: ErrorMessage sits after ErrorCode."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(15)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The describe error, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The describe error message, or null if there was no error."""
    group_id: str = field(metadata={"kafka_type": "string"})
    group_state: str = field(metadata={"kafka_type": "string"})
    protocol_type: str = field(metadata={"kafka_type": "string"})
    protocol_data: str = field(metadata={"kafka_type": "string"})
    members: tuple[_DescribedGroupMemberV5, ...]
    authorized_operations: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-(2**31)))


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsResponseV6(_DescribeGroupsResponseV5):
    __version__: ClassVar[i16] = i16(6)
    groups: tuple[DescribedGroupV6, ...]  # type: ignore[assignment]  # (field order)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsRequestV3(_DeleteGroupsRequestV2):
    """DeleteGroups v3: as v2."""

    __version__: ClassVar[i16] = i16(3)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableGroupResultV3(_DeletableGroupResultV2):
    __version__: ClassVar[i16] = i16(3)
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The error message, or null if there was no error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsResponseV3(_DeleteGroupsResponseV2):
    __version__: ClassVar[i16] = i16(3)
    results: tuple[DeletableGroupResultV3, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestTopicV10:
    """OffsetCommit v10's topic: by id (KIP-848)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(10)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic ID."""
    partitions: tuple[_OffsetCommitRequestPartitionV9, ...]
    """Each partition to commit offsets for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV10(_OffsetCommitRequestV9):
    """OffsetCommit v10: v9 with each topic named by its id."""

    __version__: ClassVar[i16] = i16(10)
    topics: tuple[OffsetCommitRequestTopicV10, ...]  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponseTopicV10:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(10)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic ID."""
    partitions: tuple[_OffsetCommitResponsePartitionV9, ...]
    """The responses for each partition in the topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponseV10(_OffsetCommitResponseV9):
    __version__: ClassVar[i16] = i16(10)
    topics: tuple[OffsetCommitResponseTopicV10, ...]  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequestTopicsV10:
    """OffsetFetch v10's topic: by id (KIP-848)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(10)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(9)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic ID."""
    partition_indexes: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partition indexes we would like to fetch offsets for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequestGroupV10(_OffsetFetchRequestGroupV9):
    __version__: ClassVar[i16] = i16(10)
    topics: tuple[OffsetFetchRequestTopicsV10, ...] | None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequestV10(_OffsetFetchRequestV9):
    """OffsetFetch v10: v9 with each topic named by its id."""

    __version__: ClassVar[i16] = i16(10)
    groups: tuple[OffsetFetchRequestGroupV10, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponseTopicsV10:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(10)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(9)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic ID."""
    partitions: tuple[_OffsetFetchResponsePartitionsV9, ...]
    """The responses per partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponseGroupV10(_OffsetFetchResponseGroupV9):
    __version__: ClassVar[i16] = i16(10)
    topics: tuple[OffsetFetchResponseTopicsV10, ...]  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponseV10(_OffsetFetchResponseV9):
    __version__: ClassVar[i16] = i16(10)
    groups: tuple[OffsetFetchResponseGroupV10, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequestV5(_ApiVersionsRequestV4):
    """ApiVersions v5: v4 plus the cluster id and node id the client intends to reach."""

    __version__: ClassVar[i16] = i16(5)
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The cluster ID the client intends to connect to."""
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """The node ID the client intends to connect to."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponseV5(_ApiVersionsResponseV4):
    __version__: ClassVar[i16] = i16(5)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTransactionsRequestV2(_ListTransactionsRequestV1):
    """ListTransactions v2: v1 plus the transactional id pattern (KIP-1152)."""

    __version__: ClassVar[i16] = i16(2)
    transactional_id_pattern: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The transactional ID regular expression pattern to filter by: if it is empty or null,
    all transactions are returned; otherwise then only the transactions matching the pattern
    will be returned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTransactionsResponseV2(_ListTransactionsResponseV1):
    __version__: ClassVar[i16] = i16(2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeRequestV1(_ConsumerGroupDescribeRequestV0):
    """ConsumerGroupDescribe v1: as v0."""

    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerMemberV1(_ConsumerMemberV0):
    __version__: ClassVar[i16] = i16(1)
    member_type: i8 = field(metadata={"kafka_type": "int8"}, default=i8(-1))
    """-1 for unknown. 0 for classic member. +1 for consumer member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerDescribedGroupV1(_ConsumerDescribedGroupV0):
    __version__: ClassVar[i16] = i16(1)
    members: tuple[ConsumerMemberV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeResponseV1(_ConsumerGroupDescribeResponseV0):
    """ConsumerGroupDescribe v1: v0 plus each member's type (KIP-1099)."""

    __version__: ClassVar[i16] = i16(1)
    groups: tuple[ConsumerDescribedGroupV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionReassignmentsRequestV1:
    """AlterPartitionReassignments v1: whether the replication factor may change."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(45)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    timeout: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"},
        default=i32Timedelta.parse(timedelta(milliseconds=60000)),
    )
    """The time in ms to wait for the request to complete."""
    allow_replication_factor_change: bool = field(metadata={"kafka_type": "bool"}, default=True)
    """The option indicating whether changing the replication factor of any given partition
    as part of this request is a valid move."""
    topics: tuple[_ReassignableTopicV0, ...]
    """The topics to reassign."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionReassignmentsResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(45)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled."""
    allow_replication_factor_change: bool = field(metadata={"kafka_type": "bool"}, default=True)
    """The option indicating whether changing the replication factor was allowed."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"})
    """The top-level error message, or null if there was no error."""
    responses: tuple[_ReassignableTopicResponseV0, ...]
    """The responses to topics to reassign."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsRequestV5(_DescribeLogDirsRequestV4):
    """DescribeLogDirs v5: as v4."""

    __version__: ClassVar[i16] = i16(5)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsResultV5(_DescribeLogDirsResultV4):
    __version__: ClassVar[i16] = i16(5)
    is_cordoned: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """True if this log directory is cordoned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsResponseV5(_DescribeLogDirsResponseV4):
    """DescribeLogDirs v5: v4 plus whether each directory is cordoned."""

    __version__: ClassVar[i16] = i16(5)
    results: tuple[DescribeLogDirsResultV5, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterRequestV2:
    """DescribeCluster v2: v1 plus IncludeFencedBrokers (KIP-1073)."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(60)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    include_cluster_authorized_operations: bool = field(metadata={"kafka_type": "bool"})
    """Whether to include cluster authorized operations."""
    endpoint_type: i8 = field(metadata={"kafka_type": "int8"}, default=i8(1))
    """The endpoint type to describe. 1=brokers, 2=controllers."""
    include_fenced_brokers: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether to include fenced brokers when listing brokers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterBrokerV2(_DescribeClusterBrokerV1):
    __version__: ClassVar[i16] = i16(2)
    is_fenced: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether the broker is fenced"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterResponseV2(_DescribeClusterResponseV1):
    __version__: ClassVar[i16] = i16(2)
    brokers: tuple[DescribeClusterBrokerV2, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestTopicV6:
    """TxnOffsetCommit v6's topic: by id (KIP-1319)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(28)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic ID."""
    partitions: tuple[_TxnOffsetCommitRequestPartitionV4, ...]
    """The partitions inside the topic that we want to commit offsets for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestV6(_TxnOffsetCommitRequestV4):
    """TxnOffsetCommit v6: v5 with each topic named by its id."""

    __version__: ClassVar[i16] = i16(6)
    topics: tuple[TxnOffsetCommitRequestTopicV6, ...]  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponseTopicV6:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(28)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The topic ID."""
    partitions: tuple[_TxnOffsetCommitResponsePartitionV4, ...]
    """The responses for each partition in the topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponseV6(_TxnOffsetCommitResponseV4):
    __version__: ClassVar[i16] = i16(6)
    topics: tuple[TxnOffsetCommitResponseTopicV6, ...]  # type: ignore[assignment]


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


# (api key, version) -> class, for the codec.
REQUESTS: dict[tuple[int, int], type] = {
    (2, 10): ListOffsetsRequestV10,
    (2, 11): ListOffsetsRequestV11,
    (3, 13): MetadataRequestV13,
    (35, 5): DescribeLogDirsRequestV5,
    (60, 2): DescribeClusterRequestV2,
    (45, 1): AlterPartitionReassignmentsRequestV1,
    (69, 1): ConsumerGroupDescribeRequestV1,
    (66, 2): ListTransactionsRequestV2,
    (18, 5): ApiVersionsRequestV5,
    (8, 10): OffsetCommitRequestV10,
    (9, 10): OffsetFetchRequestV10,
    (15, 6): DescribeGroupsRequestV6,
    (42, 3): DeleteGroupsRequestV3,
    (76, 1): ShareGroupHeartbeatRequestV1,
    (77, 1): ShareGroupDescribeRequestV1,
    (26, 5): EndTxnRequestV5,
    (0, 12): ProduceRequestV12,
    (0, 13): ProduceRequestV13,
    (28, 5): TxnOffsetCommitRequestV5,
    (28, 6): TxnOffsetCommitRequestV6,
    **_heartbeat_v1.REQUESTS,
    (1, 18): FetchRequestV18,
    **_share_fetch_v1.REQUESTS,
    **_share_offsets.REQUESTS,
    **_streams.REQUESTS,
    **_kafka44.REQUESTS,
    **_update_metadata_elr.REQUESTS,
}
RESPONSES: dict[tuple[int, int], type] = {
    (2, 10): ListOffsetsResponseV10,
    (2, 11): ListOffsetsResponseV11,
    (3, 13): MetadataResponseV13,
    (35, 5): DescribeLogDirsResponseV5,
    (60, 2): DescribeClusterResponseV2,
    (45, 1): AlterPartitionReassignmentsResponseV1,
    (69, 1): ConsumerGroupDescribeResponseV1,
    (66, 2): ListTransactionsResponseV2,
    (18, 5): ApiVersionsResponseV5,
    (8, 10): OffsetCommitResponseV10,
    (9, 10): OffsetFetchResponseV10,
    (15, 6): DescribeGroupsResponseV6,
    (42, 3): DeleteGroupsResponseV3,
    (76, 1): ShareGroupHeartbeatResponseV1,
    (77, 1): ShareGroupDescribeResponseV1,
    (26, 5): EndTxnResponseV5,
    (0, 12): ProduceResponseV12,
    (0, 13): ProduceResponseV13,
    (28, 5): TxnOffsetCommitResponseV5,
    (28, 6): TxnOffsetCommitResponseV6,
    **_heartbeat_v1.RESPONSES,
    (1, 18): FetchResponseV18,
    **_share_fetch_v1.RESPONSES,
    **_share_offsets.RESPONSES,
    **_streams.RESPONSES,
    **_kafka44.RESPONSES,
}
