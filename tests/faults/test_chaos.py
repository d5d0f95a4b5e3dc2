"""The CI-sized fault runs: each fault kind once against a cluster in network namespaces,
with an idempotent acks=all producer and a checking consumer (faults/chaos.py), with a
controller process and on ZooKeeper."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from faults.chaos import FIU_RUN, KINDS, LIBFAKETIME, ZOOKEEPER_FAULTS, run_chaos
from minibroker.tools.launcher import zookeeper_installed

NEEDS_NAMESPACES = os.geteuid() != 0 or shutil.which("ip") is None


@pytest.mark.skipif(
    NEEDS_NAMESPACES or not LIBFAKETIME.exists() or FIU_RUN is None,
    reason="needs root, iproute2 (network namespaces, tmpfs), libfaketime and libfiu (fiu-utils)",
)
def test_every_fault_kind_once_loses_nothing(tmp_path):
    seed = random.randrange(2**31)
    outcome = run_chaos(len(KINDS), seed, KINDS, base=tmp_path)
    print(outcome.text)
    assert outcome.acknowledged > 0
    assert outcome.clean, (
        f"seed {seed} (replay: python -m faults.chaos --seed {seed}):\n{outcome.text}"
    )


@pytest.mark.skipif(
    NEEDS_NAMESPACES or not zookeeper_installed(),
    reason="needs root, iproute2 (network namespaces, tmpfs) and ZooKeeper (zookeeper package)",
)
def test_every_zookeeper_fault_once_loses_nothing(tmp_path):
    """The controller broker killed, ZooKeeper killed, the controller cut off from ZooKeeper:
    each once, and the cluster must lose nothing and return to a full ISR."""
    seed = random.randrange(2**31)
    outcome = run_chaos(
        len(ZOOKEEPER_FAULTS), seed, ZOOKEEPER_FAULTS, base=tmp_path, zookeeper=True
    )
    print(outcome.text)
    assert outcome.acknowledged > 0
    assert outcome.clean, (
        f"seed {seed} (replay: python -m faults.chaos --zookeeper"
        f" --kinds {','.join(ZOOKEEPER_FAULTS)} --seed {seed}):\n{outcome.text}"
    )
