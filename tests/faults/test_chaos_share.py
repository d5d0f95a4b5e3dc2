"""The CI-sized share-group fault run: kill -9 of the share coordinator of the workload's share
partition 0 under the share workload (faults/share_workload.py: a producer and three
confluent-kafka ShareConsumers of one group with a DLQ, acknowledging ACCEPT, RELEASE, REJECT,
poison records RELEASEd to the delivery limit), judged by faults/share_checker.py: every
record accepted or archived into the DLQ, none delivered again after an acknowledged ACCEPT or
REJECT, no delivery count above the limit, and the replicas identical. Whether every ISR was
full again within 90 s is tests/faults/test_chaos.py's to judge, not this test's: on a loaded
machine the brokers keep missing their 3 s sessions and the ISRs flap long after the fault,
while the share group's guarantees must hold all the same. The campaign (every fault kind) is
the command in docs/faults.md."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from faults.chaos import LIBFAKETIME, run_chaos

NEEDS_NAMESPACES = os.geteuid() != 0 or shutil.which("ip") is None


# Not in CI yet: the first campaign (docs/faults.md, "Fault injection under share groups")
# found records delivered again after an acknowledged ACCEPT (a retried initialization of the
# group's share partitions wiped their state; explained and fixed there); whether this run
# joins CI is left to its cost.
OPT_IN = os.environ.get("MINIBROKER_SHARE_CHAOS") == "1"


@pytest.mark.skipif(
    not OPT_IN,
    reason="run by hand with MINIBROKER_SHARE_CHAOS=1: not in CI yet (its cost; the first"
    " campaign's violation is fixed, docs/faults.md)",
)
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
    judged = (
        not any(outcome.violations.values())
        and not outcome.unread
        and not outcome.lost
        and not outcome.divergent
    )
    assert judged, (
        f"seed {seed} (replay: python -m faults.chaos --workload share"
        f" --kinds {','.join(kinds)} --runs 1 --seed {seed}):\n{outcome.text}"
    )
