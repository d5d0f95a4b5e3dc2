"""ShareFetch (78) and ShareAcknowledge (79) v1-v2 (KIP-932 as Kafka 4.4 has them), which kio
0.6.1 has only at v0 (Kafka 3.9's early access): requests and responses, built from Kafka 4.4's
ShareFetchRequest.json, ShareFetchResponse.json, ShareAcknowledgeRequest.json and
ShareAcknowledgeResponse.json (protocol/messages/) by protocol.message_json, in kio's generated
shape, with kio's names for time fields (``max_wait``; ``acquisition_lock_timeout`` too, a
timedelta), and registered in protocol.schemas.

v1: the request's partitions lose PartitionMaxBytes and the request gains MaxRecords and
BatchSize; the ShareFetch response gains AcquisitionLockTimeoutMs, and its partitions' Records
are no longer nullable. v2 (KIP-1206, KIP-1222): ShareFetch adds ShareAcquireMode and
IsRenewAck, ShareAcknowledge adds IsRenewAck and its response AcquisitionLockTimeoutMs.
librdkafka 2.16 sends v1; Kafka 4.4's KafkaShareConsumer v2.

Names: the messages' ``ShareFetchRequestV1`` ...; the ShareFetch request's structs
``FetchTopicV1``, ``FetchPartitionV1``, ``AcknowledgementBatchV1``, ``ForgottenTopicV1``; the
other messages' structs prefixed ``FetchResponse``, ``AckRequest`` and ``AckResponse``.
"""

from minibroker.protocol.message_json import KIO_TIMEDELTA_NAMES, build_module

TIMEDELTA_NAMES = KIO_TIMEDELTA_NAMES | {"AcquisitionLockTimeoutMs"}
_PREFIX = {
    "ShareFetchRequest": "",
    "ShareFetchResponse": "FetchResponse",
    "ShareAcknowledgeRequest": "AckRequest",
    "ShareAcknowledgeResponse": "AckResponse",
}

REQUESTS, RESPONSES, _classes = build_module(
    [f"{message}.json" for message in _PREFIX],
    lambda message, struct, version: f"{_PREFIX[message]}{struct}V{version}",
    __name__,
    timedelta_names=TIMEDELTA_NAMES,
    versions=[1, 2],
    # The error responses (apis/share_fetch.py's _share_fetch_error) leave it out: 0, as Kafka.
    zero_defaults=frozenset({"AcquisitionLockTimeoutMs"}),
)
globals().update(_classes)
__all__ = sorted(_classes)
