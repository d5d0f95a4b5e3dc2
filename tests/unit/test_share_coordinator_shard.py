"""The share coordinator's pure shard (coordinator/share/state.py): Kafka's
ShareCoordinatorShard rules for initialize, read, write, delete and the summary, the epoch
fencing, the snapshot cadence, and replay giving back the live state."""

import uuid

from minibroker.coordinator.share import log_format
from minibroker.coordinator.share.state import ShareCoordinatorShard, SharePartitionKey, Summary
from minibroker.protocol.errors import Error
from minibroker.replication.share_partition import RecordState, StateBatch

KEY = SharePartitionKey("g", uuid.UUID(int=7), 3)
AV, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def apply(shard: ShareCoordinatorShard, decision):
    """What the service does once the records are committed."""
    assert decision.error == Error.NONE, decision.error
    shard.replay_all(decision.records)
    return decision


def initialized(per_snapshot: int = 500, state_epoch: int = 1, start: int = 0):
    shard = ShareCoordinatorShard(per_snapshot)
    apply(shard, shard.initialize(KEY, state_epoch, start, now_ms=1))
    return shard


def write(shard, *, state_epoch=1, leader_epoch=0, start=-1, batches=(), dcc=-1):
    return shard.write(
        KEY,
        state_epoch=state_epoch,
        leader_epoch=leader_epoch,
        start_offset=start,
        batches=tuple(batches),
        delivery_complete_count=dcc,
        now_ms=2,
    )


def kinds(decision):
    return [log_format.read_key(k).kind for k, _ in decision.records]


def test_unknown_key_is_unknown_topic_or_partition_for_read_write_summary():
    shard = ShareCoordinatorShard()
    assert shard.read(KEY, 0).error == Error.UNKNOWN_TOPIC_OR_PARTITION
    # Kafka's readStateSummary: an unknown key is an uninitialized share partition, not an
    # error (start offset -1, leader epoch -1, state epoch 0).
    summary = shard.read_summary(KEY, 0)
    assert (summary.error, summary.summary) == (Error.NONE, Summary(0, -1, -1, -1))
    assert write(shard).error == Error.UNKNOWN_TOPIC_OR_PARTITION
    delete = shard.delete(KEY)
    assert (delete.error, delete.records) == (Error.NONE, ())


def test_initialize_writes_a_snapshot_and_read_answers_it():
    shard = initialized(start=42, state_epoch=5)
    read = shard.read(KEY, 0)
    assert read.error == Error.NONE
    assert (read.state.start_offset, read.state.state_epoch, read.state.batches) == (42, 5, ())
    # A newer leader epoch is recorded with a ShareUpdate of no batches.
    assert kinds(read) == [log_format.UPDATE]
    apply(shard, read)
    assert shard.states[KEY].leader_epoch == 0
    # The same leader epoch again writes nothing.
    assert shard.read(KEY, 0).records == ()


def test_initialize_of_an_uninitialized_start_keeps_a_state_already_there():
    """The group coordinator's initialization (start offset -1) retried, at the group's
    higher epoch, keeps what the leader persisted (issue 35: it replaced it, and acknowledged
    acceptances were delivered again); a delete then an initialization creates it anew, and
    a named start offset (an admin's reset) still replaces it."""
    shard = ShareCoordinatorShard()
    apply(shard, shard.initialize(KEY, 1, -1, now_ms=1))
    apply(shard, write(shard, leader_epoch=4, start=10, batches=[StateBatch(10, 12, ACK, 1)]))
    before = shard.states[KEY]
    again = shard.initialize(KEY, 3, -1, now_ms=5)
    assert (again.error, again.records) == (Error.NONE, ())
    assert shard.states[KEY] == before
    # A stale epoch is still fenced first, as Kafka checks it.
    assert shard.initialize(KEY, 0, -1, now_ms=5).error == Error.FENCED_STATE_EPOCH
    apply(shard, shard.delete(KEY))
    apply(shard, shard.initialize(KEY, 3, -1, now_ms=6))
    assert (shard.states[KEY].start_offset, shard.states[KEY].batches) == (-1, ())
    apply(shard, shard.initialize(KEY, 3, 50, now_ms=7))
    assert shard.states[KEY].start_offset == 50


def test_initialize_with_a_stale_state_epoch_is_fenced():
    shard = initialized(state_epoch=3)
    assert shard.initialize(KEY, 2, 0, now_ms=1).error == Error.FENCED_STATE_EPOCH
    again = apply(shard, shard.initialize(KEY, 4, 100, now_ms=1))
    assert kinds(again) == [log_format.SNAPSHOT]
    assert (shard.states[KEY].state_epoch, shard.states[KEY].start_offset) == (4, 100)
    assert shard.states[KEY].snapshot_epoch == 1


