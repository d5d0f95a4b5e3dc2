"""Incremental fetch sessions (KIP-227) at scale, issue 34: a 1,000-partition topic at
replication factor 3 on a 3-broker cluster, read by a Java consumer (kafka-clients 4.4) while
the followers replicate it, both seen in the brokers' request log.

Each broker logs every request it serves to ``kafka.request.logger`` once that logger is at
DEBUG (apis/request_log.py: Kafka's ``Completed request:`` line, with the request's fields and
minibroker's ``requestSize``), switched on here as an operator would, with
IncrementalAlterConfigs on the BROKER_LOGGER resource (``kafka-configs --entity-type
broker-loggers``). The log shows, for every fetching client on every leader, the follower
fetchers (replication/fetcher.py's FetchSessionHandler, as Kafka's ReplicaFetcherThread) and
the consumer alike: one full fetch (session id 0, epoch 0) naming the partitions, then
incremental fetches in the session the leader opened (one session id, epochs 1, 2, 3, ...),
and, once the topic is idle, incremental fetches that name no partition, whose bytes are a
small fraction of the full fetch's: the leader answers from the partitions its session keeps
(replication/fetch_session.py), which a sessionless fetcher would have to send every time.

The cluster is the Java tests' (minibroker_cluster), on its own here: its followers must
start fetching after the request log is on, so that each fetcher's first fetch, the full one,
is in it; on Kafka's heartbeat and lag timeouts rather than the suite's short ones, as
cluster/test_many_topics.py runs its 1,000 topics (creating 3,000 replicas on two busy cores
is the machine's test at 1.5 s, not the protocol's).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest

from minibroker.apis import request_log
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import Cluster
from tests.conftest import exchange, topic_id, wait_for
from tests.java.conftest import JavaRunner, minibroker_cluster

PARTITIONS = 1000
REPLICATION = 3
TOPIC = "sessions-1000"
KAFKA_TIMEOUTS = {
    "broker.heartbeat.interval.ms": 2000,
    "broker.session.timeout.ms": 9000,
    "replica.lag.time.max.ms": 30000,
}
# How many trailing idle fetches (no partition named) each follower and the consumer must
# show: the followers fetch on for as long as the test waits; the consumer's idle polls last
# a second, and on a busy machine it sent a single idle fetch to one broker in that time.
IDLE_FETCHES = {"follower": 3, "consumer": 1}
# An idle incremental fetch against the session's full fetch: well under a tenth.
MAX_IDLE_RATIO = 0.1
REQUEST_LOGGER = "kafka.request.logger"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with minibroker_cluster(tmp_path_factory.mktemp("fetch-sessions"), KAFKA_TIMEOUTS) as started:
        yield started


def set_logger(cluster: Cluster, level: str) -> None:
    """IncrementalAlterConfigs on each broker's BROKER_LOGGER resource (type 8)."""
    for broker in cluster.brokers.values():
        request = codec.build(
            codec.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1),
            {
                "resources": [
                    {
                        "resource_type": 8,
                        "resource_name": str(broker.node_id),
                        "configs": [
                            {"name": REQUEST_LOGGER, "config_operation": 0, "value": level}
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        (answer,) = exchange(broker.bootstrap, request).responses
        assert answer.error_code == 0, answer


def fetches(cluster: Cluster) -> dict[tuple[int, str], list[dict]]:
    """Every Fetch each broker logged, by (broker, client connection), in the order served
    (a client has one Fetch in flight per connection, so served is sent order)."""
    by_client: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for node_id, broker in cluster.brokers.items():
        for entry in request_log.parse(broker.stderr_path.read_text(errors="replace")):
            if entry["requestHeader"]["requestApiKeyName"] == "FETCH":
                by_client[(node_id, entry["connection"])].append(entry)
    return by_client


def named(entry: dict) -> int:
    return sum(len(topic["partitions"]) for topic in entry["request"]["topics"])


def is_idle(entry: dict) -> bool:
    request = entry["request"]
    return (
        request["sessionEpoch"] > 0 and not request["topics"] and not request["forgottenTopicsData"]
    )


def replica_id(entry: dict) -> int:
    request = entry["request"]
    state = request.get("replicaState")
    return state["replicaId"] if state is not None else request["replicaId"]


def closing(sent: list[dict]) -> dict | None:
    """The last fetch, if it closed its session: the Java consumer's close sends a fetch of
    epoch -1 (FetchMetadata.FINAL) to each broker it fetched from."""
    return sent[-1] if sent[-1]["request"]["sessionEpoch"] == -1 else None


def in_session(sent: list[dict]) -> list[dict]:
    """The fetches before the session's close, if any."""
    return sent[:-1] if closing(sent) is not None else sent


def settled(cluster: Cluster) -> dict | None:
    """The fetches by client once every follower fetcher (two leaders each for three
    followers) and the consumer on each of the three leaders end with IDLE_FETCHES idle
    incremental fetches; None before."""
    by_client = fetches(cluster)
    followers = [c for c, sent in by_client.items() if replica_id(sent[0]) >= 0]
    consumers = [c for c in by_client if c not in followers]
    done = len(followers) == 6 and len(consumers) == 3
    if done and all(
        len(in_session(sent)) > idle and all(is_idle(e) for e in in_session(sent)[-idle:])
        for client, sent in by_client.items()
        for idle in [IDLE_FETCHES["follower" if client in followers else "consumer"]]
    ):
        return {"followers": followers, "consumers": consumers, "fetches": by_client}
    return None


def test_consumer_and_followers_fetch_1000_partitions_in_incremental_sessions(
    java: JavaRunner, cluster: Cluster
):
    set_logger(cluster, "DEBUG")
    # One JVM: creates the topic (1,000 partitions, RF 3), produces one record to each
    # partition, reads them all with a KafkaConsumer (assigned, fetch.max.wait.ms 50), then
    # polls on while nothing new comes.
    answer = java.json(
        "SessionConsumer", cluster.bootstrap, TOPIC, str(PARTITIONS), str(REPLICATION), "1"
    )
    assert answer["read"] == answer["expected"] == PARTITIONS, answer
    # The followers keep fetching (every replica.fetch.wait.max.ms while idle); the
    # consumer's last polls were idle.
    found = wait_for(lambda: settled(cluster), 30, "idle incremental fetches from every client")
    set_logger(cluster, "INFO")
    by_client = found["fetches"]
    print("client (leader, connection): fetches, full fetch bytes and partitions, idle bytes")
    topic = request_log.kafka_uuid(topic_id(cluster.brokers[1].bootstrap, TOPIC))
    held: dict[str, int] = defaultdict(int)
    for client, sent in sorted(by_client.items()):
        closed = closing(sent)
        sent = in_session(sent)
        full, *incremental = sent
        follower = client in found["followers"]
        kind = f"follower {replica_id(full)}" if follower else "consumer"
        idle = [
            e["requestSize"] for e in sent[-IDLE_FETCHES["follower" if follower else "consumer"] :]
        ]
        print(
            f"  {client} {kind}: {len(sent)} fetches, full {full['requestSize']} B for "
            f"{named(full)} partitions, idle {idle} B"
            + (", then closed" if closed is not None else "")
        )
        # The first fetch is a full one, sessionless as sent: it opens the session.
        opening = (full["request"]["sessionId"], full["request"]["sessionEpoch"])
        assert opening == (0, 0) and named(full) > 0, (client, opening, named(full))
        # Then incremental fetches in one session the leader opened, epochs 1, 2, 3, ...
        session_ids = {e["request"]["sessionId"] for e in incremental}
        assert len(session_ids) == 1 and 0 not in session_ids, (client, session_ids)
        epochs = [e["request"]["sessionEpoch"] for e in incremental]
        assert epochs == list(range(1, len(epochs) + 1)), (client, epochs[:20])
        # Idle: the session keeps the partitions, the request names none and costs a small
        # fraction of the full one's bytes.
        assert max(idle) < MAX_IDLE_RATIO * full["requestSize"], (client, idle, full["requestSize"])
        if closed is not None:
            # Only the consumer closes its sessions (the followers' fetchers run on), with
            # the session's id and no partition.
            assert not follower, client
            assert closed["request"]["sessionId"] in session_ids, (client, closed["request"])
            assert not closed["request"]["topics"], client
        # What the sessions held: every partition named when it was added, in the full fetch
        # or an incremental one (the Java consumer forgets a partition while its records wait
        # in the client's buffer, and adds it again when they are consumed).
        held["follower" if follower else "consumer"] += len(
            {
                partition["partition"]
                for e in sent
                for entry in e["request"]["topics"]
                # By id (the consumer's v18) or by name (the followers' v12).
                if entry.get("topicId") == topic or entry.get("topic") == TOPIC
                for partition in entry["partitions"]
            }
        )
    # The consumer's sessions hold the whole topic, a third on each leader; the followers'
    # hold each partition twice (replication factor 3: a leader and two followers).
    assert held == {"consumer": PARTITIONS, "follower": PARTITIONS * (REPLICATION - 1)}, held
