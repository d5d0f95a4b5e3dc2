"""KIP-368 between nodes: with connections.max.reauth.ms on the SASL_SSL inter-broker listener,
the brokers' fetchers and the controller's channels log in again on their open connections
before their sessions expire; replication goes on without a reconnection."""

from __future__ import annotations

import re
from pathlib import Path

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    _check_clean_stop,
    create_replicated_topic,
    replicas_of,
    secured_inter_broker_overrides,
)
from tests.conftest import wait_for
from tests.security_setup import Certificates

REAUTH_MS = 2000
TOPIC = "reauthenticated"
LOGIN = re.compile(r"\[sasl\] (re-)?authenticated User:\S+ with SCRAM-SHA-512 on listener INTERNAL")


def logins(cluster: Cluster) -> tuple[int, int]:
    """(first logins, re-authentications) on every broker's INTERNAL listener so far."""
    first = renewed = 0
    for broker in cluster.brokers.values():
        for match in LOGIN.finditer(broker.stderr_path.read_text(errors="replace")):
            if match.group(1):
                renewed += 1
            else:
                first += 1
    return first, renewed


def test_inter_broker_connections_re_authenticate_in_place(tmp_path: Path):
    certificates = Certificates.make(tmp_path / "certs")
    overrides = {
        **CLUSTER_OVERRIDES,
        **secured_inter_broker_overrides(certificates),
        "listener.name.internal.connections.max.reauth.ms": str(REAUTH_MS),
    }
    cluster = Cluster.start(
        tmp_path, brokers=BROKERS, overrides=overrides, broker_listeners={"INTERNAL": None}
    )
    try:
        create_replicated_topic(cluster, TOPIC, 1)
        replicas = replicas_of(cluster, TOPIC, 0)
        cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
        with BackgroundProducer(cluster.bootstrap, TOPIC, 1) as producer:
            producer.wait_for_acks(100)
            first, renewed = logins(cluster)
            # Every fetcher (two followers) renews at least twice: 4+ lifetimes at most.
            wait_for(
                lambda: logins(cluster)[1] >= renewed + 4,
                timeout=CONVERGENCE_TIMEOUT,
                what="inter-broker re-authentications",
            )
            acked = len(producer.acked)
            producer.wait_for_acks(acked + 100)
        # No session lapsed: no connection was closed and opened again with a first login.
        assert logins(cluster)[0] == first
        cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
        closed = [
            broker.node_id
            for broker in cluster.brokers.values()
            if "SASL session expired" in broker.stderr_path.read_text(errors="replace")
        ]
        assert not closed, f"brokers closed expired sessions: {closed}"
    finally:
        _check_clean_stop(cluster)
