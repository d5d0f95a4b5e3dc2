"""A broker restarted after a kill -9 says that it is recovering its logs, and how much it
recovered; after a clean stop it says it loaded them."""

from __future__ import annotations

import re

from minibroker.tools.launcher import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_durability import numbered_values, produce

PARTITIONS = 4


def log_since_last_launch(broker: BrokerProcess) -> str:
    return broker.stderr_path.read_text().rsplit("--- launcher:", 1)[1]


def test_a_broker_recovering_after_kill_9_logs_its_recovery(broker: BrokerProcess):
    create_topic(broker.bootstrap, "recovering", PARTITIONS)
    produce(broker, "recovering", numbered_values(0, 2_000))

    broker.kill()
    broker.restart()
    broker.wait_ready()
    text = log_since_last_launch(broker)
    started = re.search(r"recovering (\d+) partition log\(s\) after an unclean shutdown", text)
    assert started, text[-3000:]
    assert int(started.group(1)) >= PARTITIONS
    finished = re.search(r"recovered (\d+) partition log\(s\) \(([\d.,]+) MB\) in [\d.]+ s", text)
    assert finished, text[-3000:]
    assert int(finished.group(1)) == int(started.group(1))
    assert float(finished.group(2).replace(",", "")) > 0.2  # the 2,000 records of ~120 bytes

    broker.restart()  # a clean stop this time: nothing to recover
    broker.wait_ready()
    text = log_since_last_launch(broker)
    assert "unclean shutdown" not in text
    assert re.search(r"loaded \d+ partition log\(s\)", text), text[-3000:]
