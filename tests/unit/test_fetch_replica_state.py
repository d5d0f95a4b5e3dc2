"""KIP-903 on the leader's side of a follower's Fetch: v15+ carries the follower's id and broker
epoch in ReplicaState (a tagged field), read from the decoded bytes here; v12 carries only the
id, and the epoch is then -1 (unknown, not checked by the controller)."""

import datetime

from minibroker.apis import fetch
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey

COMMON = {
    "max_wait": datetime.timedelta(milliseconds=500),
    "min_bytes": 1,
    "max_bytes": 1 << 20,
    "isolation_level": 0,
    "session_id": 0,
    "session_epoch": -1,
    "topics": (),
    "forgotten_topics_data": (),
    "rack_id": "",
}


def _decoded(version: int, data: dict):
    body = codec.encode_entity(codec.build(codec.request_class(ApiKey.FETCH, version), data))
    return codec.decode_request(ApiKey.FETCH, version, body, 0)


def test_a_v15_fetch_gives_the_followers_id_and_broker_epoch():
    request = _decoded(15, {**COMMON, "replica_state": {"replica_id": 2, "replica_epoch": 41}})
    assert (fetch._replica_id(request), fetch._replica_epoch(request)) == (2, 41)


def test_a_v12_fetch_gives_the_id_and_no_epoch():
    request = _decoded(12, {**COMMON, "replica_id": 2})
    assert (fetch._replica_id(request), fetch._replica_epoch(request)) == (2, -1)
