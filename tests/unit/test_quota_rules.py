"""Client quotas, the pure parts: the broker's quota manager with time passed in (Kafka's
ClientQuotaManager, Rate and QuotaUtils), the controller's transitions (ClientQuotaControlManager,
ClientQuotasImage.describe), and the quotas in both stores (the JSON file, Kafka's znodes)."""

import json
from types import SimpleNamespace

import pytest

from minibroker.common.quota_manager import (
    CLIENT_ID,
    IP,
    USER,
    BrokerQuotas,
    ClientQuotaManager,
    Rate,
    entity_key,
    principal_user,
)
from minibroker.controller import client_quotas as transitions
from minibroker.controller import zk_layout as layout
from minibroker.controller.state import ControllerState
from minibroker.controller.store import ControllerStore
from minibroker.protocol.errors import Error

QUOTA = 1_000_000.0


def manager(quotas: dict, window_num: int = 11) -> ClientQuotaManager:
    produce = ClientQuotaManager("producer_byte_rate", window_num, 1)
    produce.update(
        {entity_key(pairs): {"producer_byte_rate": value} for pairs, value in quotas.items()}
    )
    return produce


# --- the quota manager --------------------------------------------------------------------


def test_the_most_specific_quota_applies_with_kafkas_precedence():
    levels = [
        (((USER, "u"), (CLIENT_ID, "c")), ("u", "c")),
        (((USER, "u"), (CLIENT_ID, None)), ("u", "c")),
        (((USER, "u"),), ("u", "")),
        (((USER, None), (CLIENT_ID, "c")), ("u", "c")),
        (((USER, None), (CLIENT_ID, None)), ("u", "c")),
        (((USER, None),), ("u", "")),
        (((CLIENT_ID, "c"),), ("", "c")),
        (((CLIENT_ID, None),), ("", "c")),
    ]
    # With every level set, each level in turn is the most specific one left.
    for index, (pairs, tags) in enumerate(levels):
        quotas = {p: float(100 + i) for i, (p, _tags) in enumerate(levels) if i >= index}
        assert manager(quotas).resolve("u", "c") == (tags, 100.0 + index), pairs
    assert manager({}).resolve("u", "c") is None
    # Another user's and another client's quotas do not apply.
    assert manager({((USER, "v"),): 1.0, ((CLIENT_ID, "d"),): 1.0}).resolve("u", "c") is None


def test_no_throttle_within_the_quota_and_kafkas_throttle_time_beyond_it():
    produce = manager({((USER, "u"),): QUOTA})
    # Eleven one-second samples: the first record is measured over ten whole windows.
    assert produce.record("u", "c", 10 * QUOTA - 1, now_ms=0) == 0
    throttle = produce.record("u", "c", 2 * QUOTA, now_ms=0)
    # (observed - quota) / quota * window: (12 MB / 10 s - 1 MB/s) / 1 MB/s * 10 s.
    assert throttle == pytest.approx(2000, abs=1)
    # Another user is not throttled; the same user's other client ids share its rate.
    assert produce.record("v", "c", 100 * QUOTA, now_ms=0) == 0
    assert produce.record("u", "other", 1, now_ms=0) > 0


def test_the_throttle_time_is_bounded_by_the_whole_window():
    produce = manager({((CLIENT_ID, None),): 1.0}, window_num=3)
    assert produce.record("u", "c", 1e12, now_ms=0) == 3000


def test_a_client_sending_as_fast_as_it_is_let_gets_its_quota():
    """A client that waits out each throttle time, as KIP-219 clients do, is held to the quota
    over the long run."""
    produce = manager({((CLIENT_ID, "c"),): QUOTA}, window_num=2)
    now_ms = 0
    sent = []
    while now_ms < 60_000:
        throttle = produce.record("u", "c", 16384, now_ms)
        sent.append((now_ms, 16384))
        now_ms += 5 + throttle
    measured = sum(size for at, size in sent if 10_000 <= at < 50_000) / 40
    assert measured == pytest.approx(QUOTA, rel=0.02)


