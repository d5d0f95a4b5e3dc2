"""`python -m faults.streams_eos`: Kafka Streams 4.4's word count with `group.protocol=streams`
(KIP-1071), `processing.guarantee=exactly_once_v2` and one standby replica per task, on a
3-broker minibroker cluster and on a 3-node Apache Kafka 4.4 cluster (bench/kafka_ref.py) in
the same run, with the same program, the same lines and the same steps (java/fetch.sh first).

The steps, on each system: three instances (tests/java/programs/StreamsGroupInstance.java)
count the first lines; one is killed with SIGKILL (kill -9 of its JVM) while it holds open
transactions; more lines are produced; the survivors must own every task, the killed
instance's tasks going to members that held their standbys; the killed instance restarts from
its state directory; a fourth instance joins; the last lines are produced; all stop.

What is checked, on each system: the output's last count per word is the exact count of every
line; each word's committed updates (read_committed) are 1, 2, ..., its count, each once (no
duplicate from a replayed transaction, none lost); the changelog's last value per word is the
same count; the tasks the killed instance held went to the survivors that held their standbys.
One line per system gives the outcome and the seconds from the kill to the survivors owning
every task (the group's session timeout, 6 s here, dominates). Exit status 0 when both systems
pass every check.

The group's streams.session.timeout.ms (6000) and streams.heartbeat.interval.ms (1000) are
set on the group before the first instance starts (IncrementalAlterConfigs on the GROUP
resource) with the brokers' group.streams.min.* properties lowered to allow them, on both
systems alike; streams.num.standby.replicas is 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_ref import KafkaCluster, classpath, java_executable, missing_reason
from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire

HERE = Path(__file__).resolve().parent
PROGRAM = HERE.parent / "tests" / "java" / "programs" / "StreamsGroupInstance.java"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
         "kappa", "lambda", "mu"]  # fmt: skip
TASKS = {f"{sub}_{partition}" for sub in (0, 1) for partition in range(3)}
# Subtopology 1 holds the counts' store: only its tasks have standbys.
STATEFUL = {f"1_{partition}" for partition in range(3)}
GROUP_OVERRIDES = {
    "group.streams.min.session.timeout.ms": 6000,
    "group.streams.min.heartbeat.interval.ms": 1000,
}
GROUP_CONFIGS = {
    "streams.num.standby.replicas": "1",
    "streams.session.timeout.ms": "6000",
    "streams.heartbeat.interval.ms": "1000",
}
DEADLINE_S = 180.0


def lines(count: int, seed: int) -> list[str]:
    return [
        " ".join(WORDS[(seed + i * 3 + j * 5) % len(WORDS)] for j in range(1 + (i + seed) % 4))
        for i in range(count)
    ]


def expected(produced: list[str]) -> dict[str, int]:
    return dict(Counter(word for line in produced for word in line.split()))


def produce(bootstrap: str, topic: str, produced: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, line in enumerate(produced):
        producer.produce(topic, key=f"line-{i}", value=line)
    if producer.flush(30) != 0:
        raise RuntimeError(f"lines to {topic} not acknowledged")


def read_committed(bootstrap: str, topic: str, wanted: dict[str, int]) -> dict[str, list[int]]:
    """Every committed record of ``topic`` from the start until the last value per key is
    ``wanted`` (or the deadline): key -> its values in offset order (the last 8 bytes of a
    value: a Long, or a timestamped store's changelog value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    updates: dict[str, list[int]] = {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline and {w: v[-1] for w, v in updates.items()} != wanted:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = int.from_bytes(message.value()[-8:], "big", signed=True)
            updates.setdefault(message.key().decode(), []).append(value)
    finally:
        consumer.close()
    return updates


class Instance:
    """One application instance as a child JVM (its own process: SIGKILL reaches the JVM),
    with its processing guarantee and group protocol (bench.streams_pause runs it with
    at_least_once, and with the classic protocol too)."""

    def __init__(
        self,
        command: Callable[..., list[str]],
        bootstrap: str,
        app: str,
        work: Path,
        guarantee: str = "exactly_once_v2",
        protocol: str = "streams",
    ):
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "streams.log"
        self.process = subprocess.Popen(
            command("run", bootstrap, app, f"in-{app}", f"out-{app}", str(work / "state"),
                    guarantee, protocol),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log.open("a"), text=True,
        )  # fmt: skip

    def wait_for(self, prefix: str) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("ERROR"):
                raise RuntimeError(line + self.log.read_text()[-4000:])
            if line.startswith(prefix):
                return
        raise RuntimeError(f"instance ended before {prefix!r}:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.wait_for("CLOSED")
        self.process.wait(60)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def describe(command: Callable[..., list[str]], bootstrap: str, app: str) -> dict:
    done = subprocess.run(
        command("describe", bootstrap, app), capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        return {"state": "?", "members": []}
    return json.loads(done.stdout.strip().splitlines()[-1])


def wait_for_assignment(
    command: Callable[..., list[str]], bootstrap: str, app: str, members: int
) -> dict:
    """StreamsGroupDescribe until ``members`` members own every task once, each stateful task
    with a standby on another member (with one member: no standbys to place)."""
    deadline = time.monotonic() + DEADLINE_S
    described: dict = {}
    while time.monotonic() < deadline:
        described = describe(command, bootstrap, app)
        owned = sorted(t for m in described["members"] for t in m["active"])
        standby = sorted(t for m in described["members"] for t in m["standby"])
        apart = all(not set(m["active"]) & set(m["standby"]) for m in described["members"])
        if (
            described["state"].upper() == "STABLE"
            and len(described["members"]) == members
            and owned == sorted(TASKS)
            and (members == 1 or (standby == sorted(STATEFUL) and apart))
        ):
            return described
        time.sleep(0.5)
    raise RuntimeError(f"no stable assignment to {members} members: {json.dumps(described)}")


def wait_for_counts(bootstrap: str, topic: str, wanted: dict[str, int]) -> None:
    got = read_committed(bootstrap, topic, wanted)
    last = {word: values[-1] for word, values in got.items()}
    if last != wanted:
        raise RuntimeError(f"counts in {topic}: {last} != {wanted}")


def prepare(bootstrap: str, app: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"{kind}-{app}", 3, 3) for kind in ("in", "out")]
    for future in admin.create_topics(topics).values():
        future.result(60)
    # IncrementalAlterConfigs (SET) on the GROUP resource (32), as kafka-configs.sh
    # --entity-type groups sends it.
    resource = {
        "resource_type": 32,
        "resource_name": app,
        "configs": [
            {"name": name, "value": value, "config_operation": 0}
            for name, value in GROUP_CONFIGS.items()
        ],
    }
    with wire.connect(bootstrap.split(",")[0], 30, exact=True) as client:
        answer = client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [resource], "validate_only": False}
        )
    if answer.responses[0].error_code != 0:
        raise RuntimeError(f"group configs refused: {answer.responses[0]}")


