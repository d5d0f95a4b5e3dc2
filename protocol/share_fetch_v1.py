# ruff: noqa: E501
"""ShareFetch (78) and ShareAcknowledge (79) v1-v2 (KIP-932 as Kafka 4.4 has them), which kio
0.6.1 has only at v0 (Kafka 3.9's early access): requests and responses.

Written in kio's generated shape from Kafka 4.4's ShareFetchRequest.json,
ShareFetchResponse.json, ShareAcknowledgeRequest.json and ShareAcknowledgeResponse.json, so
kio's readers and writers serve them like any other schema (registered in protocol.schemas).
The nested entities that did not change since v0 are kio's v0 ones. v1: the request's
partitions lose PartitionMaxBytes and the request gains MaxRecords and BatchSize; the
ShareFetch response gains AcquisitionLockTimeoutMs. v2 (KIP-1206, KIP-1222): ShareFetch adds
ShareAcquireMode and IsRenewAck, ShareAcknowledge adds IsRenewAck and its response
AcquisitionLockTimeoutMs. librdkafka 2.16 sends v1; Kafka 4.4's KafkaShareConsumer v2.
"""

import datetime
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.share_acknowledge.v0.request import (
    AcknowledgementBatch as AckBatch,
)
from kio.schema.share_acknowledge.v0.request import AcknowledgeTopic
from kio.schema.share_acknowledge.v0.response import (
    NodeEndpoint as AckNodeEndpoint,
)
from kio.schema.share_acknowledge.v0.response import ShareAcknowledgeTopicResponse
from kio.schema.share_fetch.v0.request import AcknowledgementBatch, ForgottenTopic
from kio.schema.share_fetch.v0.response import NodeEndpoint, ShareFetchableTopicResponse
from kio.schema.types import GroupId
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta

__all__ = ["AckBatch", "AcknowledgeTopic", "AcknowledgementBatch", "ForgottenTopic"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(78)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    acknowledgement_batches: tuple[AcknowledgementBatch, ...]
    """Record batches to acknowledge."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(78)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID."""
    partitions: tuple[FetchPartitionV1, ...]
    """The partitions to fetch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(78)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: GroupId | None = field(metadata={"kafka_type": "string"}, default=None)
    """The group identifier."""
    member_id: str | None = field(metadata={"kafka_type": "string"})
    """The member ID."""
    share_session_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """0 to open a share session; -1 to close it; otherwise increments."""
    max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The maximum time in milliseconds to wait for the response."""
    min_bytes: i32 = field(metadata={"kafka_type": "int32"})
    """The minimum bytes to accumulate in the response."""
    max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(2147483647))
    """The maximum bytes to fetch."""
    max_records: i32 = field(metadata={"kafka_type": "int32"})
    """The maximum number of records to fetch (may be exceeded for batch alignment)."""
    batch_size: i32 = field(metadata={"kafka_type": "int32"})
    """The optimal number of records for batches of acquired records and acknowledgements."""
    topics: tuple[FetchTopicV1, ...]
    """The topics to fetch."""
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    """The partitions to remove from this share session."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchRequestV2:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(78)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: GroupId | None = field(metadata={"kafka_type": "string"}, default=None)
    member_id: str | None = field(metadata={"kafka_type": "string"})
    share_session_epoch: i32 = field(metadata={"kafka_type": "int32"})
    max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    min_bytes: i32 = field(metadata={"kafka_type": "int32"})
    max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(2147483647))
    max_records: i32 = field(metadata={"kafka_type": "int32"})
    batch_size: i32 = field(metadata={"kafka_type": "int32"})
    share_acquire_mode: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    """0: batch-optimized, 1: record-limit (KIP-1206)."""
    is_renew_ack: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether RENEW acknowledgements are present (KIP-1222)."""
    topics: tuple[FetchTopicV1, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(78)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    acquisition_lock_timeout: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"},
        default=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
    )
    """The time in milliseconds for which the acquired records are locked."""
    responses: tuple[ShareFetchableTopicResponse, ...]
    node_endpoints: tuple[NodeEndpoint, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchResponseV2(ShareFetchResponseV1):
    __version__: ClassVar[i16] = i16(2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(79)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: GroupId | None = field(metadata={"kafka_type": "string"}, default=None)
    member_id: str | None = field(metadata={"kafka_type": "string"})
    share_session_epoch: i32 = field(metadata={"kafka_type": "int32"})
    topics: tuple[AcknowledgeTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeRequestV2:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(79)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: GroupId | None = field(metadata={"kafka_type": "string"}, default=None)
    member_id: str | None = field(metadata={"kafka_type": "string"})
    share_session_epoch: i32 = field(metadata={"kafka_type": "int32"})
    is_renew_ack: bool = field(metadata={"kafka_type": "bool"}, default=False)
    topics: tuple[AcknowledgeTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(79)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    responses: tuple[ShareAcknowledgeTopicResponse, ...]
    node_endpoints: tuple[AckNodeEndpoint, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeResponseV2:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(79)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    acquisition_lock_timeout: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"},
        default=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
    )
    responses: tuple[ShareAcknowledgeTopicResponse, ...]
    node_endpoints: tuple[AckNodeEndpoint, ...]


REQUESTS: dict[tuple[int, int], type] = {
    (78, 1): ShareFetchRequestV1,
    (78, 2): ShareFetchRequestV2,
    (79, 1): ShareAcknowledgeRequestV1,
    (79, 2): ShareAcknowledgeRequestV2,
}
RESPONSES: dict[tuple[int, int], type] = {
    (78, 1): ShareFetchResponseV1,
    (78, 2): ShareFetchResponseV2,
    (79, 1): ShareAcknowledgeResponseV1,
    (79, 2): ShareAcknowledgeResponseV2,
}
