"""The CI-sized transactional fault runs: each fault kind once (and kill -9 of a transaction
coordinator) under the transactional workload (faults/txn_workload.py: transactional
producers, a consume-transform-produce stage, random aborts), judged by faults/txn_checker.py.

Skipped, with the broker's answer as the reason, while the cluster refuses transactional ids
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED): the test turns itself on once minibroker serves
transactions."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from faults.chaos import FIU_RUN, LIBFAKETIME, TXN_KINDS, TransactionsNotServed, run_chaos

NEEDS_NAMESPACES = os.geteuid() != 0 or shutil.which("ip") is None


@pytest.mark.skipif(
    NEEDS_NAMESPACES or not LIBFAKETIME.exists() or FIU_RUN is None,
    reason="needs root, iproute2 (network namespaces, tmpfs), libfaketime and libfiu (fiu-utils)",
)
def test_every_fault_kind_once_under_transactions_breaks_no_transaction(tmp_path):
    seed = random.randrange(2**31)
    try:
        outcome = run_chaos(
            len(TXN_KINDS), seed, TXN_KINDS, base=tmp_path, workload="transactional"
        )
    except TransactionsNotServed as refused:
        pytest.skip(f"the cluster does not serve transactions: {refused}")
    print(outcome.text)
    assert outcome.acknowledged > 0, outcome.text
    assert outcome.clean, (
        f"seed {seed} (replay: python -m faults.chaos --workload transactional"
        f" --kinds {','.join(TXN_KINDS)} --seed {seed}):\n{outcome.text}"
    )
