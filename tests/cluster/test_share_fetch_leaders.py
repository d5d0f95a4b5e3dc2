"""ShareFetch and ShareAcknowledge in a cluster: a partition is shared from its leader only.

A controller and three brokers (real processes); a topic replicated on all three. A ShareFetch
for the partition sent to a follower is answered NOT_LEADER_OR_FOLLOWER with the current
leader and that leader's endpoint (so a share consumer goes there without a Metadata round
trip, as Kafka answers); the same member's fetch from the leader acquires the records.
"""

from __future__ import annotations

from minibroker.protocol.errors import Error
from tests.cluster.conftest import create_replicated_topic
from tests.conftest import topic_id
from tests.integration.test_share_fetch import Member, produce, ranges

TOPIC = "share-leaders"


def test_only_the_leader_shares_a_partition(cluster):
    create_replicated_topic(cluster, TOPIC, 1)
    leader = cluster.leader_of(TOPIC, 0)
    follower = next(node for node in cluster.brokers if node != leader)
    tid = topic_id(cluster.brokers[leader].bootstrap, TOPIC)
    at_follower = Member(cluster.brokers[follower].bootstrap, "leaders", tid, "m")
    at_leader = Member(cluster.brokers[leader].bootstrap, "leaders", tid, "m")
    try:
        answer = at_follower.fetch()
        assert answer.error_code == 0
        (part,) = answer.responses[0].partitions
        assert part.error_code == Error.NOT_LEADER_OR_FOLLOWER
        assert part.current_leader.leader_id == leader
        assert part.current_leader.leader_epoch >= 0
        assert [e.node_id for e in answer.node_endpoints] == [leader]
        endpoint = answer.node_endpoints[0]
        assert f"{endpoint.host}:{endpoint.port}" == cluster.brokers[leader].bootstrap
        # Acknowledging there is refused the same way.
        refused = at_follower.acknowledge([(0, 0, 1)])
        assert refused.responses[0].partitions[0].error_code == Error.NOT_LEADER_OR_FOLLOWER
        # At the leader: the share partition starts at the latest offset, then acquires.
        assert ranges(answer_part(at_leader.fetch())) == []
        produce(cluster.bootstrap, TOPIC, 5, per_batch=5)
        got = ranges(answer_part(at_leader.fetch(max_wait_ms=10_000)))
        assert got == [(0, 4, 1)]
        accepted = at_leader.acknowledge([(0, 4, 1)])
        assert accepted.responses[0].partitions[0].error_code == 0
    finally:
        at_follower.close()
        at_leader.close()


def answer_part(response):
    assert response.error_code == 0, response
    parts = [p for t in response.responses for p in t.partitions]
    return parts[0] if parts else None