def test_write_fencing_leader_epoch_then_state_epoch():
    shard = initialized(state_epoch=2)
    apply(shard, write(shard, state_epoch=2, leader_epoch=5))
    assert write(shard, state_epoch=2, leader_epoch=4).error == Error.FENCED_LEADER_EPOCH
    assert write(shard, state_epoch=1, leader_epoch=5).error == Error.FENCED_STATE_EPOCH
    # Both stale: the leader epoch is checked first, as maybeGetWriteStateError does.
    assert write(shard, state_epoch=1, leader_epoch=4).error == Error.FENCED_LEADER_EPOCH
    assert shard.read(KEY, 4).error == Error.FENCED_LEADER_EPOCH
    # readStateSummary checks no leader epoch (DescribeShareGroupOffsets sends none).
    assert shard.read_summary(KEY, 4).error == Error.NONE
    assert write(shard, state_epoch=3, leader_epoch=6).error == Error.NONE


def test_a_read_at_a_newer_leader_epoch_fences_the_older_writer():
    shard = initialized()
    apply(shard, shard.read(KEY, 7))
    assert write(shard, leader_epoch=6).error == Error.FENCED_LEADER_EPOCH


def test_writes_merge_newer_batches_over_older_and_drop_below_the_start():
    shard = initialized()
    apply(shard, write(shard, batches=[StateBatch(0, 9, AV, 1)]))
    apply(shard, write(shard, batches=[StateBatch(3, 5, ACK, 1)]))
    assert shard.states[KEY].batches == (
        StateBatch(0, 2, AV, 1),
        StateBatch(3, 5, ACK, 1),
        StateBatch(6, 9, AV, 1),
    )
    apply(shard, write(shard, start=4, batches=[StateBatch(6, 9, ARC, 5)], dcc=2))
    state = shard.states[KEY]
    assert state.start_offset == 4
    assert state.batches == (StateBatch(4, 5, ACK, 1), StateBatch(6, 9, ARC, 5))
    summary = shard.read_summary(KEY, 0)
    assert summary.records == ()
    assert summary.summary is not None
    assert (summary.summary.start_offset, summary.summary.delivery_complete_count) == (4, 2)


def test_snapshot_every_n_updates():
    shard = initialized(per_snapshot=3)
    seen = []
    for offset in range(8):
        decision = apply(shard, write(shard, batches=[StateBatch(offset, offset, ACK, 1)]))
        seen += kinds(decision)
    s, u = log_format.SNAPSHOT, log_format.UPDATE
    # After the initial snapshot: 3 updates, then a snapshot, then 3 more, then a snapshot.
    assert seen == [u, u, u, s, u, u, u, s]
    assert shard.states[KEY].snapshot_epoch == 2
    assert shard.states[KEY].batches == (StateBatch(0, 7, ACK, 1),)


def test_default_cadence_is_500_updates():
    shard = initialized()
    for offset in range(500):
        assert kinds(apply(shard, write(shard, batches=[StateBatch(offset, offset, ACK, 1)]))) == [
            log_format.UPDATE
        ]
    assert kinds(write(shard, batches=[StateBatch(500, 500, ACK, 1)])) == [log_format.SNAPSHOT]


def test_replay_of_the_records_gives_the_live_state():
    live = ShareCoordinatorShard(4)
    log: list = []

    def run(decision):
        apply(live, decision)
        log.extend(decision.records)

    other = SharePartitionKey("h", uuid.UUID(int=9), 0)
    run(live.initialize(KEY, 1, 0, now_ms=1))
    run(live.initialize(other, 1, 10, now_ms=1))
    for step in range(23):
        run(live.read(KEY, step // 5))
        run(
            write(
                live,
                leader_epoch=step // 5,
                start=step if step % 7 == 0 else -1,
                batches=[StateBatch(step, step + 3, (AV, ACK, ARC)[step % 3], step % 4)],
                dcc=step,
            )
        )
    run(live.delete(other))
    loaded = ShareCoordinatorShard(4)
    loaded.replay_all(tuple(log))
    assert loaded.states == live.states
    assert loaded.update_counts == live.update_counts
    assert other not in loaded.states


def test_delete_tombstones_the_key():
    shard = initialized()
    decision = apply(shard, shard.delete(KEY))
    assert [value for _, value in decision.records] == [None, None]
    assert KEY not in shard.states
    assert shard.read(KEY, 0).error == Error.UNKNOWN_TOPIC_OR_PARTITION


def test_the_coordinator_key_is_kafkas_with_the_topic_id_as_kafkas_uuid():
    from minibroker.coordinator.share.state import kafka_uuid, parse_kafka_uuid
    from minibroker.replication.share_persister import ShareStateKey

    topic = uuid.UUID("d9d4d0a9-2a0b-4f3c-9f6e-0a1b2c3d4e5f")
    # Kafka's Uuid.toString of these bytes (URL-safe base64, no padding).
    assert kafka_uuid(topic) == "2dTQqSoLTzyfbgobLD1OXw"
    assert parse_kafka_uuid("2dTQqSoLTzyfbgobLD1OXw") == topic
    key = SharePartitionKey("g:1", topic, 4)
    assert key.coordinator_key() == "g:1:2dTQqSoLTzyfbgobLD1OXw:4"
    assert ShareStateKey("g:1", topic, 4).coordinator_key() == key.coordinator_key()
    for bad in ("short", str(topic), "2dTQqSoLTzyfbgobLD1O!w", "2dTQqSoLTzyfbgobLD1O+w"):
        try:
            parse_kafka_uuid(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
