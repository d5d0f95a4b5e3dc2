"""The command line: a bad configuration stops the start with a message naming the key."""

import subprocess
import sys


def run_serve(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    arguments = [sys.executable, "-m", "broker", "serve", "--override", f"log.dirs={tmp_path}"]
    for override in overrides:
        arguments += ["--override", override]
    return subprocess.run(arguments, capture_output=True, text=True, timeout=30, check=False)


def test_invalid_value_names_the_key_and_stops(tmp_path):
    finished = run_serve(tmp_path, "num.partitions=many")
    assert finished.returncode == 2
    assert "num.partitions" in finished.stderr
    assert not (tmp_path / "meta.properties").exists(), "nothing may start on a bad config"


def test_properties_file_that_cannot_be_read(tmp_path):
    finished = subprocess.run(
        [sys.executable, "-m", "broker", "serve", str(tmp_path / "missing.properties")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert finished.returncode == 2
    assert "missing.properties" in finished.stderr


def test_a_log_dir_in_use_is_refused(broker):
    finished = run_serve(
        broker.log_dir, "listeners=PLAINTEXT://127.0.0.1:0", f"node.id={broker.node_id}"
    )
    assert finished.returncode == 1
    assert "lock" in finished.stderr.lower()
