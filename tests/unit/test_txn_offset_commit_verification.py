"""The TxnOffsetCommit handler asks the transaction coordinator whether the group's
`__consumer_offsets` partition is in the transaction (KIP-890), before the group coordinator
writes anything; a refusal answers every partition (Kafka's maybeConvertOffsetCommitError).
A stand-in context holds the parts the handler reads."""

from types import SimpleNamespace

import trio
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from minibroker.apis.txn_offsets import handle_txn_offset_commit
from minibroker.coordinator.group.service import OFFSETS_TOPIC
from minibroker.protocol.errors import Error


class Coordinators:
    def __init__(self, verdict: Error) -> None:
        self.verdict = verdict
        self.verified: list = []
        self.committed: list = []

    async def verify_transaction(self, transactional_id, producer_id, epoch, partitions, add=False):
        self.verified.append((transactional_id, producer_id, epoch, partitions))
        return dict.fromkeys(partitions, self.verdict)

    def check(self, group_id):
        return Error.NONE

    def partition_of(self, group_id):
        return 7

    async def commit_transactional_offsets(self, request):
        self.committed.append(request)
        return dict.fromkeys(request.offsets, Error.NONE)


def context(coordinators: Coordinators):
    topic = SimpleNamespace(partitions={0: None})
    metadata = SimpleNamespace(topic=lambda name: topic if name == "t" else None)
    return SimpleNamespace(
        authorizer=None,
        version=3,
        replica_manager=SimpleNamespace(metadata=metadata),
        group_coordinator=coordinators,
        transaction_coordinator=coordinators,
    )


def request():
    return TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=5,
        producer_epoch=1,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            TxnOffsetCommitRequestTopic(
                name="t",
                partitions=(
                    TxnOffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=9,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def errors(answer) -> dict:
    return {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in answer["topics"]
        for p in t["partitions"]
    }


def run(verdict: Error) -> tuple[dict, Coordinators]:
    coordinators = Coordinators(verdict)
    answer = trio.run(handle_txn_offset_commit, context(coordinators), request())
    return errors(answer), coordinators


def test_a_verified_transaction_commits():
    answer, coordinators = run(Error.NONE)
    assert answer == {("t", 0): Error.NONE}
    assert coordinators.verified == [("tx", 5, 1, [(OFFSETS_TOPIC, 7)])]
    assert len(coordinators.committed) == 1


def test_a_partition_not_in_the_transaction_is_refused_and_nothing_written():
    answer, coordinators = run(Error.INVALID_TXN_STATE)
    assert answer == {("t", 0): Error.INVALID_TXN_STATE}
    assert coordinators.committed == []
    answer, _ = run(Error.NETWORK_EXCEPTION)
    assert answer == {("t", 0): Error.COORDINATOR_LOAD_IN_PROGRESS}
