"""SCRAM users created through any broker are stored by the controller and reach every broker:
each one authenticates them on its SASL_SSL listener, a broker that was down while a user was
created learns it when it rejoins, and a deleted user is refused everywhere."""

from __future__ import annotations

import re
import shutil

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from minibroker.protocol import sasl
from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import CONVERGENCE_TIMEOUT
from tests.conftest import run_until_said, wait_for

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

PASSWORD = "user-secret"


def scram_login(cluster: Cluster, broker: BrokerProcess, user: str) -> str:
    """kcat -L as USER with SCRAM-SHA-512 on the broker's INTERNAL (SASL_SSL) listener:
    "listed" when it lists the cluster, "refused" as soon as librdkafka reports the broker's
    SCRAM refusal (having listed nothing; kcat itself would wait out its whole -m timeout),
    "failed" otherwise (the broker not reachable yet, say)."""
    ca = cluster.controller.log_dir.parent / "certs" / "ca.pem"
    command = [
        *("kcat", "-L", "-m", "10", "-b", f"127.0.0.1:{broker.extra_listeners['INTERNAL']}"),
        *("-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={ca}"),
        *("-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={user}"),
        *("-X", f"sasl.password={PASSWORD}"),
    ]
    refusal = re.escape(sasl.scram_failed(sasl.SCRAM_SHA_512))
    exit_code, listed, stderr = run_until_said(command, refusal, 30)
    if exit_code == 0:
        return "listed"
    if re.search(refusal, stderr):
        assert listed == "", listed
        return "refused"
    return "failed"


def alter(admin: AdminClient, alteration) -> None:
    futures = admin.alter_user_scram_credentials([alteration])
    futures[alteration.user].result(timeout=CONVERGENCE_TIMEOUT)


def test_scram_users_reach_every_broker(sasl_ssl_cluster: Cluster):
    cluster = sasl_ssl_cluster
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    alter(admin, UserScramCredentialUpsertion("carol", info, PASSWORD.encode()))
    for broker in cluster.brokers.values():
        assert scram_login(cluster, broker, "carol") == "listed", f"broker {broker.node_id}"

    absent = cluster.brokers[3]
    absent.stop()
    # A new admin client: the old one may have learned its controller from broker 3's
    # Metadata (a KRaft-mode broker names itself, as Kafka names a random live broker), and
    # librdkafka would wait for that broker to come back before sending the alteration.
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    alter(admin, UserScramCredentialUpsertion("dave", info, PASSWORD.encode()))
    absent.restart()
    absent.wait_ready()
    # The rejoined broker gets every credential from the controller when it registers.
    wait_for(
        lambda: scram_login(cluster, absent, "dave") == "listed",
        CONVERGENCE_TIMEOUT,
        "the user created while broker 3 was down to log in on it",
    )

    alter(admin, UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512))
    for broker in cluster.brokers.values():
        assert scram_login(cluster, broker, "carol") == "refused", f"broker {broker.node_id}"
