"""The transaction checker (faults/txn_checker.py) on hand-made histories: a clean one passes,
and each violation Jepsen's Kafka analyses look for is found, alone."""

from __future__ import annotations

import pytest

from faults.txn_checker import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Record,
    Transaction,
    Write,
    check,
)

OUT = "out"
IN = "in"


def txn(name: str, outcome: str, *values: str, partition: int = 0, topic: str = OUT):
    return Transaction(
        name,
        name.split("/")[0],
        outcome,
        [Write(topic, partition, value.encode()) for value in values],
    )


def stored(*entries: tuple[str, int, int, str]) -> list[Record]:
    return [
        Record(topic, partition, offset, value.encode())
        for topic, partition, offset, value in entries
    ]


def clean_history():
    """p1 committed a,b on two partitions, p1 aborted c, p2 committed d; all committed
    records read once."""
    transactions = [
        Transaction("p1/0", "p1", COMMITTED, [Write(OUT, 0, b"a"), Write(OUT, 1, b"b")]),
        txn("p1/1", ABORTED, "c"),
        txn("p2/0", COMMITTED, "d", partition=1),
    ]
    read = stored((OUT, 0, 0, "a"), (OUT, 1, 0, "b"), (OUT, 1, 3, "d"))
    return transactions, read


def kinds_found(verdict) -> set[str]:
    return {kind for kind, count in verdict.counts().items() if count}


def test_a_clean_history_is_clean():
    verdict = check(*clean_history())
    assert verdict.clean, verdict.summary()
    assert (verdict.committed, verdict.aborted, verdict.visible) == (2, 1, 3)


def test_an_aborted_record_read_is_found():
    transactions, read = clean_history()
    read.append(Record(OUT, 0, 5, b"c"))
    assert kinds_found(check(transactions, read)) == {"aborted_reads"}


def test_a_torn_transaction_is_found():
    transactions, read = clean_history()
    read = [r for r in read if r.value != b"b"]
    verdict = check(transactions, read)
    assert kinds_found(verdict) == {"torn", "lost"}
    assert "p1/0" in verdict.torn[0]


def test_a_torn_transaction_of_unknown_outcome_is_found():
    transactions, read = clean_history()
    transactions.append(
        Transaction("p3/0", "p3", UNKNOWN, [Write(OUT, 0, b"e"), Write(OUT, 1, b"f")])
    )
    read.append(Record(OUT, 0, 7, b"e"))
    assert kinds_found(check(transactions, read)) == {"torn"}


def test_an_unknown_outcome_is_either_whole_or_absent():
    transactions, read = clean_history()
    transactions.append(txn("p3/0", UNKNOWN, "e", "f"))
    assert check(transactions, read).clean
    read += stored((OUT, 0, 7, "e"), (OUT, 0, 8, "f"))
    assert check(transactions, read).clean


def test_a_lost_committed_transaction_is_found():
    transactions, read = clean_history()
    read = [r for r in read if r.value != b"d"]
    assert kinds_found(check(transactions, read)) == {"lost"}


def test_a_duplicate_is_found():
    transactions, read = clean_history()
    read.append(Record(OUT, 1, 4, b"d"))
    verdict = check(transactions, read)
    assert kinds_found(verdict) == {"duplicates"}
    assert "out-1@3" in verdict.duplicates[0] and "out-1@4" in verdict.duplicates[0]


def test_a_phantom_is_found():
    transactions, read = clean_history()
    read.append(Record(OUT, 0, 9, b"never-written"))
    assert kinds_found(check(transactions, read)) == {"phantoms"}


def test_a_record_read_on_another_partition_is_a_phantom():
    transactions, read = clean_history()
    read = [r if r.value != b"d" else Record(OUT, 0, 3, b"d") for r in read]
    assert kinds_found(check(transactions, read)) == {"phantoms"}


