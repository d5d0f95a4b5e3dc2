"""The source's pure parts, without Spark or a broker: option parsing as Spark hands options
over (lowercased), offset JSON in a fixed order, range splitting and the rate limit."""

from __future__ import annotations

import gc
import json

import pytest

from minibroker.spark.kafka import OffsetRange, cyclic_gc_paused, split_ranges
from minibroker.spark.options import OptionError, read_options
from minibroker.spark.source import decode_offsets, encode_offsets, rate_limit

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_options_arrive_lowercased_and_are_still_found():
    options = read_options(
        {
            **BASE,
            "maxoffsetspertrigger": "500",
            "minpartitions": "4",
            "failondataloss": "false",
            "includeheaders": "true",
            "startingoffsets": '{"t":{"0":5}}',
        },
        streaming=True,
    )
    assert options.max_offsets_per_trigger == 500
    assert options.min_partitions == 4
    assert options.fail_on_data_loss is False
    assert options.include_headers is True
    assert options.starting.offsets == {"t": {0: 5}}
    assert options.kafka == {
        "bootstrap.servers": "127.0.0.1:9092",
        "isolation.level": "read_uncommitted",
    }


@pytest.mark.parametrize(
    ("extra", "streaming", "named"),
    [
        ({"endingOffsets": "latest"}, True, "endingOffsets"),
        ({"maxOffsetsPerTrigger": "-3"}, True, "maxOffsetsPerTrigger"),
        ({"startingTimestamp": "yesterday"}, False, "startingTimestamp"),
        ({"kafka.isolation.level": "dirty"}, False, "kafka.isolation.level"),
        ({"subscribe": "", "subscribePattern": "("}, False, "subscribePattern"),
        ({"startingOffsets": '{"t": {"0": "five"}}'}, False, "startingOffsets"),
    ],
)
def test_bad_options_name_the_option(extra, streaming, named):
    with pytest.raises(OptionError, match=f"option.? {named}"):
        read_options({**BASE, **extra}, streaming=streaming)


def test_offsets_json_has_a_fixed_order():
    offsets = {("b", 10): 1, ("b", 2): 2, ("a", 0): 3}
    encoded = encode_offsets(offsets)
    assert json.dumps(encoded) == '{"a": {"0": 3}, "b": {"2": 2, "10": 1}}'
    assert decode_offsets(json.loads(json.dumps(encoded))) == offsets


def test_ranges_split_in_proportion_and_cover_exactly():
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 50, 150), OffsetRange("t", 2, 7, 7)]
    assert split_ranges(ranges, None) == ranges[:2]
    # Largest first (Spark starts tasks in partition order); ties keep their order.
    skewed = [OffsetRange("t", p, 0, n) for p, n in enumerate([227, 251, 340, 182, 251])]
    assert [r.partition for r in split_ranges(skewed, None)] == [2, 1, 4, 0, 3]
    pieces = split_ranges(ranges, 10)
    assert len(pieces) >= 10
    for partition, (start, end) in {0: (0, 900), 1: (50, 150)}.items():
        mine = sorted((p.start, p.end) for p in pieces if p.partition == partition)
        assert mine[0][0] == start and mine[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:], strict=False))


def test_rate_limit_shares_by_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 1000, ("t", 1): 200, ("t", 2): 5}
    limited = rate_limit(start, latest, 110)
    assert limited == {("t", 0): 100, ("t", 1): 110, ("t", 2): 5}
    assert rate_limit(start, latest, 5000) == latest


def test_rate_limit_gives_a_starving_partition_one_record_as_spark_does():
    """KafkaMicroBatchStream.rateLimit: a share below one is rounded up ("don't completely
    starve small topicpartitions"), so a batch can exceed the limit by one per such
    partition: 2,998 + 1 + 1 records under a limit of 400 give 399 + 1 + 1."""
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 2998, ("t", 1): 1, ("t", 2): 1}
    limited = rate_limit(start, latest, 400)
    assert limited == {("t", 0): 399, ("t", 1): 1, ("t", 2): 1}
    assert sum(limited.values()) == 401


def test_the_collector_is_paused_only_inside_the_block_and_left_as_found():
    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), cyclic_gc_paused():
        raise ValueError("a read that fails")
    assert gc.isenabled()
    gc.disable()  # an application that runs without the collector keeps it off
    try:
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
