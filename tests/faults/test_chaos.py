"""The CI-sized fault run: each fault kind once against a cluster in network namespaces,
with an idempotent acks=all producer and a checking consumer (faults/chaos.py)."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from faults.chaos import KINDS, LIBFAKETIME, run_chaos

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or not LIBFAKETIME.exists(),
    reason="needs root, iproute2 (network namespaces, tmpfs) and libfaketime",
)


def test_every_fault_kind_once_loses_nothing(tmp_path):
    seed = random.randrange(2**31)
    outcome = run_chaos(len(KINDS), seed, KINDS, base=tmp_path)
    print(outcome.text)
    assert outcome.acknowledged > 0
    assert outcome.clean, (
        f"seed {seed} (replay: python -m faults.chaos --seed {seed}):\n{outcome.text}"
    )
