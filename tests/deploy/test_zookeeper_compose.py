"""docker-compose.zookeeper.yml: a valid compose file whose brokers' properties run the
ZooKeeper mode against the compose ensemble."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from minibroker.common.config import load_config

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.zookeeper.yml"


def test_zookeeper_compose_file_is_valid():
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    result = subprocess.run(
        [compose, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_every_broker_may_be_controller_through_the_ensemble():
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    ensemble = sorted(name for name in services if name.startswith("zookeeper-"))
    brokers = sorted(name for name in services if name.startswith("broker-"))
    assert len(ensemble) == 3 and len(brokers) == 3
    for name in brokers:
        (properties_file,) = services[name]["command"]
        config = load_config(REPO / "config" / "zookeeper" / properties_file, [])
        assert config.zookeeper_mode and not config.is_controller
        hosts = config.zookeeper_connect.partition("/")[0].split(",")
        assert sorted(host.partition(":")[0] for host in hosts) == ensemble
        assert config.inter_broker_listener.host == name
