"""The connection limits' pure rules (node/connection_limits.py), with time passed in, and the
configuration that sets them."""

import struct

import pytest

from minibroker.common.config import ConfigError, load_config
from minibroker.node.connection_limits import (
    CONNECTION_CREATION_RATE,
    UNBOUNDED,
    ConnectionQuotas,
    CreationRates,
    IdleConnections,
    MemoryPool,
)
from minibroker.node.server import normal_address, resolve_ip_overrides
from minibroker.protocol.framing import FrameDecoder, FrameError


def test_an_address_over_its_limit_is_refused_and_its_slot_comes_back_on_close():
    quotas = ConnectionQuotas(max_per_ip=2, overrides={"10.0.0.9": 0, "10.0.0.2": 3})
    assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
    assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
    assert quotas.admit("PLAINTEXT", "10.0.0.1") == 2  # refused, and not counted
    assert quotas.per_address == {"10.0.0.1": 2} and quotas.total == 2
    assert quotas.admit("PLAINTEXT", "10.0.0.9") == 0  # an override of 0 bans the address
    for _ in range(3):
        assert quotas.admit("CLIENT", "10.0.0.2") is None  # an override above the default
    assert quotas.admit("CLIENT", "10.0.0.2") == 3
    quotas.release("PLAINTEXT", "10.0.0.1")
    assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
    assert quotas.per_listener == {"PLAINTEXT": 2, "CLIENT": 3}
    for _ in range(3):
        quotas.release("CLIENT", "10.0.0.2")
    assert "10.0.0.2" not in quotas.per_address and quotas.per_listener["CLIENT"] == 0


def test_max_connections_waits_except_on_a_protected_listener():
    quotas = ConnectionQuotas(max_connections=2, protected_listeners=frozenset({"INTERNAL"}))
    assert quotas.slot_available("CLIENT")
    quotas.admit("CLIENT", "10.0.0.1")
    quotas.admit("CLIENT", "10.0.0.2")
    assert not quotas.slot_available("CLIENT")
    assert not quotas.over_limit()
    assert quotas.slot_available("INTERNAL")
    quotas.admit("INTERNAL", "10.0.0.3")
    assert quotas.over_limit()  # a connection of another listener is to be closed
    quotas.release("CLIENT", "10.0.0.1")
    assert not quotas.over_limit() and not quotas.slot_available("CLIENT")
    quotas.release("CLIENT", "10.0.0.2")
    assert quotas.slot_available("CLIENT")


def test_unbounded_by_default():
    quotas = ConnectionQuotas()
    assert quotas.max_connections == quotas.max_per_ip == UNBOUNDED
    for number in range(1000):
        assert quotas.admit("PLAINTEXT", "127.0.0.1") is None, number
    assert quotas.slot_available("PLAINTEXT") and not quotas.over_limit()


def test_idle_connections_expire_least_recently_active_first():
    idle = IdleConnections(max_idle=10.0)
    assert idle.next_deadline() is None and idle.expired(1000.0) == []
    idle.touch("a", 0.0)
    idle.touch("b", 1.0)
    idle.touch("c", 2.0)
    assert idle.next_deadline() == 10.0
    idle.touch("a", 5.0)  # activity moves it to the back
    assert idle.next_deadline() == 11.0
    assert idle.expired(11.0) == []  # exactly max_idle is not yet "more than"
    assert idle.expired(12.5) == ["b", "c"]
    assert idle.next_deadline() == 15.0
    assert list(idle.least_recent()) == ["a"]


def test_a_connection_with_a_request_in_flight_does_not_expire():
    idle = IdleConnections(max_idle=1.0)
    idle.touch("parked", 0.0)
    idle.touch("quiet", 0.5)
    idle.remove("parked")  # a request arrived; its answer may take minutes (a JoinGroup)
    assert idle.expired(100.0) == ["quiet"]
    assert len(idle) == 0
    idle.touch("parked", 100.0)  # answered: idle from now
    assert idle.expired(100.9) == [] and idle.expired(101.1) == ["parked"]
    idle.touch("gone", 0.0)
    idle.remove("gone")
    idle.remove("never there")
    assert idle.expired(1000.0) == []


def test_the_memory_pool_never_lends_beyond_its_size():
    pool = MemoryPool(100)
    assert pool.try_allocate(60)
    assert not pool.try_allocate(41)  # strict: the whole frame must fit
    assert pool.try_allocate(40)
    assert pool.available == 0 and pool.used == 100
    assert not pool.try_allocate(1)
    pool.release(60)
    assert pool.try_allocate(41) and pool.used == 81


def test_the_decoder_says_a_frames_size_before_its_body_and_what_is_missing():
    decoder = FrameDecoder(1000)
    assert decoder.declared_size() is None and decoder.missing() == 4
    decoder.feed(struct.pack(">i", 300)[:3])
    assert decoder.declared_size() is None and decoder.missing() == 1
    decoder.feed(struct.pack(">i", 300)[3:])
    assert decoder.declared_size() == 300 and decoder.missing() == 300
    decoder.feed(b"x" * 120)
    assert decoder.next_frame() is None
    assert decoder.declared_size() == 300 and decoder.missing() == 180
    decoder.feed(b"y" * 180)
    assert decoder.next_frame() == bytearray(b"x" * 120 + b"y" * 180)
    assert decoder.missing() == 4
    # A large frame, received into its own buffer, says the same.
    decoder = FrameDecoder(1 << 20)
    decoder.feed(struct.pack(">i", 200_000))
    assert decoder.next_frame() is None
    assert decoder.declared_size() == 200_000 and decoder.missing() == 200_000
    # A size beyond the limit is refused as soon as it is known (Kafka's InvalidReceive).
    decoder = FrameDecoder(1000)
    decoder.feed(struct.pack(">i", 1001))
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        decoder.declared_size()


