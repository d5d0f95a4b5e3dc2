"""Versions of messages kio 0.6.1 has older versions of, whose layout changed: built from Kafka
4.4's message JSONs (protocol/messages/) by protocol.message_json, in kio's generated shape,
with kio's names for time fields, and registered in protocol.schemas.

- UpdateFeatures v2 (KIP-1022): the request is v1's; the response drops the per-feature Results
  ("Version 2 changes the response to not return feature level results").
- ListConfigResources v1 (KIP-1142): v0 is kio's ListClientMetricsResources; v1's request adds
  ResourceTypes ([]int8) and each listed resource its ResourceType (int8, default 16).
- WriteShareGroupState v1 (KIP-1226): the partition adds DeliveryCompleteCount (int32, default
  -1) after StartOffset; the response is v0's.
- ReadShareGroupStateSummary v0-v1: its response's partitions have LeaderEpoch after
  StateEpoch in v0 already, which kio 0.6.1's v0 lacks, and DeliveryCompleteCount from v1 (the
  request v1 is v0's, and v0 is kio's).
- WriteTxnMarkers v2 (KIP-1228): each marker adds TransactionVersion (int8, default 0, ignorable)
  after CoordinatorEpoch; the response is v1's.
- BrokerHeartbeat v2 (KIP-1066): the request adds CordonedLogDirs (nullable []uuid, tag 1,
  default null) after v1's OfflineLogDirs; the response is v0's.

Each message's class is its JSON name plus ``V<version>`` (``UpdateFeaturesRequestV2``); a
nested struct's is the message's name, the struct's and the version.
"""

from minibroker.protocol.message_json import KIO_TIMEDELTA_NAMES, build_module

TIMEDELTA_NAMES = KIO_TIMEDELTA_NAMES
REQUESTS: dict[tuple[int, int], type] = {}
RESPONSES: dict[tuple[int, int], type] = {}
_classes: dict[str, type] = {}

for _files, _versions in (
    (["UpdateFeaturesRequest.json", "UpdateFeaturesResponse.json"], [2]),
    (["ListConfigResourcesRequest.json", "ListConfigResourcesResponse.json"], [1]),
    (["WriteShareGroupStateRequest.json", "WriteShareGroupStateResponse.json"], [1]),
    (["ReadShareGroupStateSummaryRequest.json"], [1]),
    (["ReadShareGroupStateSummaryResponse.json"], [0, 1]),
    (["WriteTxnMarkersRequest.json", "WriteTxnMarkersResponse.json"], [2]),
    (["BrokerHeartbeatRequest.json", "BrokerHeartbeatResponse.json"], [2]),
):
    _requests, _responses, _built = build_module(
        _files,
        lambda message, struct, version: f"{message}{struct}V{version}",
        __name__,
        timedelta_names=TIMEDELTA_NAMES,
        versions=_versions,
    )
    REQUESTS.update(_requests)
    RESPONSES.update(_responses)
    _classes.update(_built)

globals().update(_classes)
__all__ = sorted(_classes)
