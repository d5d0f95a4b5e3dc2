"""UpdateMetadata v8 with each partition's eligible leader replicas (KIP-966), as tagged fields.

UpdateMetadata is what minibroker's controller sends its brokers (Kafka's ZooKeeper-mode
controller did the same; a KRaft broker reads the metadata log instead, whose
PartitionRecord/PartitionChangeRecord carry ``EligibleLeaderReplicas`` and ``LastKnownElr``
as tagged fields since metadata version 3.7-IV1). Kafka's UpdateMetadata never had them, so
this layout adds them the way Kafka adds fields to a flexible version without a new one:
tagged fields of the partition state, tag 0 ``EligibleLeaderReplicas`` and tag 1
``LastKnownElr`` (``[]int32``, default empty), the names and order of the metadata records.
A reader that does not know the tags (kio's own v8) skips them, so the layout stays
UpdateMetadata v8 on the wire; a partition with empty lists writes neither.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.types import BrokerId
from kio.schema.update_metadata.v8.request import (
    UpdateMetadataPartitionState as _PartitionStateV8,
)
from kio.schema.update_metadata.v8.request import UpdateMetadataRequest as _RequestV8
from kio.schema.update_metadata.v8.request import UpdateMetadataTopicState as _TopicStateV8
from kio.static.primitive import i16


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataPartitionStateV8(_PartitionStateV8):
    __version__: ClassVar[i16] = i16(8)
    eligible_leader_replicas: tuple[BrokerId, ...] = field(
        metadata={"kafka_type": "int32", "tag": 0}, default=()
    )
    """The eligible leader replicas of this partition (KIP-966)."""
    last_known_elr: tuple[BrokerId, ...] = field(
        metadata={"kafka_type": "int32", "tag": 1}, default=()
    )
    """The last known eligible leader replicas of this partition (KIP-966)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataTopicStateV8(_TopicStateV8):
    __version__: ClassVar[i16] = i16(8)
    partition_states: tuple[UpdateMetadataPartitionStateV8, ...]
    """The partition that we would like to update."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataRequestV8(_RequestV8):
    """UpdateMetadata v8 whose partition states carry the ELR lists (tags 0 and 1)."""

    __version__: ClassVar[i16] = i16(8)
    topic_states: tuple[UpdateMetadataTopicStateV8, ...]
    """Each topic that we would like to update."""


REQUESTS: dict[tuple[int, int], type] = {(6, 8): UpdateMetadataRequestV8}
