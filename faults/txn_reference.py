"""`python -m faults.txn_reference`: the transactional workload and its checker against three
Apache Kafka nodes (bench/kafka_ref.py; java/fetch.sh first) with kill -9 faults, alternately
of the coordinator of one of the workload's transactional ids and of a random node, each node
restarted after a few seconds.

What it shows: the workload and the checker find nothing wrong with a system that is known to
keep Kafka's transaction guarantees through its own failovers, so what they find on minibroker
under faults.chaos is minibroker's, not the workload's (unknown outcomes, fenced producers,
coordinator moves and rebalances all happen here).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from bench.kafka_ref import KafkaCluster
from faults.txn_workload import UNKNOWN, TransactionalWorkload, java_string_hash

TRANSACTION_STATE_PARTITIONS = 50
DOWN_SECONDS = 6.0
UP_SECONDS = 6.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.txn_reference", description=__doc__)
    parser.add_argument("--faults", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    print(f"seed {seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="txn-reference-") as base:
        kafka = KafkaCluster.start(Path(base), nodes=3)
        try:
            workload = TransactionalWorkload(kafka.bootstrap, seed=seed)
            workload.create_topics(3, 2)
            workload.start()
            time.sleep(UP_SECONDS)
            admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
            for index in range(args.faults):
                if index % 2 == 0:
                    transactional_id = f"txn-producer-{workload.run_id}-0"
                    partition = java_string_hash(transactional_id) % TRANSACTION_STATE_PARTITIONS
                    topics = admin.list_topics("__transaction_state", timeout=30).topics
                    leader = topics["__transaction_state"].partitions[partition].leader
                    victim = next(n for n in kafka.nodes if n.node_id == leader)
                    what = "the coordinator"
                else:
                    victim, what = rng.choice(kafka.nodes), "a random node"
                print(
                    f"fault {index + 1}: kill -9 of node {victim.node_id} ({what});"
                    f" {workload.committed()} transactions committed so far",
                    flush=True,
                )
                kafka.kill_node(victim)
                time.sleep(DOWN_SECONDS)
                kafka.restart_node(victim)
                time.sleep(UP_SECONDS)
            workload.stop()
            verdict, unread = workload.verdict()
        finally:
            kafka.stop()
    unknown = sum(1 for t in workload.history.transactions if t.outcome == UNKNOWN)
    print(f"{unknown} outcomes unknown; {len(workload.history.errors)} client errors, e.g.:")
    for line in workload.history.errors[:8]:
        print(f"  {line[:200]}")
    print(verdict.summary())
    if unread:
        print(f"THE FINAL READ STALLED on {unread} partitions")
    return 0 if verdict.clean and not unread else 1


if __name__ == "__main__":
    sys.exit(main())
