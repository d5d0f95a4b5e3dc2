"""The frame fuzzer's CI run: tens of thousands of malformed frames against a real broker
process, with 2,000 idle connections, a 2^31-1 byte frame and half frames, while a
confluent-kafka client produces and consumes (see faults/fuzz.py; FAULTS.md has the full run).

Only correctness is asserted: the broker survives and exits cleanly, every connection that
should still be served is, no normal round trip takes over 5 s (the hang bound), and every
record the normal client produced is read back in order.
"""

import os

from faults.fuzz import parse_args, run

FRAMES = int(os.environ.get("FUZZ_FRAMES", "20000"))
SEED = int(os.environ.get("FUZZ_SEED", "20261122"))


def test_frame_fuzzer_short_run():
    results = run(parse_args(["--frames", str(FRAMES), "--seed", str(SEED), "--idle", "2000"]))
    summary = f"seed {SEED}: {results}"
    assert results["broker_alive_at_end"], summary
    assert results["broker_exit_code"] == 0, summary
    assert results["crashes"] == 0, summary
    assert results["frames"] == FRAMES, summary
    normal = results["normal_client"]
    assert normal["errors"] == [], summary
    assert normal["produced"] > 0, summary
    assert normal["read_back"] == normal["produced"], summary
    assert normal["round_trips_over_5s"] == 0, summary
    assert results["hangs"] == 0, summary
    assert results["idle_connections_answered_at_end"] == 2000, summary
    assert results["frame_of_2^31-1_bytes"].startswith("closed"), summary
    assert results["half_apiversions_completed_at_end"] == "answered", summary
    assert results["half_produce_900kb_completed_at_end"] == "stored", summary
    assert results["ok"], summary
