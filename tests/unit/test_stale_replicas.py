"""A topic made again under a new id loses every old partition on a broker, and nothing else
does (ReplicaManager._drop_stale_replicas, which since issue 39 looks at the hosted partitions
of the request's topics, found in one pass per LeaderAndIsr, not at every hosted partition
for each new replica). In-process, the replica manager's real logs in tmp_path."""

import uuid

from tests.unit.replication_harness import leader_and_isr, make_broker

OLD = uuid.UUID(int=7)
NEW = uuid.UUID(int=8)


async def test_a_topic_made_again_drops_its_old_partitions_and_no_other(autojump_clock, tmp_path):
    replicas = make_broker(tmp_path, 1)
    replicas.announced_topic_configs["other"] = {}
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=(0, 1, 2)))
    await replicas.apply_leader_and_isr(
        leader_and_isr(1, 1, [1], [1], partitions=(0, 1), topic="other", topic_id=uuid.UUID(int=9))
    )
    # "t" again under a new id, with one partition: its three old ones go, "other" stays.
    replicas.announced_topic_configs["t"] = {}
    await replicas.apply_leader_and_isr(
        leader_and_isr(1, 1, [1], [1], partitions=(0,), topic_id=NEW)
    )
    hosted = {key: partition.topic_id for key, partition in replicas._partitions.items()}
    assert hosted == {
        ("t", 0): NEW,
        ("other", 0): uuid.UUID(int=9),
        ("other", 1): uuid.UUID(int=9),
    }
    assert replicas.log_manager.get_log("t", 1) is None
    assert replicas.log_manager.get_log("other", 1) is not None