def stage_history():
    """Input partition in-0 holds x@0, y@1, (aborted data at 2, marker at 3), z@4. Transaction
    s/0 consumed x,y and committed offset 2; s/1 (aborted) consumed z; s/2 consumed z again
    and committed offset 5. Outputs: out-x, out-y, out-z (the aborted try wrote out-z' )."""

    def consumed(*entries):
        return [Record(IN, 0, offset, value.encode()) for offset, value in entries]

    transactions = [
        txn("producer/0", COMMITTED, "x", "y", topic=IN),
        txn("producer/1", ABORTED, "dropped", topic=IN),
        txn("producer/2", COMMITTED, "z", topic=IN),
        Transaction(
            "stage/0",
            "stage",
            COMMITTED,
            [Write(OUT, 0, b"out-x"), Write(OUT, 0, b"out-y")],
            consumed((0, "x"), (1, "y")),
            {(IN, 0): 2},
        ),
        Transaction(
            "stage/1",
            "stage",
            ABORTED,
            [Write(OUT, 0, b"out-z'")],
            consumed((4, "z")),
            {(IN, 0): 5},
        ),
        Transaction(
            "stage/2",
            "stage",
            COMMITTED,
            [Write(OUT, 0, b"out-z")],
            consumed((4, "z")),
            {(IN, 0): 5},
        ),
    ]
    read = stored(
        (IN, 0, 0, "x"),
        (IN, 0, 1, "y"),
        (IN, 0, 4, "z"),
        (OUT, 0, 0, "out-x"),
        (OUT, 0, 1, "out-y"),
        (OUT, 0, 5, "out-z"),
    )
    return transactions, read


def test_a_clean_consume_transform_produce_history_is_clean():
    verdict = check(*stage_history(), group_offsets={(IN, 0): 5})
    assert verdict.clean, verdict.summary()


def test_offsets_not_one_past_the_consumed_records_are_found():
    transactions, read = stage_history()
    transactions[3].offsets = {(IN, 0): 3}
    verdict = check(transactions, read)
    assert kinds_found(verdict) == {"offset_mismatches"}
    assert any(
        "up to offset 1 but committed offset 3" in line for line in verdict.offset_mismatches
    )


def test_an_input_processed_twice_is_found():
    """Two committed transactions both consumed z: the second one's range starts past it."""
    transactions, read = stage_history()
    transactions[4].outcome = COMMITTED  # stage/1 committed too, with out-z'
    read.append(Record(OUT, 0, 3, b"out-z'"))
    verdict = check(transactions, read)
    assert kinds_found(verdict) == {"offset_mismatches"}


def test_an_input_skipped_is_found():
    transactions, read = stage_history()
    # stage/0 consumed only x but committed past y.
    transactions[3].consumed = transactions[3].consumed[:1]
    transactions[3].writes = transactions[3].writes[:1]
    read = [r for r in read if r.value != b"out-y"]
    verdict = check(transactions, read)
    assert kinds_found(verdict) == {"offset_mismatches"}


def test_group_offsets_other_than_the_last_commit_are_found():
    verdict = check(*stage_history(), group_offsets={(IN, 0): 2})
    assert kinds_found(verdict) == {"offset_mismatches"}


def test_a_history_writing_a_value_twice_is_refused():
    with pytest.raises(ValueError, match="twice"):
        check([txn("a/0", COMMITTED, "v"), txn("a/1", COMMITTED, "v")], [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        # Java's hashCode is Integer.MIN_VALUE here; Kafka's Utils.abs makes it 0.
        ("polygenelubricants", 0),
        ("é", 233),  # one UTF-16 code unit
        ("😀", 0xD83D * 31 + 0xDE00),  # two UTF-16 code units (a surrogate pair)
        # Negative hashes (Java's String.hashCode: -1,774,587,604 and -110,434,995):
        # Utils.abs is the absolute value, where "& 0x7fffffff" gave 372,896,044 and
        # 2,037,048,653 (__transaction_state partitions 44 and 3 of 50, not 4 and 45).
        ("transactional-id-42", 1774587604),
        ("txn-producer-abc-0", 110434995),
    ],
)
def test_java_string_hash_is_javas(text, expected):
    """The workload finds a transactional id's coordinator as Kafka does:
    Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions."""
    from faults.txn_workload import java_string_hash

    assert java_string_hash(text) == expected
