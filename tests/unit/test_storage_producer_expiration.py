"""Producer id expiration (Kafka's ProducerStateManager.removeExpiredProducers and
isProducerExpired, UnifiedLog's periodic check): a producer with no open transaction whose
last write is producer.id.expiration.ms old or older is forgotten. Time is passed in."""

import uuid

import pytest

from minibroker.common import config_model
from minibroker.common.config import BrokerConfig
from minibroker.common.config_model import BrokerLayers, ConfigChangeError, DynamicBrokerConfigs
from minibroker.protocol.control_batch import encode_control_batch
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import read_header
from minibroker.storage.log import LOG_APPEND_TIME, LogConfig, PartitionLog
from minibroker.storage.log_manager import LogManager
from minibroker.storage.producer_state import ProducerStateManager
from tests.unit.batch_factory import make_batch

TRANSACTIONAL = 0x10
EXPIRATION_MS = 1_000
T0 = 1_700_000_000_000  # the batches' timestamp (max timestamp = last write)
CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


def batch(producer_id, sequence, *, timestamp=T0, transactional=False, epoch=0):
    return make_batch(
        2,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        base_timestamp=timestamp,
        attributes=TRANSACTIONAL if transactional else 0,
    )


def state_of(*batches) -> ProducerStateManager:
    producers = ProducerStateManager()
    offset = 0
    for data in batches:
        header = read_header(data)._replace(base_offset=offset)
        producers.record(header)
        offset = header.last_offset + 1
    return producers


def ids(producers: ProducerStateManager) -> set[int]:
    return {snapshot.producer_id for snapshot in producers.active_producers()}


# -- the rule --------------------------------------------------------------------------------


