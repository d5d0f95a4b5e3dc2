"""`__transaction_state` records byte for byte as Kafka's TransactionLog writes and reads them
(TransactionLogKey v0, TransactionLogValue v0 and v1)."""

import pytest

from minibroker.coordinator.transaction import log_format as fmt
from minibroker.coordinator.transaction.log_format import TxnLogValue, TxnRecordFormatError
from minibroker.coordinator.transaction.state import Transit, TxnMetadata, TxnState

ONGOING = TxnLogValue(
    producer_id=5,
    producer_epoch=1,
    timeout_ms=60_000,
    state=1,
    partitions=(("t", (0, 1)),),
    last_update_ms=1000,
    start_ms=900,
)

# Kafka 4 with transaction.version 1: value v1, flexible, no tagged fields set.
ONGOING_V1 = bytes.fromhex(
    "0001"  # version
    "0000000000000005"  # producer id
    "0001"  # epoch
    "0000ea60"  # timeout
    "01"  # Ongoing
    "02"  # compact array of 1
    "0274"  # compact string "t"
    "03"  # compact array of 2 partition ids
    "0000000000000001"
    "00"  # the entry's tagged fields
    "00000000000003e8"  # last update
    "0000000000000384"  # start
    "00"  # tagged fields
)

ONGOING_V0 = bytes.fromhex(
    "0000"
    "0000000000000005"
    "0001"
    "0000ea60"
    "01"
    "00000001"  # array of 1
    "000174"  # string "t"
    "00000002"
    "0000000000000001"
    "00000000000003e8"
    "0000000000000384"
)


def test_key_is_version_0_and_the_id():
    assert fmt.key("tx") == bytes.fromhex("000000027478")
    assert fmt.read_key(bytes.fromhex("000000027478")) == "tx"


def test_key_of_another_version_is_refused():
    with pytest.raises(TxnRecordFormatError):
        fmt.read_key(bytes.fromhex("000100027478"))


def test_value_v1_bytes_as_kafka_4_writes_them():
    assert fmt.value(ONGOING) == ONGOING_V1
    assert fmt.read_value(ONGOING_V1) == ONGOING


def test_value_v0_bytes_as_kafka_3_writes_them():
    assert fmt.value(ONGOING, version=0) == ONGOING_V0
    assert fmt.read_value(ONGOING_V0) == ONGOING


def test_empty_has_null_partitions_in_both_versions():
    empty = TxnLogValue(7, 0, 1000, 0, (), 5, -1)
    v1 = fmt.value(empty)
    assert v1 == bytes.fromhex(
        "000100000000000000070000000003e800000000000000000005ffffffffffffffff00"
    )
    v0 = fmt.value(empty, version=0)
    assert v0[2 + 8 + 2 + 4 + 1 :][:4] == bytes.fromhex("ffffffff")
    assert fmt.read_value(v1) == empty
    assert fmt.read_value(v0) == empty


def test_tagged_fields_of_v1_are_read_and_written_in_tag_order():
    value = TxnLogValue(
        5,
        3,
        100,
        4,
        (),
        1,
        2,
        previous_producer_id=4,
        next_producer_id=9,
        client_transaction_version=2,
    )
    data = fmt.value(value)
    assert data.endswith(bytes.fromhex("03000800000000000000040108000000000000000902020002"))
    assert fmt.read_value(data) == value


def test_unknown_tags_are_skipped():
    data = ONGOING_V1[:-1] + bytes.fromhex("010503aabbcc")
    assert fmt.read_value(data) == ONGOING


def test_several_topics_round_trip():
    value = TxnLogValue(1, 2, 3, 2, (("a", (3, 1)), ("é", (0,))), 4, 5)
    assert fmt.read_value(fmt.value(value)) == value
    assert fmt.read_value(fmt.value(value, version=0)) == value


@pytest.mark.parametrize("data", [b"", b"\x00", ONGOING_V1[:-3], ONGOING_V0[:20]])
def test_truncated_values_are_refused(data):
    with pytest.raises(TxnRecordFormatError):
        fmt.read_value(data)


def test_unknown_value_version_is_refused():
    with pytest.raises(TxnRecordFormatError):
        fmt.read_value(b"\x00\x02" + ONGOING_V1[2:])


def test_a_transit_is_written_grouped_by_topic_sorted():
    transit = Transit(
        producer_id=5,
        previous_producer_id=5,
        producer_epoch=1,
        last_producer_epoch=-1,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=frozenset({("t", 1), ("t", 0)}),
        start_ms=900,
        last_update_ms=1000,
    )
    assert fmt.value(transit.log_value()) == ONGOING_V1


def test_metadata_from_the_log():
    meta = TxnMetadata.from_log("tx", fmt.read_value(ONGOING_V1))
    assert meta.state == TxnState.ONGOING
    assert meta.partitions == {("t", 0), ("t", 1)}
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_epoch) == (5, 1, -1)
    assert (meta.start_ms, meta.last_update_ms, meta.timeout_ms) == (900, 1000, 60_000)
