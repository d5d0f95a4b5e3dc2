"""The cluster's features (KIP-584): what minibroker supports and what a cluster finalizes.

A feature is a name and a level. Every node supports a range of levels of each feature it
knows (ApiVersions' supported_features); the controller finalizes one level of each for the
whole cluster (finalized_features, with an epoch that grows on every change, which clients
compare to take only a newer answer), changed by UpdateFeatures (``kafka-features.sh``).

The features minibroker implements, with the ranges Kafka 4.4 supports where minibroker
implements all of them:

- ``metadata.version`` 7 (3.3-IV3) to 33 (4.4-IV2), finalized at 33 in a new cluster as a new
  Kafka 4.4 cluster is. minibroker's controller has no metadata log, so the level changes
  nothing here; it is what Kafka's admin tools read.
- ``kraft.version`` 0 only: one static controller, no dynamic quorum (KIP-853's level 1).
- ``transaction.version`` 0 to 2 (KIP-890 part 2 at 2), finalized at the controller's
  ``transaction.version`` setting (default 2) when the cluster is new.
- ``group.version`` 0 to 1 (1: the consumer group protocol, KIP-848), finalized at 1; at 0
  ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION (apis/consumer_groups.py), as Kafka's.
- ``streams.version`` 0 to 1 (1: Kafka Streams' rebalance protocol, KIP-1071), finalized at 1
  in a new cluster as Kafka 4.4 does; at 0 StreamsGroupHeartbeat answers UNSUPPORTED_VERSION
  (apis/streams_groups.py), as Kafka's.

- ``share.version`` 0 to 2 (1: share groups, KIP-932; 2: their dead-letter queues,
  KIP-1191), finalized at 2 in a new cluster as a new Kafka 4.4 cluster is (ShareVersion.SV_2,
  bootstrapped at 4.4-IV0). At 0 ShareGroupHeartbeat and ShareGroupDescribe answer
  UNSUPPORTED_VERSION (apis/share_groups.py), as Kafka's isShareGroupProtocolEnabled does; at
  1 share groups run without dead-letter queues (replication/share_dlq.py writes none, as
  Kafka's SharePartition asks its shareGroupDlqEnableSupplier).

- ``eligible.leader.replicas.version`` 0 to 1 (1: eligible leader replicas, KIP-966),
  finalized at 1 in a new cluster as a new Kafka 4.1+ cluster is (EligibleLeaderReplicasVersion
  .ELRV_1, bootstrapped since 4.1-IV0). At 1 the controller keeps each partition's ELR and
  last-known ELR and elects from the ELR when the ISR is empty (controller/state.py); at 0 it
  keeps none and elects from the ISR only, as before KIP-966. A cluster saved before this
  feature existed keeps it at 0 until ``kafka-features upgrade`` sets it, as an upgraded
  Kafka cluster does.
"""

from dataclasses import dataclass, field

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"

# Kafka 4.4's MetadataVersion levels at the ends of the supported range.
MINIMUM_METADATA_VERSION = 7  # 3.3-IV3, the oldest Kafka 4 can run or bootstrap at
LATEST_METADATA_VERSION = 33  # 4.4-IV2, what a new Kafka 4.4 cluster is formatted at

# Name -> (lowest, highest) level this node supports.
SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
    KRAFT_VERSION: (0, 0),
    TRANSACTION_VERSION: (0, 2),
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 2),
    STREAMS_VERSION: (0, 1),
    ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1),
}


@dataclass(frozen=True)
class FinalizedFeatures:
    """The cluster's finalized levels (a feature at level 0 is absent) and their epoch."""

    levels: dict[str, int] = field(default_factory=dict)
    epoch: int = 0


def initial_levels(transaction_version: int) -> dict[str, int]:
    """The levels a new cluster finalizes, as a new Kafka 4.4 cluster does (formatted at its
    latest metadata.version, which brings group.version 1, share.version 2,
    eligible.leader.replicas.version 1 and transaction.version 2), with
    ``transaction.version`` as the controller's setting says."""
    levels = {
        METADATA_VERSION: LATEST_METADATA_VERSION,
        GROUP_VERSION: 1,
        SHARE_VERSION: 2,
        STREAMS_VERSION: 1,
        ELIGIBLE_LEADER_REPLICAS_VERSION: 1,
    }
    if transaction_version:
        levels[TRANSACTION_VERSION] = transaction_version
    return levels
