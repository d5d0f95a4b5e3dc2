"""The frame fuzzer's CI run: tens of thousands of malformed frames against a real broker
process, with 2,000 idle connections, a 2^31-1 byte frame and half frames, while a
confluent-kafka client produces and consumes (see faults/fuzz.py; docs/faults.md has the full run).

Only correctness is asserted: the broker survives and exits cleanly, every connection that
should still be served is, no normal round trip takes over HANG_SECONDS (the hang bound), and
every record the normal client produced is read back in order.

The hang bound is there to tell a broker that stops serving the normal client while it is
fuzzed (its loop blocked by a frame, its connection starved by the fuzzers') from one that
keeps serving it. It is not a latency figure: on a quiet machine the full run's round trips
have a p99 of 10 ms and a maximum of 0.46 s (docs/faults.md), but on the 2-core CI under a load
average of ~19 round trips of 7.7 s and 9.6 s were seen (each completed), against the full
run's 5 s. So 20 s here, twice the worst seen: a broker that stalls
a connection for that long still fails, and one that stops serving it for good fails on the
normal client's own 30 s limit (its errors).
"""

import os

from faults.fuzz import parse_args, run

FRAMES = int(os.environ.get("FUZZ_FRAMES", "20000"))
SEED = int(os.environ.get("FUZZ_SEED", "20261122"))
HANG_SECONDS = 20.0


def test_frame_fuzzer_short_run():
    results = run(
        parse_args(
            [
                "--frames",
                str(FRAMES),
                "--seed",
                str(SEED),
                "--idle",
                "2000",
                "--hang-seconds",
                str(HANG_SECONDS),
            ]
        )
    )
    summary = f"seed {SEED}: {results}"
    assert results["broker_alive_at_end"], summary
    assert results["broker_exit_code"] == 0, summary
    assert results["crashes"] == 0, summary
    assert results["frames"] == FRAMES, summary
    normal = results["normal_client"]
    assert normal["errors"] == [], summary
    assert normal["produced"] > 0, summary
    assert normal["read_back"] == normal["produced"], summary
    assert normal["hang_seconds"] == HANG_SECONDS, summary
    assert normal["round_trips_over_hang_seconds"] == 0, summary
    assert results["hangs"] == 0, summary
    assert results["idle_connections_answered_at_end"] == 2000, summary
    assert results["frame_of_2^31-1_bytes"].startswith("closed"), summary
    assert results["half_apiversions_completed_at_end"] == "answered", summary
    assert results["half_produce_900kb_completed_at_end"] == "stored", summary
    assert results["ok"], summary
