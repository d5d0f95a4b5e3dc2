"""What does authorization cost the produce path? `python -m bench.authorization_overhead`

Two single brokers, one without an authorizer and one with StandardAuthorizer and an ACL set
(the broker's own CLUSTER_ACTION, CREATE on the cluster, WRITE on the benchmark's topics for
User:ANONYMOUS, and 1,000 unrelated topic ACLs so that lookups are not trivially short); kcat
produces 1,000,000 x 100 B (acks=1) into a 64-partition topic on each in turn, several runs
each on a fresh topic. It prints the median throughput of both and their ratio, then what one
authorization decision costs with that ACL set (timeit, in this process).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit
from pathlib import Path

from bench.scrape_overhead import RECORD_BYTES, RECORDS, _create_topic, _Target
from bench.workloads import kcat_produce, record_file
from minibroker.controller.state import ControllerState
from minibroker.controller.store import STATE_FILE, ControllerStore
from minibroker.security.authorizer.acls import (
    CLUSTER_NAME,
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from minibroker.tools.launcher import BrokerProcess

ANONYMOUS = "User:ANONYMOUS"
UNRELATED_ACLS = 1000


def _acls() -> list[AclBinding]:
    def allow(resource_type, name, operation, pattern=PatternType.LITERAL, principal=ANONYMOUS):
        return AclBinding(resource_type, name, pattern, principal, "*", operation, Permission.ALLOW)

    return [
        allow(ResourceType.CLUSTER, CLUSTER_NAME, Operation.CLUSTER_ACTION),
        allow(ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE),
        allow(ResourceType.TOPIC, "run-", Operation.WRITE, PatternType.PREFIXED),
        allow(ResourceType.TOPIC, "run-", Operation.DESCRIBE, PatternType.PREFIXED),
        *(
            allow(ResourceType.TOPIC, f"other-{index}", Operation.READ, principal=f"User:{index}")
            for index in range(UNRELATED_ACLS)
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.authorization_overhead")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=RECORDS)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="authorization-overhead-"))
    records = record_file(work_dir, args.records, RECORD_BYTES)
    secured_dir = work_dir / "secured" / "data"
    secured_dir.mkdir(parents=True)
    ControllerStore(secured_dir / STATE_FILE).save(ControllerState(acls=_acls()))
    nodes = {
        False: BrokerProcess.start(1, work_dir / "open" / "data"),
        True: BrokerProcess.start(
            2,
            secured_dir,
            overrides={
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            },
        ),
    }
    rates: dict[bool, list[float]] = {False: [], True: []}
    try:
        for node in nodes.values():
            node.wait_ready(30)
        for run in range(args.runs):
            for secured, node in nodes.items():
                topic = f"run-{run}"
                _create_topic(node.bootstrap, topic)
                seconds = kcat_produce(_Target(node), topic, records, args.records, "1")
                rates[secured].append(args.records / seconds)
    finally:
        for node in nodes.values():
            node.stop()
    open_rate, secured_rate = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"produce {args.records:,} x {RECORD_BYTES} B, acks=1, 1 broker, {args.runs} runs each")
    print(f"no authorizer: {open_rate:,.0f} records/s")
    print(f"StandardAuthorizer, {len(_acls())} ACLs: {secured_rate:,.0f} records/s")
    print(f"authorized / no authorizer: {secured_rate / open_rate:.3f}")
    authorizer = Authorizer()
    authorizer.replace_acls(_acls())
    calls = 100_000
    seconds = timeit.timeit(
        lambda: authorizer.authorize(
            ANONYMOUS, "127.0.0.1", Operation.WRITE, ResourceType.TOPIC, "run-0"
        ),
        number=calls,
    )
    print(f"one WRITE decision among {len(_acls())} ACLs: {seconds / calls * 1e6:.2f} us")


if __name__ == "__main__":
    main()