def test_a_producer_expires_exactly_when_its_last_write_is_expiration_ms_old():
    producers = state_of(batch(1, 0), batch(2, 0, timestamp=T0 + 500))
    assert producers.remove_expired(T0 + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    assert ids(producers) == {1, 2}
    # Kafka's test is >=: at exactly expiration_ms the producer is expired.
    assert producers.remove_expired(T0 + EXPIRATION_MS, EXPIRATION_MS) == [1]
    assert ids(producers) == {2}
    assert producers.remove_expired(T0 + 500 + EXPIRATION_MS, EXPIRATION_MS) == [2]
    assert len(producers) == 0


def test_the_last_batch_counts_not_the_first():
    producers = state_of(batch(1, 0), batch(1, 2, timestamp=T0 + 900))
    assert producers.remove_expired(T0 + EXPIRATION_MS, EXPIRATION_MS) == []
    assert ids(producers) == {1}


def test_an_open_transaction_keeps_its_producer():
    producers = state_of(batch(1, 0, transactional=True), batch(2, 0))
    later = T0 + 10 * EXPIRATION_MS
    assert producers.remove_expired(later, EXPIRATION_MS) == [2]
    assert ids(producers) == {1}
    assert producers.ongoing_transaction(1) == 0
    # Once the marker closes it, the marker's timestamp is the last write.
    marker = read_header(
        encode_control_batch(
            producer_id=1, producer_epoch=0, coordinator_epoch=0, commit=True, timestamp_ms=later
        )
    )
    producers.record(marker._replace(base_offset=4), (True, 0))
    assert producers.remove_expired(later + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    assert producers.remove_expired(later + EXPIRATION_MS, EXPIRATION_MS) == [1]
    assert len(producers) == 0


def test_a_snapshot_taken_after_expiry_does_not_bring_the_producer_back():
    producers = state_of(batch(1, 0), batch(2, 0, timestamp=T0 + 5_000))
    producers.remove_expired(T0 + EXPIRATION_MS, EXPIRATION_MS)
    reloaded = ProducerStateManager()
    reloaded.load_snapshot(producers.snapshot_bytes())
    assert ids(reloaded) == {2}


# -- in the log and the log manager ----------------------------------------------------------


def open_log(directory) -> PartitionLog:
    return PartitionLog.open(
        directory, LogConfig(segment_bytes=400), now_ms=0, needs_recovery=False
    )


def test_an_expired_idempotent_producer_is_accepted_at_any_sequence(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1, 0), leader_epoch=0, now_ms=T0)
    log.producer_state.remove_expired(T0 + EXPIRATION_MS, EXPIRATION_MS)
    # Sequence 40 would be out of order for a known producer; an unknown one starts anew.
    appended = log.append_as_leader(batch(1, 40), leader_epoch=0, now_ms=T0 + EXPIRATION_MS)
    assert not appended.duplicate
    (snapshot,) = log.producer_state.active_producers()
    assert (snapshot.producer_id, snapshot.last_sequence) == (1, 41)


def test_on_a_log_append_time_topic_the_brokers_time_is_the_last_write(tmp_path):
    log = PartitionLog.open(
        tmp_path / "t-0",
        LogConfig(message_timestamp_type=LOG_APPEND_TIME),
        now_ms=0,
        needs_recovery=False,
    )
    appended_at = T0 + 60_000  # the client's CreateTime T0 is replaced by the broker's
    log.append_as_leader(batch(1, 0), leader_epoch=0, now_ms=appended_at)
    assert log.producer_state.remove_expired(T0 + EXPIRATION_MS, EXPIRATION_MS) == []
    assert log.producer_state.remove_expired(appended_at + EXPIRATION_MS, EXPIRATION_MS) == [1]


def test_reopening_after_expiry_does_not_bring_the_producer_back(tmp_path):
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_as_leader(batch(1, 0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(batch(2, 0, timestamp=T0 + 5_000), leader_epoch=0, now_ms=T0)
    log.producer_state.remove_expired(T0 + EXPIRATION_MS, EXPIRATION_MS)
    log.close()  # writes the snapshot at the log end, without producer 1
    reopened = open_log(directory)
    assert ids(reopened.producer_state) == {2}
    reopened.close()


def manager(log_dir, expiration_ms=EXPIRATION_MS) -> LogManager:
    return LogManager(
        [log_dir],
        LogConfig(segment_bytes=400),
        node_id=1,
        cluster_id=CLUSTER,
        producer_id_expiration_ms=expiration_ms,
    )


def test_the_log_manager_expires_producers_of_every_log_and_on_load(tmp_path):
    log_dir = tmp_path / "kafka-logs"
    logs = manager(log_dir)
    logs.open(now_ms=T0)
    topic_id = uuid.uuid4()
    first = logs.ensure_log("payments", topic_id, 0, {}, now_ms=T0)
    second = logs.ensure_log("payments", topic_id, 1, {}, now_ms=T0)
    first.append_as_leader(batch(1, 0), leader_epoch=0, now_ms=T0)
    second.append_as_leader(batch(2, 0), leader_epoch=0, now_ms=T0)
    second.append_as_leader(batch(3, 0, timestamp=T0 + 5_000), leader_epoch=0, now_ms=T0)
    assert logs.remove_expired_producers(T0 + EXPIRATION_MS - 1) == 0
    # A snapshot holding every producer, as a roll before the expiry would have left.
    for partition_log in (first, second):
        partition_log.take_snapshot()
    assert logs.remove_expired_producers(T0 + EXPIRATION_MS) == 2
    assert ids(first.producer_state) == set()
    assert ids(second.producer_state) == {3}
    # A crash: no snapshot at close, so the reopened logs load the older snapshots, and
    # producers already expired in them are dropped as the logs are loaded.
    logs._release_locks()
    reopened = manager(log_dir)
    reopened.open(now_ms=T0 + EXPIRATION_MS)
    assert ids(reopened.get_log("payments", 0).producer_state) == set()
    assert ids(reopened.get_log("payments", 1).producer_state) == {3}
    reopened.close()


def test_without_an_expiration_the_log_manager_expires_nothing(tmp_path):
    logs = manager(tmp_path / "kafka-logs", expiration_ms=None)
    logs.open(now_ms=T0)
    log = logs.ensure_log("payments", uuid.uuid4(), 0, {}, now_ms=T0)
    log.append_as_leader(batch(1, 0), leader_epoch=0, now_ms=T0)
    assert logs.remove_expired_producers(T0 + 10**12) == 0
    assert ids(log.producer_state) == {1}
    logs.close()


# -- the broker configs ----------------------------------------------------------------------


def test_the_broker_configs_and_their_kafka_defaults():
    assert BrokerConfig().producer_id_expiration_ms == 86_400_000
    assert BrokerConfig().producer_id_expiration_check_interval_ms == 600_000
    config = BrokerConfig.from_properties(
        {
            "producer.id.expiration.ms": "2000",
            "producer.id.expiration.check.interval.ms": "100",
        }
    )
    assert (config.producer_id_expiration_ms, config.producer_id_expiration_check_interval_ms) == (
        2000,
        100,
    )
    with pytest.raises(ValueError):
        BrokerConfig.from_properties({"producer.id.expiration.ms": "0"})


def test_producer_id_expiration_ms_is_a_dynamic_broker_config():
    config_model.validate_broker_overrides({"producer.id.expiration.ms": "5000"})
    for bad, message in (
        (
            "0",
            "Invalid value 0 for configuration producer.id.expiration.ms: Value must be at least 1",
        ),
        (
            "soon",
            "Invalid value soon for configuration producer.id.expiration.ms: "
            "Not a number of type INT",
        ),
    ):
        with pytest.raises(ConfigChangeError) as refused:
            config_model.validate_broker_overrides({"producer.id.expiration.ms": bad})
        assert refused.value.error == Error.INVALID_REQUEST
        assert refused.value.message == message
    # The check interval is static, as in Kafka.
    with pytest.raises(ConfigChangeError):
        config_model.validate_broker_overrides({"producer.id.expiration.check.interval.ms": "5"})
    (entry,) = config_model.describe_broker(
        BrokerLayers({}, {}, {}), include_synonyms=False, keys=["producer.id.expiration.ms"]
    )
    assert (entry["value"], entry["read_only"]) == ("86400000", False)
    dynamic = DynamicBrokerConfigs(2, LogConfig())
    assert dynamic.broker_value("producer.id.expiration.ms", 9) == 9
    dynamic.replace("", {"producer.id.expiration.ms": "50"})
    assert dynamic.broker_value("producer.id.expiration.ms", 9) == 50
    dynamic.replace("2", {"producer.id.expiration.ms": "70"})
    assert dynamic.broker_value("producer.id.expiration.ms", 9) == 70
    # It sets no topic config.
    assert dynamic.topic_defaults() == LogConfig()
