"""SCRAM users created through any broker are stored by the controller and reach every broker:
each one authenticates them on its SASL_SSL listener, a broker that was down while a user was
created learns it when it rejoins, and a deleted user is refused everywhere."""

from __future__ import annotations

import shutil
import subprocess

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
from tests.conftest import wait_for

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

PASSWORD = "user-secret"


def scram_login(cluster: Cluster, broker: BrokerProcess, user: str):
    """kcat -L as USER with SCRAM-SHA-512 on the broker's INTERNAL (SASL_SSL) listener."""
    ca = cluster.controller.log_dir.parent / "certs" / "ca.pem"
    return subprocess.run(
        [
            "kcat",
            "-L",
            "-m",
            "10",
            "-b",
            f"127.0.0.1:{broker.extra_listeners['INTERNAL']}",
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            f"ssl.ca.location={ca}",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-512",
            "-X",
            f"sasl.username={user}",
            "-X",
            f"sasl.password={PASSWORD}",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )


def alter(admin: AdminClient, alteration) -> None:
    futures = admin.alter_user_scram_credentials([alteration])
    futures[alteration.user].result(timeout=CONVERGENCE_TIMEOUT)


def refused(login) -> bool:
    return login.returncode != 0 and sasl.scram_failed(sasl.SCRAM_SHA_512) in login.stderr.decode()


def test_scram_users_reach_every_broker(sasl_ssl_cluster: Cluster):
    cluster = sasl_ssl_cluster
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    alter(admin, UserScramCredentialUpsertion("carol", info, PASSWORD.encode()))
    for broker in cluster.brokers.values():
        login = scram_login(cluster, broker, "carol")
        assert login.returncode == 0, f"broker {broker.node_id}: {login.stderr.decode()}"

    absent = cluster.brokers[3]
    absent.stop()
    alter(admin, UserScramCredentialUpsertion("dave", info, PASSWORD.encode()))
    absent.restart()
    absent.wait_ready()
    # The rejoined broker gets every credential from the controller when it registers.
    wait_for(
        lambda: scram_login(cluster, absent, "dave").returncode == 0,
        CONVERGENCE_TIMEOUT,
        "the user created while broker 3 was down to log in on it",
    )

    alter(admin, UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512))
    for broker in cluster.brokers.values():
        assert refused(scram_login(cluster, broker, "carol")), f"broker {broker.node_id}"