def scenario(command: Callable[..., list[str]], bootstrap: str, work: Path) -> dict:
    """The steps and checks of the module's docstring on one system; what was found."""
    app = "eos-wc"
    prepare(bootstrap, app)
    first, second, third = lines(300, 1), lines(300, 2), lines(300, 3)
    produce(bootstrap, f"in-{app}", first)
    instances = {name: Instance(command, bootstrap, app, work / name) for name in "abc"}
    result: dict = {}
    try:
        for instance in instances.values():
            instance.wait_for("RUNNING")
        wait_for_assignment(command, bootstrap, app, 3)
        wait_for_counts(bootstrap, f"out-{app}", expected(first))
        before = {m["process_id"]: m for m in describe(command, bootstrap, app)["members"]}

        killed_at = time.monotonic()
        instances["a"].kill()
        produce(bootstrap, f"in-{app}", second)
        after = wait_for_assignment(command, bootstrap, app, 2)
        result["takeover_s"] = round(time.monotonic() - killed_at, 1)
        survivors = {m["process_id"] for m in after["members"]}
        (gone,) = set(before) - survivors
        moved = set(before[gone]["active"]) & STATEFUL
        result["stateful_tasks_moved"] = sorted(moved)
        # Each of the killed instance's stateful tasks went to a survivor that held its standby.
        result["standby_took_over"] = bool(moved) and all(
            any(
                task in before[m["process_id"]]["standby"] and task in m["active"]
                for m in after["members"]
            )
            for task in moved
        )
        wait_for_counts(bootstrap, f"out-{app}", expected(first + second))

        instances["a"] = Instance(command, bootstrap, app, work / "a")
        instances["a"].wait_for("RUNNING")
        instances["d"] = Instance(command, bootstrap, app, work / "d")
        instances["d"].wait_for("RUNNING")
        wait_for_assignment(command, bootstrap, app, 4)
        produce(bootstrap, f"in-{app}", third)
        wanted = expected(first + second + third)
        wait_for_counts(bootstrap, f"out-{app}", wanted)
        for instance in instances.values():
            instance.stop()
    finally:
        for instance in instances.values():
            instance.kill()
    output = read_committed(bootstrap, f"out-{app}", wanted)
    result["counts_exact"] = {w: v[-1] for w, v in output.items()} == wanted
    result["duplicated_or_lost_updates"] = sum(
        1 for values in output.values() if values != list(range(1, len(values) + 1))
    )
    changelog = read_committed(bootstrap, f"{app}-counts-changelog", wanted)
    result["changelog_matches"] = {w: v[-1] for w, v in changelog.items()} == wanted
    return result