def test_the_rate_is_kafkas_windowed_rate():
    rate = Rate(samples=3, window_ms=1000)
    rate.record(3000, now_ms=0)
    # Fewer than samples - 1 whole windows: measured over two windows.
    assert rate.measure(now_ms=500) == pytest.approx(3000 / 2.5)
    rate.record(3000, now_ms=2500)
    assert rate.measure(now_ms=2500) == pytest.approx(6000 / 2.5)
    # A sample whose last record is older than the whole window is forgotten.
    assert rate.measure(now_ms=6000) == 0.0


def test_quota_updates_reach_the_managers_and_turn_throttling_on_and_off():
    quotas = BrokerQuotas.create()
    assert not quotas.enabled
    quotas.alter(entity_key([(USER, "u")]), {"consumer_byte_rate": 5.0})
    assert quotas.enabled and quotas.fetch.resolve("u", "c") == (("u", ""), 5.0)
    assert quotas.produce.resolve("u", "c") is None
    quotas.alter(entity_key([(USER, "u")]), {})
    assert not quotas.enabled and quotas.fetch.resolve("u", "c") is None
    quotas.replace({entity_key([(IP, None)]): {"connection_creation_rate": 3.0}})
    assert not quotas.enabled
    assert principal_user("User:alice") == "alice"


def test_request_percentage_is_thread_time_as_a_percentage_of_one_thread():
    """KIP-124: the handler time (seconds x 100) over the window; beyond the quota, Kafka's
    throttle time, capped at one sample window (ClientRequestQuotaManager's bound)."""
    quotas = BrokerQuotas.create(window_num=11, window_size_s=1)
    quotas.alter(entity_key([(CLIENT_ID, "busy")]), {"request_percentage": 10.0})
    assert quotas.request.enabled and not quotas.enabled  # the byte-rate paths stay off
    request = quotas.request
    # 10% of one thread over an 11-second window: 1.1 thread-seconds, 110 "percent-seconds".
    assert request.record("u", "busy", 0.5 * 100, now_ms=0) == 0
    assert request.record("u", "busy", 0.5 * 100, now_ms=0) == 0
    throttle = request.record("u", "busy", 0.2 * 100, now_ms=0)
    assert 0 < throttle <= 1000  # (120/10 - 10)/10 x 10 s = 2 s, bounded at one window
    assert throttle == 1000
    assert request.record("u", "other", 5 * 100, now_ms=0) == 0  # no quota applies


def test_controller_mutation_rate_is_kafkas_token_bucket():
    """KIP-599: a bucket of window_num x window x rate partitions, full at first; strict:
    a topic goes while the bucket is not below zero (it may take it below), later ones are
    refused; the throttle is the time back to zero; permissive: all go, then the throttle."""
    quotas = BrokerQuotas.create(window_num=2, window_size_s=1)
    quotas.alter(entity_key([(USER, "u")]), {"controller_mutation_rate": 2.0})
    mutation = quotas.mutation
    assert mutation.enabled and not quotas.request.enabled
    # Burst 4: 3 go (1 left), 5 go (-4 left: checked before recording), 1 refused.
    accepted, throttle = mutation.admit("u", "c", [3, 5, 1], strict=True, now_ms=1000)
    assert accepted == [True, True, False]
    assert throttle == 2000  # -(-4) / 2 per second
    # 1.5 s later: -1 left, still refused, throttled 500 ms.
    accepted, throttle = mutation.admit("u", "c", [1], strict=True, now_ms=2500)
    assert accepted == [False] and throttle == 500
    # Another 0.5 s: back at 0, accepted, -1 again.
    accepted, throttle = mutation.admit("u", "c", [1], strict=True, now_ms=3000)
    assert accepted == [True] and throttle == 500
    # Permissive: accepted all the same.
    accepted, throttle = mutation.admit("u", "c", [4, 4], strict=False, now_ms=3000)
    assert accepted == [True, True] and throttle == 4500
    # The bucket refills up to the burst, not beyond.
    accepted, throttle = mutation.admit("u", "c", [4], strict=True, now_ms=60_000)
    assert accepted == [True] and throttle == 0
    sensor, rate, quota = mutation.sensors(60_000)[0]
    assert sensor.tags == ("u", "") and quota == 2.0
    assert mutation.tokens(sensor, quota, 60_000) == 0
    # What the controller then refused is given back (up to the burst).
    mutation.admit("u", "c", [4], strict=True, now_ms=60_000)
    assert mutation.tokens(sensor, quota, 60_000) == -4
    mutation.refund("u", "c", 4, now_ms=60_000)
    assert mutation.tokens(sensor, quota, 60_000) == 0
    # No quota: everything goes, nothing is kept.
    assert mutation.admit("v", "c", [100], strict=True, now_ms=0) == ([True], 0)


