"""The ``minibroker`` command line: ``minibroker serve [server.properties] [--override k=v]``,
``dev``, ``probe``, ``groups``, ``transactions``, ``iceberg`` and ``kafka`` (Kafka's own tools)."""

import argparse
import logging
import os
import sys
from pathlib import Path

from minibroker.common.config import ConfigError, load_config

LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("minibroker")
    except PackageNotFoundError:
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker", description="A Kafka-compatible broker in Python."
    )
    parser.add_argument("--version", action="version", version=f"minibroker {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run a broker",
        description="Run a broker. With no file, it listens on 127.0.0.1:9092 and keeps "
        "its data under ./data.",
    )
    serve.add_argument("properties", nargs="?", type=Path, help="a Kafka server.properties file")
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property, overriding the file (repeatable)",
    )
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    dev = commands.add_parser(
        "dev",
        help="run a local cluster: a controller and brokers on 127.0.0.1",
        description="Start a controller on 127.0.0.1:9090 and brokers on 9092, 9093, ...; "
        "data under ./data; a node that dies is reported and Enter starts it again; Ctrl-C "
        "stops them all cleanly.",
    )
    dev.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    dev.add_argument("--data", type=Path, default=Path("data"), help="data directory")
    dev.add_argument("--first-port", type=int, default=9092, help="the first broker's port")
    dev.add_argument(
        "--controller-port", type=int, default=9090, help="the controller's port (default 9090)"
    )
    dev.add_argument(
        "--schema-registry-port",
        type=int,
        default=8081,
        help="the schema registry's port on the first broker, the next ones on the others"
        " (default 8081; 0: no schema registry)",
    )
    dev.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server property for every node (repeatable), e.g. min.insync.replicas=2",
    )
    dev.add_argument(
        "--zookeeper",
        action="store_true",
        help="ZooKeeper mode: no controller process, the brokers elect one through ZooKeeper"
        " (zookeeper.connect from --override, else a local ZooKeeper on --zookeeper-port)",
    )
    dev.add_argument(
        "--zookeeper-port", type=int, default=2181, help="the local ZooKeeper's port (2181)"
    )
    dev.add_argument(
        "--restart-dead",
        action="store_true",
        help="start a node that dies again at once (otherwise Enter does it)",
    )
    dev.add_argument(
        "--secure",
        action="store_true",
        help="also give every broker a SASL_SSL listener (port + 100), with a throwaway CA "
        "and users written under DATA/secure, and print the client settings to use",
    )
    probe = commands.add_parser(
        "probe",
        help="check that a node answers ApiVersions and Metadata (a health check)",
        description="Exit 0 when the node answers ApiVersions and Metadata, 1 otherwise.",
    )
    probe.add_argument("--bootstrap", default="127.0.0.1:9092", help="host:port of the node")
    probe.add_argument("--timeout", type=float, default=5.0, help="seconds to wait")
    groups = commands.add_parser(
        "groups",
        help="list the cluster's consumer groups, or describe one (members, offsets, lag)",
        description="With no option, list every group of the cluster (ListGroups to each "
        "broker). With --describe GROUP, print its members and assignments, and for each "
        "partition its committed offset, log end offset, lag and consumer, as "
        "kafka-consumer-groups.sh --describe does. Exit 1 when a broker cannot be reached "
        "or the group does not exist.",
    )
    groups.add_argument(
        "--bootstrap",
        default="127.0.0.1:9092",
        help="host:port of any broker (or several, comma-separated: the first that answers)",
    )
    groups.add_argument("--describe", metavar="GROUP", help="describe this group")
    groups.add_argument("--timeout", type=float, default=10.0, help="seconds to wait in all")
    transactions = commands.add_parser(
        "transactions",
        help="list the cluster's transactions, or describe one (as kafka-transactions.sh)",
        description="list: every transactional id of the cluster with its coordinator, "
        "producer id and state (ListTransactions to each broker). describe "
        "--transactional-id ID: its coordinator, producer id and epoch, state, timeout, "
        "start time and partitions. Exit 1 when a broker cannot be reached or the id is "
        "unknown.",
    )
    transactions.add_argument("action", choices=("list", "describe"))
    transactions.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        default="127.0.0.1:9092",
        help="host:port of any broker (or several, comma-separated: the first that answers)",
    )
    transactions.add_argument("--transactional-id", help="the id to describe")
    iceberg = commands.add_parser(
        "iceberg",
        help="list the cluster's Iceberg topics: per partition the table's offset, the lag,"
        " files, snapshots and the writer's last error",
        description="For each topic with iceberg.mode set and each of its partitions: the "
        "table, the next offset the table holds, the partition's last stable offset, the lag "
        "in offsets and in seconds (the oldest record not yet in the table, by its "
        "timestamp), the table's data files and snapshots, and the leader's writer's last "
        "error. The catalog is the one the leaders describe (DescribeConfigs); the errors "
        "come from their metrics.port. Exit 1 when something could not be read.",
    )
    iceberg.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        default="127.0.0.1:9092",
        help="host:port of any broker (or several, comma-separated: the first that answers)",
    )
    iceberg.add_argument("--topic", help="only this topic")
    iceberg.add_argument(
        "--catalog-uri",
        help="the catalog's URI, when the brokers' is not reachable from here (the embedded "
        "SQLite catalog of a broker on another machine, a relative log dir)",
    )
    iceberg.add_argument(
        "--catalog-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a catalog property the brokers do not describe (a REST catalog's credential "
        "or token), by its Iceberg name (repeatable)",
    )
    iceberg.add_argument("--timeout", type=float, default=10.0, help="seconds to wait in all")
    commands.add_parser(
        "kafka",
        help="run one of Kafka's command-line tools (kafka-topics, kafka-configs, ...) from "
        "the pinned Kafka 4.4 artifacts of java/fetch.sh: minibroker kafka TOOL ARGS...",
        description="Run Apache Kafka's own tool TOOL (a script of Kafka's bin/, with or "
        "without .sh and the kafka- prefix) with ARGS, as its script runs it. `minibroker "
        "kafka --help` lists the tools.",
        add_help=False,
    )
    transactions.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["kafka"]:
        # Everything after the tool's name is the tool's (its own --help included).
        from minibroker.tools.kafka_tools import run as run_kafka_tool

        return run_kafka_tool(arguments[1:])
    args = _parser().parse_args(arguments)
    if args.command == "probe":
        from minibroker.tools.probe import probe

        return probe(args.bootstrap, args.timeout)
    if args.command == "groups":
        from minibroker.tools.groups import run

        return run(args.bootstrap, args.describe, args.timeout)
    if args.command == "iceberg":
        from minibroker.tools.iceberg import run as run_iceberg

        properties = {}
        for item in args.catalog_property:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                print(f"minibroker iceberg: {item!r} is not KEY=VALUE", file=sys.stderr)
                return 2
            properties[key.strip()] = value.strip()
        return run_iceberg(args.bootstrap, args.timeout, args.topic, args.catalog_uri, properties)
    if args.command == "transactions":
        from minibroker.tools.transactions import run as run_transactions

        if args.action == "describe" and not args.transactional_id:
            print(
                "minibroker transactions describe: --transactional-id is required", file=sys.stderr
            )
            return 2
        describe = args.transactional_id if args.action == "describe" else None
        return run_transactions(args.bootstrap, describe, args.timeout)
    if args.command == "dev":
        from minibroker.tools.dev import run_dev

        overrides = {}
        for item in args.override:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                print(f"minibroker: --override {item!r} is not KEY=VALUE", file=sys.stderr)
                return 2
            overrides[key.strip()] = value.strip()
        return run_dev(
            args.data,
            brokers=args.brokers,
            first_port=args.first_port,
            controller_port=args.controller_port,
            schema_registry_port=args.schema_registry_port,
            overrides=overrides,
            restart_dead=args.restart_dead,
            secure=args.secure,
            zookeeper=args.zookeeper,
            zookeeper_port=args.zookeeper_port,
        )
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    try:
        config = load_config(args.properties, args.override)
    except ConfigError as error:
        print(f"minibroker: {error}", file=sys.stderr)
        return 2
    from minibroker.tools.dev import made_by_dev

    for log_dir in config.log_dirs:
        if made_by_dev(log_dir):
            # Its own files would land among the dev cluster's node folders, and the next
            # `minibroker dev` would find a broker's files where its supervisor keeps data.
            print(
                f"minibroker: {log_dir} holds the data of a `minibroker dev` cluster (its"
                " nodes' folders): `minibroker serve` keeps its own data elsewhere; choose"
                " another folder (--override log.dirs=DIR) or run `minibroker dev` there",
                file=sys.stderr,
            )
            return 2
    import trio  # here, not at the top: `minibroker probe` (a health check) never needs it

    from minibroker.node.server import BrokerServer
    from minibroker.storage.errors import (
        CorruptCheckpointError,
        InconsistentMetaPropertiesError,
        LogDirLockedError,
    )

    try:
        server = BrokerServer(config)
    except ConfigError as error:
        print(f"minibroker: {error}", file=sys.stderr)
        return 2
    # Before the node listens (a no-op in a node forked from the fork server, which did it).
    from minibroker.apis.registry import warm_client_schemas

    warm_client_schemas()
    try:
        trio.run(server.run)
    except (
        OSError,
        LogDirLockedError,
        InconsistentMetaPropertiesError,
        CorruptCheckpointError,
    ) as error:
        if server.serving:
            # Not a start-up problem: say where it happened, or nobody can fix it.
            logging.getLogger("server").exception("stopped by an error: %s", error)
        else:
            logging.getLogger("server").error("cannot start: %s", error)
        return 1
    _exit_without_teardown(0)
    return 0  # not reached


def _exit_without_teardown(code: int) -> None:
    """End a node that stopped cleanly at once, skipping the interpreter's finalization.

    Everything that must survive is on disk by now (checkpoints and the clean-shutdown
    marker, fsynced) and every socket is closed. What finalization would still do is collect
    and free the whole heap (the loaded API schemas, the logs' indexes) and join daemon
    threads: measured 0.7 to 1.7 s of CPU per node on an idle machine and several seconds on a
    loaded one, after the node had logged "stopped cleanly", which the launcher's 20 s stop
    timeout (and `minibroker dev`'s exit code) counted against the node. Kafka's broker
    likewise ends with Exit.exit once its shutdown hooks ran."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