def test_the_connection_limits_take_kafkas_names_and_defaults():
    config = load_config(None, [])
    assert config.connections_max_idle_ms == 600_000
    assert config.max_connections == config.max_connections_per_ip == 2**31 - 1
    assert config.max_connections_per_ip_overrides == {}
    assert config.queued_max_request_bytes == -1
    assert config.socket_request_max_bytes == 104_857_600
    config = load_config(
        None,
        [
            "connections.max.idle.ms=500",
            "max.connections=10",
            "max.connections.per.ip=0",
            "max.connections.per.ip.overrides=127.0.0.2:3, [::1]:4,broker-host:0",
            "queued.max.request.bytes=200000000",
        ],
    )
    assert config.connections_max_idle_ms == 500
    assert config.max_connections == 10 and config.max_connections_per_ip == 0
    assert config.max_connections_per_ip_overrides == {"127.0.0.2": 3, "::1": 4, "broker-host": 0}
    assert config.queued_max_request_bytes == 200_000_000
    assert load_config(None, ["connections.max.idle.ms=-1"]).connections_max_idle_ms == -1


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["queued.max.request.bytes=1000"], "queued.max.request.bytes"),
        (["max.connections.per.ip=0"], "max.connections.per.ip.overrides"),
        (["max.connections.per.ip.overrides=127.0.0.1"], "max.connections.per.ip.overrides"),
        (["max.connections.per.ip.overrides=127.0.0.1:-1"], "max.connections.per.ip.overrides"),
        (["max.connections=-1"], "max.connections"),
    ],
)
def test_kafkas_checks_of_the_connection_limits(overrides, named):
    with pytest.raises(ConfigError, match=named):
        load_config(None, overrides)


def test_overrides_by_host_name_count_for_its_addresses():
    resolved = resolve_ip_overrides({"localhost": 5, "::ffff:127.0.0.2": 1, "10.0.0.1": 0})
    assert resolved["127.0.0.1"] == 5
    assert resolved["10.0.0.1"] == 0
    assert resolved["127.0.0.2"] == 1  # an IPv4-mapped address counts as the IPv4 one
    assert normal_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert normal_address("::1") == "::1"
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        resolve_ip_overrides({"no-such-host.invalid": 1})


def test_the_broker_wide_creation_rate_delays_the_acceptor_within_one_window():
    rates = CreationRates(max_creation_rate=10, window_num=11, window_size_s=1)
    # A first burst is measured against the whole window (10 windows), as Kafka's Rate does:
    # 100 connections at once are within 10 per second.
    assert all(rates.broker_throttle_ms(0) == 0 for _ in range(100))
    delay = rates.broker_throttle_ms(0)
    assert 0 < delay <= 1000  # bounded by one window, as Kafka's ConnectionQuotas bounds it
    many = [rates.broker_throttle_ms(0) for _ in range(1000)]
    assert max(many) == 1000
    # Once the samples are old enough, the rate is back under the limit.
    assert rates.broker_throttle_ms(60_000) == 0
    assert CreationRates().broker_throttle_ms(0) == 0  # unbounded by default


def test_an_address_over_its_creation_rate_quota_is_refused_and_not_counted():
    rates = CreationRates(window_num=2, window_size_s=1)
    assert rates.ip_throttle_ms("10.0.0.1", 0) == 0  # no IP quota: nothing is measured
    rates.update_ip_quotas(
        {
            (("ip", "10.0.0.1"),): {CONNECTION_CREATION_RATE: 2.0},
            (("ip", None),): {CONNECTION_CREATION_RATE: 100.0},
            (("user", "alice"),): {"producer_byte_rate": 10.0},
        }
    )
    assert rates.ip_quotas == {"10.0.0.1": 2.0, None: 100.0}
    # Two windows of 1 s: 2 per second is 2 connections in the first second (the rate is
    # measured over at least (num - 1) windows, here 1 s).
    assert rates.ip_throttle_ms("10.0.0.1", 0) == 0
    assert rates.ip_throttle_ms("10.0.0.1", 0) == 0
    first_refusal = rates.ip_throttle_ms("10.0.0.1", 0)
    assert 0 < first_refusal <= 1000
    # A refused connection is taken back: the next one is refused by the same amount.
    assert rates.ip_throttle_ms("10.0.0.1", 0) == first_refusal
    # Other addresses have the default quota.
    assert all(rates.ip_throttle_ms("10.0.0.2", 0) == 0 for _ in range(50))
    # The quota removed: the address is free again.
    rates.update_ip_quotas({})
    assert rates.ip_throttle_ms("10.0.0.1", 0) == 0