# --- the controller's transitions ---------------------------------------------------------


def alteration(entries, validate_only=False):
    return SimpleNamespace(
        entries=[
            SimpleNamespace(
                entity=[SimpleNamespace(entity_type=t, entity_name=n) for t, n in pairs],
                ops=[SimpleNamespace(key=k, value=v, remove=v is None) for k, v in ops.items()],
            )
            for pairs, ops in entries
        ],
        validate_only=validate_only,
    )


def filtered(components, strict=False):
    return SimpleNamespace(
        components=[
            SimpleNamespace(entity_type=t, match_type=m, match=n) for t, m, n in components
        ],
        strict=strict,
    )


@pytest.mark.parametrize(
    ("pairs", "ops", "message"),
    [
        ([(USER, "u")], {"nope": 1.0}, "Invalid configuration key nope"),
        ([(USER, "u")], {"producer_byte_rate": 0.0}, "must be greater than 0"),
        ([(USER, "u")], {"producer_byte_rate": 1.5}, "cannot be a fractional value"),
        ([(USER, "u")], {"producer_byte_rate": 2.0**64}, "too large for a LONG"),
        ([(IP, "::1")], {"connection_creation_rate": 2.0**40}, "too large for an INT"),
        ([(IP, "::1")], {"producer_byte_rate": 1.0}, "Invalid configuration key"),
        ([(IP, "host name")], {"connection_creation_rate": 1.0}, "not a valid IP"),
        ([(IP, "1.2.3.4"), (CLIENT_ID, "c")], {"producer_byte_rate": 1.0}, "combination"),
        ([(USER, "")], {"producer_byte_rate": 1.0}, "Empty user not supported"),
        ([(USER, "a"), (USER, "b")], {"producer_byte_rate": 1.0}, "duplicate entity entry"),
        ([("group", "g")], {"producer_byte_rate": 1.0}, "Unhandled client quota entity type"),
        ([], {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ],
)
def test_an_alteration_kafka_refuses_is_invalid_request_and_changes_nothing(pairs, ops, message):
    state = ControllerState()
    results, changed = transitions.alter(state, alteration([(pairs, ops)]))
    assert results[0]["error_code"] == Error.INVALID_REQUEST
    assert message in results[0]["error_message"]
    assert not changed and state.client_quotas == {}


def test_alterations_apply_per_entity_and_validate_only_changes_nothing():
    state = ControllerState()
    request = alteration(
        [
            ([(USER, "u"), (CLIENT_ID, None)], {"producer_byte_rate": 10.0}),
            ([(USER, "v")], {"nope": 1.0}),
        ]
    )
    results, changed = transitions.alter(state, request)
    assert [r["error_code"] for r in results] == [Error.NONE, Error.INVALID_REQUEST]
    key = entity_key([(USER, "u"), (CLIENT_ID, None)])
    assert changed == {key} and state.client_quotas == {key: {"producer_byte_rate": 10.0}}
    results, changed = transitions.alter(
        state, alteration([([(USER, "w")], {"consumer_byte_rate": 1.0})], validate_only=True)
    )
    assert results[0]["error_code"] == Error.NONE and not changed
    # The same value again changes nothing; removing the last key removes the entity.
    assert (
        transitions.alter(
            state, alteration([([(USER, "u"), (CLIENT_ID, None)], {"producer_byte_rate": 10.0})])
        )[1]
        == set()
    )
    transitions.alter(
        state, alteration([([(CLIENT_ID, None), (USER, "u")], {"producer_byte_rate": None})])
    )
    assert state.client_quotas == {}


def test_describe_matches_as_kafka_does():
    state = ControllerState()
    transitions.alter(
        state,
        alteration(
            [
                ([(USER, "u")], {"producer_byte_rate": 1.0}),
                ([(USER, "u"), (CLIENT_ID, "c")], {"producer_byte_rate": 2.0}),
                ([(USER, None)], {"producer_byte_rate": 3.0}),
                ([(CLIENT_ID, "c")], {"consumer_byte_rate": 4.0}),
                ([(IP, "10.0.0.1")], {"connection_creation_rate": 5.0}),
            ]
        ),
    )

    def names(request):
        answer = transitions.describe(state, request)
        assert answer["error_code"] == Error.NONE, answer
        return sorted(
            (
                tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"])
                for entry in answer["entries"]
            ),
            key=repr,
        )

    assert names(filtered([(USER, 0, "u")])) == sorted(
        [((CLIENT_ID, "c"), (USER, "u")), ((USER, "u"),)], key=repr
    )
    assert names(filtered([(USER, 0, "u")], strict=True)) == [((USER, "u"),)]
    assert names(filtered([(USER, 1, None)])) == [((USER, None),)]
    assert names(filtered([(CLIENT_ID, 2, None)])) == sorted(
        [((CLIENT_ID, "c"),), ((CLIENT_ID, "c"), (USER, "u"))], key=repr
    )
    assert names(filtered([(IP, 2, None)])) == [((IP, "10.0.0.1"),)]
    assert len(names(filtered([]))) == 5
    assert names(filtered([], strict=True)) == []
    for bad, error in [
        ([(USER, 0, None)], Error.INVALID_REQUEST),
        ([(USER, 1, "u")], Error.INVALID_REQUEST),
        ([(USER, 2, "u")], Error.INVALID_REQUEST),
        ([(USER, 7, None)], Error.INVALID_REQUEST),
        ([(USER, 2, None), (USER, 1, None)], Error.INVALID_REQUEST),
        ([(IP, 2, None), (CLIENT_ID, 2, None)], Error.INVALID_REQUEST),
        ([("", 2, None)], Error.INVALID_REQUEST),
        ([("group", 2, None)], Error.UNSUPPORTED_VERSION),
    ]:
        answer = transitions.describe(state, filtered(bad))
        assert (answer["error_code"], answer["entries"]) == (error, None), bad


def test_the_push_carries_whole_sets_and_a_snapshot_marker():
    state = ControllerState()
    key = entity_key([(USER, "u")])
    state.client_quotas[key] = {"producer_byte_rate": 7.0}
    gone = entity_key([(CLIENT_ID, "c")])
    data = transitions.push_request_data(state, {key, gone})
    assert data["entries"] == [
        {"entity": [{"entity_type": CLIENT_ID, "entity_name": "c"}], "ops": []},
        {
            "entity": [{"entity_type": USER, "entity_name": "u"}],
            "ops": [{"key": "producer_byte_rate", "value": 7.0, "remove": False}],
        },
    ]
    snapshot = transitions.push_request_data(state, None)
    assert snapshot["entries"][0] == transitions.SNAPSHOT_MARKER


# --- the stores ---------------------------------------------------------------------------


def quota_state() -> ControllerState:
    state = ControllerState()
    state.client_quotas = {
        entity_key([(USER, "alice")]): {"producer_byte_rate": 1024.0},
        entity_key([(USER, "alice"), (CLIENT_ID, "app 1")]): {"consumer_byte_rate": 2048.0},
        entity_key([(USER, None), (CLIENT_ID, None)]): {"request_percentage": 12.5},
        entity_key([(CLIENT_ID, None)]): {"producer_byte_rate": 1.0},
        entity_key([(CLIENT_ID, "c")]): {"consumer_byte_rate": 3.0},
        entity_key([(IP, "10.0.0.1")]): {"connection_creation_rate": 5.0},
        entity_key([(IP, None)]): {"connection_creation_rate": 50.0},
    }
    state.scram_credentials = {
        "alice": {
            "SCRAM-SHA-256": {
                "salt": "AAAA",
                "stored_key": "AAAA",
                "server_key": "AAAA",
                "iterations": 4096,
            }
        }
    }
    return state


def test_quotas_survive_the_json_store(tmp_path):
    store = ControllerStore(tmp_path / "state.json")
    state = quota_state()
    store.save(state)
    loaded = store.load()
    assert loaded.client_quotas == state.client_quotas
    assert loaded.scram_credentials == state.scram_credentials


def test_quotas_are_in_kafkas_znodes_beside_the_users_credentials():
    state = quota_state()
    znodes = layout.state_znodes(state)
    alice = json.loads(znodes["/config/users/alice"])["config"]
    assert alice["producer_byte_rate"] == "1024" and "SCRAM-SHA-256" in alice
    assert json.loads(znodes["/config/users/alice/clients/app%201"]) == {
        "version": 1,
        "config": {"consumer_byte_rate": "2048"},
    }
    assert znodes["/config/users/alice/clients"] == b""
    assert json.loads(znodes["/config/users/<default>/clients/<default>"])["config"] == {
        "request_percentage": "12.5"
    }
    assert json.loads(znodes["/config/clients/<default>"])["config"] == {"producer_byte_rate": "1"}
    assert json.loads(znodes["/config/ips/10.0.0.1"])["config"] == {"connection_creation_rate": "5"}
    # Exactly these znodes beside the empty state's (no stray parent such as /config).
    empty = layout.state_znodes(ControllerState())
    assert sorted(set(znodes) - set(empty)) == [
        "/config/clients/<default>",
        "/config/clients/c",
        "/config/ips/10.0.0.1",
        "/config/ips/<default>",
        "/config/users/<default>",
        "/config/users/<default>/clients",
        "/config/users/<default>/clients/<default>",
        "/config/users/alice",
        "/config/users/alice/clients",
        "/config/users/alice/clients/app%201",
    ]
    loaded = layout.state_from_znodes(znodes, 1)
    assert loaded.client_quotas == state.client_quotas
    assert loaded.scram_credentials == state.scram_credentials
    # Removing the last quota of a user's client removes its znodes, the user's stays.
    del state.client_quotas[entity_key([(USER, "alice"), (CLIENT_ID, "app 1")])]
    writes = layout.plan_writes(znodes, layout.state_znodes(state))
    assert [(w.kind, w.path) for w in writes if w.kind == "delete"] == [
        ("delete", "/config/users/alice/clients/app%201"),
        ("delete", "/config/users/alice/clients"),
    ]


def test_a_kafka_written_quota_znode_without_data_parent_loads():
    znodes = layout.state_znodes(ControllerState())
    # Kafka's createRecursive leaves the parents of a user's client quota without data.
    znodes["/config/users/bob"] = b""
    znodes["/config/users/bob/clients"] = b""
    znodes["/config/users/bob/clients/x"] = b'{"version":1,"config":{"producer_byte_rate":"10"}}'
    loaded = layout.state_from_znodes(znodes, 1)
    assert loaded.client_quotas == {
        entity_key([(USER, "bob"), (CLIENT_ID, "x")]): {"producer_byte_rate": 10.0}
    }
    assert loaded.scram_credentials == {}
