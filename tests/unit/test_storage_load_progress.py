"""What the log manager says while it opens (and maybe recovers) many logs: a first line when
it recovers, a progress line every few seconds, a last line with the count and the time."""

import logging

from minibroker.storage.log_manager import _LoadProgress


class FakeLog:
    size_bytes = 2_000_000


def test_progress_is_reported_every_few_seconds_and_at_the_end(caplog):
    now = [100.0]
    caplog.set_level(logging.INFO, logger="storage.log_manager")
    progress = _LoadProgress(10, recovering=True, clock=lambda: now[0])
    logs = {}
    for index in range(10):
        progress.next_partition(logs)
        logs[("t", index)] = FakeLog()
        now[0] += 1.5  # each partition takes 1.5 s to recover
    progress.done(logs)
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("recovering 10 partition log(s) after an unclean shutdown")
    assert lines[1:-1] == [
        "recovering logs: 4/10 partitions done, 8.0 MB, 6 s so far",
        "recovering logs: 8/10 partitions done, 16.0 MB, 12 s so far",
    ]
    assert lines[-1] == "recovered 10 partition log(s) (20.0 MB) in 15.0 s"


def test_a_clean_start_says_loaded_once(caplog):
    caplog.set_level(logging.INFO, logger="storage.log_manager")
    progress = _LoadProgress(2, recovering=False, clock=lambda: 0.0)
    logs = {}
    for index in range(2):
        progress.next_partition(logs)
        logs[("t", index)] = FakeLog()
    progress.done(logs)
    assert [r.getMessage() for r in caplog.records] == [
        "loaded 2 partition log(s) (4.0 MB) in 0.0 s"
    ]