def passed(result: dict) -> bool:
    return bool(
        result.get("counts_exact")
        and result.get("changelog_matches")
        and result.get("standby_took_over")
        and result.get("duplicated_or_lost_updates") == 0
    )


def compile_program(into: Path) -> Callable[..., list[str]]:
    """javac of StreamsGroupInstance.java; the java command line that runs it."""
    compiled = subprocess.run(
        ["javac", "-nowarn", "-d", str(into), "-cp", classpath("clients"), str(PROGRAM)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if compiled.returncode != 0:
        raise RuntimeError(compiled.stderr)

    def command(*args: str) -> list[str]:
        return [java_executable(), "-Xmx256m", "-cp", f"{into}:{classpath('clients')}",
                "StreamsGroupInstance", *args]  # fmt: skip

    return command


@contextmanager
def minibroker(base: Path) -> Iterator[str]:
    from minibroker.tools.launcher import Cluster

    cluster = Cluster.start(
        base, brokers=3, overrides={"group.initial.rebalance.delay.ms": 0, **GROUP_OVERRIDES}
    )
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


@contextmanager
def kafka(base: Path) -> Iterator[str]:
    cluster = KafkaCluster.start(base, nodes=3, overrides=GROUP_OVERRIDES)
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.streams_eos", description=__doc__)
    parser.add_argument(
        "--systems", default="minibroker,kafka", help="comma-separated: minibroker, kafka"
    )
    args = parser.parse_args(argv)
    for module in ("clients", "kafka"):
        if (reason := missing_reason(module)) is not None:
            print(f"cannot run: {reason}", file=sys.stderr)
            return 2
    ok = True
    with tempfile.TemporaryDirectory(prefix="streams-eos-") as base:
        command = compile_program(Path(base) / "classes")
        systems = {"minibroker": minibroker, "kafka": kafka}
        for name in args.systems.split(","):
            started = time.monotonic()
            try:
                with systems[name](Path(base) / name) as bootstrap:
                    result = scenario(command, bootstrap, Path(base) / name / "apps")
            except (RuntimeError, KafkaException, subprocess.TimeoutExpired) as error:
                result = {"error": str(error)[-2000:]}
            result["seconds"] = round(time.monotonic() - started, 1)
            ok = ok and passed(result)
            print(
                f"{name}: {'PASS' if passed(result) else 'FAIL'} {json.dumps(result)}", flush=True
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
