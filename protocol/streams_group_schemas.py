# ruff: noqa: E501
"""StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89) v0-v1 (KIP-1071), and
StreamsGroupTopologyDescriptionUpdate (93) v0 (KIP-1331), which kio 0.6.1 lacks: requests and
responses in kio's generated shape, so that kio's readers and writers serve them like any other
schema (registered in protocol.schemas). The 93 classes were written by hand in the generated
shape, from StreamsGroupTopologyDescriptionUpdateRequest.json and ...Response.json.

Generated from Kafka 4.4's StreamsGroupHeartbeatRequest.json, StreamsGroupHeartbeatResponse.json,
StreamsGroupDescribeRequest.json and StreamsGroupDescribeResponse.json (kafka-clients-4.4.0.jar,
common/message/), one class per struct and version. Field names are the JSON names in snake case;
unlike kio, only ThrottleTimeMs is a timedelta (``throttle_time``): the other ``...Ms`` fields
keep their name and are plain integers.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64, u16


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestKeyValueV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    key: str = field(metadata={"kafka_type": "string"})
    """key of the config"""
    value: str = field(metadata={"kafka_type": "string"})
    """value of the config"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTopicInfoV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of the topic."""
    partitions: i32 = field(metadata={"kafka_type": "int32"})
    """The number of partitions in the topic. Can be 0 if no specific number of partitions is enforced. Always 0 for changelog topics."""
    replication_factor: i16 = field(metadata={"kafka_type": "int16"})
    """The replication factor of the topic. Can be 0 if the default replication factor should be used."""
    topic_configs: tuple[HeartbeatRequestKeyValueV0, ...]
    """Topic-level configurations as key-value pairs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestCopartitionGroupV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    source_topics: tuple[i16, ...] = field(metadata={"kafka_type": "int16"}, default=())
    """The topics the topology reads from. Index into the array on the subtopology level."""
    source_topic_regex: tuple[i16, ...] = field(metadata={"kafka_type": "int16"}, default=())
    """Regular expressions identifying topics the subtopology reads from. Index into the array on the subtopology level."""
    repartition_source_topics: tuple[i16, ...] = field(metadata={"kafka_type": "int16"}, default=())
    """The set of source topics that are internally created repartition topics. Index into the array on the subtopology level."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestSubtopologyV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """String to uniquely identify the subtopology. Deterministically generated from the topology"""
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The topics the topology reads from."""
    source_topic_regex: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The regular expressions identifying topics the subtopology reads from."""
    state_changelog_topics: tuple[HeartbeatRequestTopicInfoV0, ...]
    """The set of state changelog topics associated with this subtopology. Created automatically."""
    repartition_sink_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The repartition topics the subtopology writes to."""
    repartition_source_topics: tuple[HeartbeatRequestTopicInfoV0, ...]
    """The set of source topics that are internally created repartition topics. Created automatically."""
    copartition_groups: tuple[HeartbeatRequestCopartitionGroupV0, ...]
    """A subset of source topics that must be copartitioned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTopologyV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the topology. Used to check if the topology corresponds to the topology initialized on the brokers."""
    subtopologies: tuple[HeartbeatRequestSubtopologyV0, ...]
    """The sub-topologies of the streams application."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTaskIdsV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions of the input topics processed by this member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestEndpointV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    host: str = field(metadata={"kafka_type": "string"})
    """host of the endpoint"""
    port: u16 = field(metadata={"kafka_type": "uint16"})
    """port of the endpoint"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTaskOffsetV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partition: i32 = field(metadata={"kafka_type": "int32"})
    """The partition."""
    offset: i64 = field(metadata={"kafka_type": "int64"})
    """The offset."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatRequestV0:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata={"kafka_type": "string"})
    """The group identifier."""
    member_id: str = field(metadata={"kafka_type": "string"})
    """The member ID generated by the streams consumer. The member ID must be kept during the entire lifetime of the streams consumer process."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The current member epoch; 0 to join the group; -1 to leave the group; -2 to indicate that the static member will rejoin."""
    endpoint_information_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The current endpoint epoch of this client, represents the latest endpoint epoch this client received"""
    instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """null if not provided or if it didn't change since the last heartbeat; the instance ID for static membership otherwise."""
    rack_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """null if not provided or if it didn't change since the last heartbeat; the rack ID of the member otherwise."""
    rebalance_timeout_ms: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """-1 if it didn't change since the last heartbeat; the maximum time in milliseconds that the coordinator will wait on the member to revoke its tasks otherwise."""
    topology: HeartbeatRequestTopologyV0 | None = field(default=None)
    """The topology metadata of the streams application. Used to initialize the topology of the group and to check if the topology corresponds to the topology initialized for the group. Only sent when memberEpoch = 0, must be non-empty. Null otherwise."""
    active_tasks: tuple[HeartbeatRequestTaskIdsV0, ...] | None = field(default=None)
    """Currently owned active tasks for this client. Null if unchanged since last heartbeat."""
    standby_tasks: tuple[HeartbeatRequestTaskIdsV0, ...] | None = field(default=None)
    """Currently owned standby tasks for this client. Null if unchanged since last heartbeat."""
    warmup_tasks: tuple[HeartbeatRequestTaskIdsV0, ...] | None = field(default=None)
    """Currently owned warm-up tasks for this client. Null if unchanged since last heartbeat."""
    process_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """Identity of the streams instance that may have multiple consumers. Null if unchanged since last heartbeat."""
    user_endpoint: HeartbeatRequestEndpointV0 | None = field(default=None)
    """User-defined endpoint for Interactive Queries. Null if unchanged since last heartbeat, or if not defined on the client."""
    client_tags: tuple[HeartbeatRequestKeyValueV0, ...] | None = field(default=None)
    """Used for rack-aware assignment algorithm. Null if unchanged since last heartbeat."""
    task_offsets: tuple[HeartbeatRequestTaskOffsetV0, ...] | None = field(default=None)
    """Cumulative changelog offsets for tasks. Only updated when a warm-up task has caught up, and according to the task offset interval. Null if unchanged since last heartbeat."""
    task_end_offsets: tuple[HeartbeatRequestTaskOffsetV0, ...] | None = field(default=None)
    """Cumulative changelog end-offsets for tasks. Only updated when a warm-up task has caught up, and according to the task offset interval. Null if unchanged since last heartbeat."""
    shutdown_application: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether all Streams clients in the group should shut down."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestKeyValueV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    key: str = field(metadata={"kafka_type": "string"})
    """key of the config"""
    value: str = field(metadata={"kafka_type": "string"})
    """value of the config"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTopicInfoV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of the topic."""
    partitions: i32 = field(metadata={"kafka_type": "int32"})
    """The number of partitions in the topic. Can be 0 if no specific number of partitions is enforced. Always 0 for changelog topics."""
    replication_factor: i16 = field(metadata={"kafka_type": "int16"})
    """The replication factor of the topic. Can be 0 if the default replication factor should be used."""
    topic_configs: tuple[HeartbeatRequestKeyValueV1, ...]
    """Topic-level configurations as key-value pairs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestCopartitionGroupV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    source_topics: tuple[i16, ...] = field(metadata={"kafka_type": "int16"}, default=())
    """The topics the topology reads from. Index into the array on the subtopology level."""
    source_topic_regex: tuple[i16, ...] = field(metadata={"kafka_type": "int16"}, default=())
    """Regular expressions identifying topics the subtopology reads from. Index into the array on the subtopology level."""
    repartition_source_topics: tuple[i16, ...] = field(metadata={"kafka_type": "int16"}, default=())
    """The set of source topics that are internally created repartition topics. Index into the array on the subtopology level."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestSubtopologyV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """String to uniquely identify the subtopology. Deterministically generated from the topology"""
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The topics the topology reads from."""
    source_topic_regex: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The regular expressions identifying topics the subtopology reads from."""
    state_changelog_topics: tuple[HeartbeatRequestTopicInfoV1, ...]
    """The set of state changelog topics associated with this subtopology. Created automatically."""
    repartition_sink_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The repartition topics the subtopology writes to."""
    repartition_source_topics: tuple[HeartbeatRequestTopicInfoV1, ...]
    """The set of source topics that are internally created repartition topics. Created automatically."""
    copartition_groups: tuple[HeartbeatRequestCopartitionGroupV1, ...]
    """A subset of source topics that must be copartitioned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTopologyV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the topology. Used to check if the topology corresponds to the topology initialized on the brokers."""
    subtopologies: tuple[HeartbeatRequestSubtopologyV1, ...]
    """The sub-topologies of the streams application."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTaskIdsV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions of the input topics processed by this member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestEndpointV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    host: str = field(metadata={"kafka_type": "string"})
    """host of the endpoint"""
    port: u16 = field(metadata={"kafka_type": "uint16"})
    """port of the endpoint"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequestTaskOffsetV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partition: i32 = field(metadata={"kafka_type": "int32"})
    """The partition."""
    offset: i64 = field(metadata={"kafka_type": "int64"})
    """The offset."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata={"kafka_type": "string"})
    """The group identifier."""
    member_id: str = field(metadata={"kafka_type": "string"})
    """The member ID generated by the streams consumer. The member ID must be kept during the entire lifetime of the streams consumer process."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The current member epoch; 0 to join the group; -1 to leave the group; -2 to indicate that the static member will rejoin."""
    endpoint_information_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The current endpoint epoch of this client, represents the latest endpoint epoch this client received"""
    instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """null if not provided or if it didn't change since the last heartbeat; the instance ID for static membership otherwise."""
    rack_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """null if not provided or if it didn't change since the last heartbeat; the rack ID of the member otherwise."""
    rebalance_timeout_ms: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """-1 if it didn't change since the last heartbeat; the maximum time in milliseconds that the coordinator will wait on the member to revoke its tasks otherwise."""
    topology: HeartbeatRequestTopologyV1 | None = field(default=None)
    """The topology metadata of the streams application. Used to initialize the topology of the group and to check if the topology corresponds to the topology initialized for the group. Only sent when memberEpoch = 0, must be non-empty. Null otherwise."""
    active_tasks: tuple[HeartbeatRequestTaskIdsV1, ...] | None = field(default=None)
    """Currently owned active tasks for this client. Null if unchanged since last heartbeat."""
    standby_tasks: tuple[HeartbeatRequestTaskIdsV1, ...] | None = field(default=None)
    """Currently owned standby tasks for this client. Null if unchanged since last heartbeat."""
    warmup_tasks: tuple[HeartbeatRequestTaskIdsV1, ...] | None = field(default=None)
    """Currently owned warm-up tasks for this client. Null if unchanged since last heartbeat."""
    process_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """Identity of the streams instance that may have multiple consumers. Null if unchanged since last heartbeat."""
    user_endpoint: HeartbeatRequestEndpointV1 | None = field(default=None)
    """User-defined endpoint for Interactive Queries. Null if unchanged since last heartbeat, or if not defined on the client."""
    client_tags: tuple[HeartbeatRequestKeyValueV1, ...] | None = field(default=None)
    """Used for rack-aware assignment algorithm. Null if unchanged since last heartbeat."""
    task_offsets: tuple[HeartbeatRequestTaskOffsetV1, ...] | None = field(default=None)
    """Cumulative changelog offsets for tasks. Only updated when a warm-up task has caught up, and according to the task offset interval. Null if unchanged since last heartbeat."""
    task_end_offsets: tuple[HeartbeatRequestTaskOffsetV1, ...] | None = field(default=None)
    """Cumulative changelog end-offsets for tasks. Only updated when a warm-up task has caught up, and according to the task offset interval. Null if unchanged since last heartbeat."""
    shutdown_application: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether all Streams clients in the group should shut down."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseStatusV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    status_code: i8 = field(metadata={"kafka_type": "int8"})
    """A code to indicate that a particular status is active for the group membership"""
    status_detail: str = field(metadata={"kafka_type": "string"})
    """A string representation of the status."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseTaskIdsV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions of the input topics processed by this member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseEndpointV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    host: str = field(metadata={"kafka_type": "string"})
    """host of the endpoint"""
    port: u16 = field(metadata={"kafka_type": "uint16"})
    """port of the endpoint"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseTopicPartitionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic: str = field(metadata={"kafka_type": "string"})
    """topic name"""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """partitions"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseEndpointToPartitionsV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    user_endpoint: HeartbeatResponseEndpointV0
    """User-defined endpoint to connect to the node"""
    active_partitions: tuple[HeartbeatResponseTopicPartitionV0, ...]
    """The source topic partitions, including repartition source topics, of the active tasks assigned to this member"""
    standby_partitions: tuple[HeartbeatResponseTopicPartitionV0, ...]
    """The source topic partitions, including repartition source topics, of the standby and warm-up tasks assigned to this member"""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the request did not violate any quota."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code, or 0 if there was no error"""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The top-level error message, or null if there was no error."""
    member_id: str = field(metadata={"kafka_type": "string"})
    """The member id is always generated by the streams consumer."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The member epoch."""
    heartbeat_interval_ms: i32 = field(metadata={"kafka_type": "int32"})
    """The heartbeat interval in milliseconds."""
    acceptable_recovery_lag_legacy: i32 = field(metadata={"kafka_type": "int32"})
    """Deprecated. The maximum acceptable lag (number of offsets to catch up) for a client to be considered caught-up enough to receive an active task assignment. Use AcceptableRecoveryLag instead."""
    task_offset_interval_ms: i32 = field(metadata={"kafka_type": "int32"})
    """The interval in which the task changelog offsets on a client are updated on the broker. The offsets are sent with the next heartbeat after this time has passed."""
    status: tuple[HeartbeatResponseStatusV0, ...] | None = field(default=None)
    """Indicate zero or more status for the group."""
    active_tasks: tuple[HeartbeatResponseTaskIdsV0, ...] | None = field(default=None)
    """Assigned active tasks for this client. Null if unchanged since last heartbeat."""
    standby_tasks: tuple[HeartbeatResponseTaskIdsV0, ...] | None = field(default=None)
    """Assigned standby tasks for this client. Null if unchanged since last heartbeat."""
    warmup_tasks: tuple[HeartbeatResponseTaskIdsV0, ...] | None = field(default=None)
    """Assigned warm-up tasks for this client. Null if unchanged since last heartbeat."""
    endpoint_information_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The endpoint epoch set in the response"""
    partitions_by_user_endpoint: tuple[HeartbeatResponseEndpointToPartitionsV0, ...] | None = field(
        default=None
    )
    """Global assignment information used for IQ. There is one entry per member, so several entries carry the same UserEndpoint when a client runs more than one stream thread; clients must union the entries of an endpoint. Null if unchanged since last heartbeat."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseStatusV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    status_code: i8 = field(metadata={"kafka_type": "int8"})
    """A code to indicate that a particular status is active for the group membership"""
    status_detail: str = field(metadata={"kafka_type": "string"})
    """A string representation of the status."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseTaskIdsV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions of the input topics processed by this member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseEndpointV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    host: str = field(metadata={"kafka_type": "string"})
    """host of the endpoint"""
    port: u16 = field(metadata={"kafka_type": "uint16"})
    """port of the endpoint"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseTopicPartitionV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic: str = field(metadata={"kafka_type": "string"})
    """topic name"""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """partitions"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponseEndpointToPartitionsV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    user_endpoint: HeartbeatResponseEndpointV1
    """User-defined endpoint to connect to the node"""
    active_partitions: tuple[HeartbeatResponseTopicPartitionV1, ...]
    """The source topic partitions, including repartition source topics, of the active tasks assigned to this member"""
    standby_partitions: tuple[HeartbeatResponseTopicPartitionV1, ...]
    """The source topic partitions, including repartition source topics, of the standby and warm-up tasks assigned to this member"""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(88)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the request did not violate any quota."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code, or 0 if there was no error"""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The top-level error message, or null if there was no error."""
    member_id: str = field(metadata={"kafka_type": "string"})
    """The member id is always generated by the streams consumer."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The member epoch."""
    heartbeat_interval_ms: i32 = field(metadata={"kafka_type": "int32"})
    """The heartbeat interval in milliseconds."""
    task_offset_interval_ms: i32 = field(metadata={"kafka_type": "int32"})
    """The interval in which the task changelog offsets on a client are updated on the broker. The offsets are sent with the next heartbeat after this time has passed."""
    acceptable_recovery_lag: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The maximum acceptable lag (number of offsets to catch up) for a client to be considered caught-up enough to receive an active task assignment. A value of -1 indicates the broker does not support this configuration."""
    status: tuple[HeartbeatResponseStatusV1, ...] | None = field(default=None)
    """Indicate zero or more status for the group."""
    active_tasks: tuple[HeartbeatResponseTaskIdsV1, ...] | None = field(default=None)
    """Assigned active tasks for this client. Null if unchanged since last heartbeat."""
    standby_tasks: tuple[HeartbeatResponseTaskIdsV1, ...] | None = field(default=None)
    """Assigned standby tasks for this client. Null if unchanged since last heartbeat."""
    warmup_tasks: tuple[HeartbeatResponseTaskIdsV1, ...] | None = field(default=None)
    """Assigned warm-up tasks for this client. Null if unchanged since last heartbeat."""
    topology_description_required: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """True if the broker does not have an up-to-date topology description for this group. The client should send the topology description via StreamsGroupTopologyDescriptionUpdate."""
    endpoint_information_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The endpoint epoch set in the response"""
    partitions_by_user_endpoint: tuple[HeartbeatResponseEndpointToPartitionsV1, ...] | None = field(
        default=None
    )
    """Global assignment information used for IQ. There is one entry per member, so several entries carry the same UserEndpoint when a client runs more than one stream thread; clients must union the entries of an endpoint. Null if unchanged since last heartbeat."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeRequestV0:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_ids: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The ids of the groups to describe"""
    include_authorized_operations: bool = field(metadata={"kafka_type": "bool"})
    """Whether to include authorized operations."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_ids: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The ids of the groups to describe"""
    include_authorized_operations: bool = field(metadata={"kafka_type": "bool"})
    """Whether to include authorized operations."""
    include_topology_description: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether to include the full topology description from the topology description plugin in the response."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseKeyValueV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    key: str = field(metadata={"kafka_type": "string"})
    """key of the config"""
    value: str = field(metadata={"kafka_type": "string"})
    """value of the config"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopicInfoV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of the topic."""
    partitions: i32 = field(metadata={"kafka_type": "int32"})
    """The number of partitions in the topic. Can be 0 if no specific number of partitions is enforced. Always 0 for changelog topics."""
    replication_factor: i16 = field(metadata={"kafka_type": "int16"})
    """The replication factor of the topic. Can be 0 if the default replication factor should be used."""
    topic_configs: tuple[DescribeResponseKeyValueV0, ...]
    """Topic-level configurations as key-value pairs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseSubtopologyV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """String to uniquely identify the subtopology."""
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The topics the subtopology reads from."""
    repartition_sink_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The repartition topics the subtopology writes to."""
    state_changelog_topics: tuple[DescribeResponseTopicInfoV0, ...]
    """The set of state changelog topics associated with this subtopology. Created automatically."""
    repartition_source_topics: tuple[DescribeResponseTopicInfoV0, ...]
    """The set of source topics that are internally created repartition topics. Created automatically."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopologyV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the currently initialized topology for this group."""
    subtopologies: tuple[DescribeResponseSubtopologyV0, ...] | None = field(default=None)
    """The subtopologies of the streams application. This contains the configured subtopologies, where the number of partitions are set and any regular expressions are resolved to actual topics. Null if the group is uninitialized, source topics are missing or incorrectly partitioned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseEndpointV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    host: str = field(metadata={"kafka_type": "string"})
    """host of the endpoint"""
    port: u16 = field(metadata={"kafka_type": "uint16"})
    """port of the endpoint"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTaskOffsetV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partition: i32 = field(metadata={"kafka_type": "int32"})
    """The partition."""
    offset: i64 = field(metadata={"kafka_type": "int64"})
    """The offset."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTaskIdsV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions of the input topics processed by this member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseAssignmentV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    active_tasks: tuple[DescribeResponseTaskIdsV0, ...]
    """Active tasks for this client."""
    standby_tasks: tuple[DescribeResponseTaskIdsV0, ...]
    """Standby tasks for this client."""
    warmup_tasks: tuple[DescribeResponseTaskIdsV0, ...]
    """Warm-up tasks for this client. """


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseMemberV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    member_id: str = field(metadata={"kafka_type": "string"})
    """The member ID."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The member epoch."""
    instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The member instance ID for static membership."""
    rack_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The rack ID."""
    client_id: str = field(metadata={"kafka_type": "string"})
    """The client ID."""
    client_host: str = field(metadata={"kafka_type": "string"})
    """The client host."""
    topology_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the topology on the client."""
    process_id: str = field(metadata={"kafka_type": "string"})
    """Identity of the streams instance that may have multiple clients. """
    user_endpoint: DescribeResponseEndpointV0 | None = field(default=None)
    """User-defined endpoint for Interactive Queries. Null if not defined for this client."""
    client_tags: tuple[DescribeResponseKeyValueV0, ...]
    """Used for rack-aware assignment algorithm."""
    task_offsets: tuple[DescribeResponseTaskOffsetV0, ...]
    """Cumulative changelog offsets for tasks."""
    task_end_offsets: tuple[DescribeResponseTaskOffsetV0, ...]
    """Cumulative changelog end offsets for tasks."""
    assignment: DescribeResponseAssignmentV0
    """The current assignment."""
    target_assignment: DescribeResponseAssignmentV0
    """The target assignment."""
    is_classic: bool = field(metadata={"kafka_type": "bool"})
    """True for classic members that have not been upgraded yet."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseDescribedGroupV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The describe error, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The top-level error message, or null if there was no error."""
    group_id: str = field(metadata={"kafka_type": "string"})
    """The group ID string."""
    group_state: str = field(metadata={"kafka_type": "string"})
    """The group state string, or the empty string."""
    group_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The group epoch."""
    assignment_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The assignment epoch."""
    topology: DescribeResponseTopologyV0 | None = field(default=None)
    """The topology metadata currently initialized for the streams application. Can be null in case of a describe error."""
    members: tuple[DescribeResponseMemberV0, ...]
    """The members."""
    authorized_operations: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-2147483648))
    """32-bit bitfield to represent authorized operations for this group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the request did not violate any quota."""
    groups: tuple[DescribeResponseDescribedGroupV0, ...]
    """Each described group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseKeyValueV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    key: str = field(metadata={"kafka_type": "string"})
    """key of the config"""
    value: str = field(metadata={"kafka_type": "string"})
    """value of the config"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopicInfoV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of the topic."""
    partitions: i32 = field(metadata={"kafka_type": "int32"})
    """The number of partitions in the topic. Can be 0 if no specific number of partitions is enforced. Always 0 for changelog topics."""
    replication_factor: i16 = field(metadata={"kafka_type": "int16"})
    """The replication factor of the topic. Can be 0 if the default replication factor should be used."""
    topic_configs: tuple[DescribeResponseKeyValueV1, ...]
    """Topic-level configurations as key-value pairs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseSubtopologyV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """String to uniquely identify the subtopology."""
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The topics the subtopology reads from."""
    repartition_sink_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The repartition topics the subtopology writes to."""
    state_changelog_topics: tuple[DescribeResponseTopicInfoV1, ...]
    """The set of state changelog topics associated with this subtopology. Created automatically."""
    repartition_source_topics: tuple[DescribeResponseTopicInfoV1, ...]
    """The set of source topics that are internally created repartition topics. Created automatically."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopologyV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the currently initialized topology for this group."""
    subtopologies: tuple[DescribeResponseSubtopologyV1, ...] | None = field(default=None)
    """The subtopologies of the streams application. This contains the configured subtopologies, where the number of partitions are set and any regular expressions are resolved to actual topics. Null if the group is uninitialized, source topics are missing or incorrectly partitioned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseEndpointV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    host: str = field(metadata={"kafka_type": "string"})
    """host of the endpoint"""
    port: u16 = field(metadata={"kafka_type": "uint16"})
    """port of the endpoint"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTaskOffsetV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partition: i32 = field(metadata={"kafka_type": "int32"})
    """The partition."""
    offset: i64 = field(metadata={"kafka_type": "int64"})
    """The offset."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTaskIdsV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions of the input topics processed by this member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseAssignmentV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    active_tasks: tuple[DescribeResponseTaskIdsV1, ...]
    """Active tasks for this client."""
    standby_tasks: tuple[DescribeResponseTaskIdsV1, ...]
    """Standby tasks for this client."""
    warmup_tasks: tuple[DescribeResponseTaskIdsV1, ...]
    """Warm-up tasks for this client. """


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseMemberV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    member_id: str = field(metadata={"kafka_type": "string"})
    """The member ID."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The member epoch."""
    instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The member instance ID for static membership."""
    rack_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The rack ID."""
    client_id: str = field(metadata={"kafka_type": "string"})
    """The client ID."""
    client_host: str = field(metadata={"kafka_type": "string"})
    """The client host."""
    topology_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the topology on the client."""
    process_id: str = field(metadata={"kafka_type": "string"})
    """Identity of the streams instance that may have multiple clients. """
    user_endpoint: DescribeResponseEndpointV1 | None = field(default=None)
    """User-defined endpoint for Interactive Queries. Null if not defined for this client."""
    client_tags: tuple[DescribeResponseKeyValueV1, ...]
    """Used for rack-aware assignment algorithm."""
    task_offsets: tuple[DescribeResponseTaskOffsetV1, ...]
    """Cumulative changelog offsets for tasks."""
    task_end_offsets: tuple[DescribeResponseTaskOffsetV1, ...]
    """Cumulative changelog end offsets for tasks."""
    assignment: DescribeResponseAssignmentV1
    """The current assignment."""
    target_assignment: DescribeResponseAssignmentV1
    """The target assignment."""
    is_classic: bool = field(metadata={"kafka_type": "bool"})
    """True for classic members that have not been upgraded yet."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopologyDescriptionNodeV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of this node (e.g., KSTREAM-SOURCE-0000000000)."""
    node_type: i8 = field(metadata={"kafka_type": "int8"})
    """The type of this node: 1=SOURCE, 2=PROCESSOR, 3=SINK."""
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The source topics this node reads from. Defined only for source nodes, may be empty if source topics are dynamically determined."""
    sink_topic: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The topic this node writes to. Defined only for sink nodes, may be null if sink topic is dynamically determined."""
    stores: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The state store names accessed by this node. Defined only for processor nodes."""
    successors: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The names of successor nodes in the processing graph. Predecessor relationships are reconstructed from this field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopologyDescriptionSubtopologyV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier, unique within the topology."""
    nodes: tuple[DescribeResponseTopologyDescriptionNodeV1, ...]
    """The processing nodes in this subtopology."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopologyDescriptionGlobalStoreV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    source: DescribeResponseTopologyDescriptionNodeV1
    """The source node providing data to the global store."""
    processor: DescribeResponseTopologyDescriptionNodeV1
    """The processor node that populates the global store."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseTopologyDescriptionV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    subtopologies: tuple[DescribeResponseTopologyDescriptionSubtopologyV1, ...]
    """The subtopologies that make up this topology."""
    global_stores: tuple[DescribeResponseTopologyDescriptionGlobalStoreV1, ...]
    """Global state stores used by this topology."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeResponseDescribedGroupV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The describe error, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The top-level error message, or null if there was no error."""
    group_id: str = field(metadata={"kafka_type": "string"})
    """The group ID string."""
    group_state: str = field(metadata={"kafka_type": "string"})
    """The group state string, or the empty string."""
    group_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The group epoch."""
    assignment_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The assignment epoch."""
    topology: DescribeResponseTopologyV1 | None = field(default=None)
    """The topology metadata currently initialized for the streams application. Can be null in case of a describe error."""
    members: tuple[DescribeResponseMemberV1, ...]
    """The members."""
    authorized_operations: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-2147483648))
    """32-bit bitfield to represent authorized operations for this group."""
    topology_description: DescribeResponseTopologyDescriptionV1 | None = field(default=None)
    """The full topology description for this group. Non-null if and only if TopologyDescriptionStatus is AVAILABLE (3); null otherwise."""
    topology_description_status: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    """The status of the topology description for this group, paired with TopologyDescription: 0=NOT_REQUESTED (client did not set IncludeTopologyDescription; TopologyDescription is null); 1=NOT_STORED (no description recorded for this group; TopologyDescription is null); 2=ERROR (broker failed to fetch the description, see broker logs; TopologyDescription is null); 3=AVAILABLE (TopologyDescription is non-null and carries the description)."""
    assignor_name: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The task assignor that the group coordinator will use for the next assignment computation. This may differ from the assignor that computed the current assignment, because changing the assignor configuration does not trigger a rebalance. Null in case of a describe error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the request did not violate any quota."""
    groups: tuple[DescribeResponseDescribedGroupV1, ...]
    """Each described group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyUpdateRequestNodeV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of this node (e.g., KSTREAM-SOURCE-0000000000)."""
    node_type: i8 = field(metadata={"kafka_type": "int8"})
    """The type of this node: 1=SOURCE, 2=PROCESSOR, 3=SINK."""
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The source topics this node reads from. Defined only for source nodes, may be empty if source topics are dynamically determined."""
    sink_topic: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The topic this node writes to. Defined only for sink nodes, may be null if sink topic is dynamically determined."""
    stores: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The state store names accessed by this node. Defined only for processor nodes."""
    successors: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    """The names of successor nodes in the processing graph. Predecessor relationships are reconstructed from this field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyUpdateRequestSubtopologyV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    """The subtopology identifier, unique within the topology."""
    nodes: tuple[TopologyUpdateRequestNodeV0, ...]
    """The processing nodes in this subtopology."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyUpdateRequestGlobalStoreV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    source: TopologyUpdateRequestNodeV0
    """The source node providing data to the global store."""
    processor: TopologyUpdateRequestNodeV0
    """The processor node that populates the global store."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyUpdateRequestTopologyDescriptionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    subtopologies: tuple[TopologyUpdateRequestSubtopologyV0, ...]
    """The subtopologies that make up this topology."""
    global_stores: tuple[TopologyUpdateRequestGlobalStoreV0, ...]
    """Global state stores used by this topology."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupTopologyDescriptionUpdateRequestV0:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata={"kafka_type": "string"})
    """The streams group identifier."""
    member_id: str = field(metadata={"kafka_type": "string"})
    """The ID of the streams group member sending the push. The broker validates that this member is still in the group; mismatches (including when the group itself has been deleted) are rejected with UNKNOWN_MEMBER_ID so the client treats itself as fenced and rejoins."""
    topology_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The epoch of the topology being described."""
    topology_description: TopologyUpdateRequestTopologyDescriptionV0
    """The topology description."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupTopologyDescriptionUpdateResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the request did not violate any quota."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The top-level error message, or null if there was no error."""


REQUESTS: dict[tuple[int, int], type] = {
    (88, 0): StreamsGroupHeartbeatRequestV0,
    (88, 1): StreamsGroupHeartbeatRequestV1,
    (89, 0): StreamsGroupDescribeRequestV0,
    (89, 1): StreamsGroupDescribeRequestV1,
    (93, 0): StreamsGroupTopologyDescriptionUpdateRequestV0,
}
RESPONSES: dict[tuple[int, int], type] = {
    (88, 0): StreamsGroupHeartbeatResponseV0,
    (88, 1): StreamsGroupHeartbeatResponseV1,
    (89, 0): StreamsGroupDescribeResponseV0,
    (89, 1): StreamsGroupDescribeResponseV1,
    (93, 0): StreamsGroupTopologyDescriptionUpdateResponseV0,
}
