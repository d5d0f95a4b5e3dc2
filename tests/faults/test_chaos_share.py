"""The CI-sized share-group fault run: kill -9 of the share coordinator of the workload's share
partition 0 under the share workload (faults/share_workload.py: a producer and three
confluent-kafka ShareConsumers of one group with a DLQ, acknowledging ACCEPT, RELEASE, REJECT,
poison records RELEASEd to the delivery limit), judged by faults/share_checker.py: every
record accepted or archived into the DLQ, none delivered again after an acknowledged ACCEPT or
REJECT, no delivery count above the limit. The campaign (every fault kind, 100 runs) is the
command in docs/faults.md."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from faults.chaos import LIBFAKETIME, run_chaos

NEEDS_NAMESPACES = os.geteuid() != 0 or shutil.which("ip") is None


@pytest.mark.skipif(
    NEEDS_NAMESPACES or not LIBFAKETIME.exists(),
    reason="needs root, iproute2 (network namespaces, tmpfs) and libfaketime",
)
def test_the_share_coordinator_killed_loses_no_record_and_accepts_none_twice(tmp_path):
    seed = random.randrange(2**31)
    kinds = ("kill-share-coordinator",)
    outcome = run_chaos(1, seed, kinds, base=tmp_path, workload="share")
    print(outcome.text)
    assert outcome.acknowledged > 0, outcome.text
    assert outcome.violations, outcome.text  # the share checker judged the run
    assert outcome.clean, (
        f"seed {seed} (replay: python -m faults.chaos --workload share"
        f" --kinds {','.join(kinds)} --runs 1 --seed {seed}):\n{outcome.text}"
    )
