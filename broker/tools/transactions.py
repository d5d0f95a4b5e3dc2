"""`minibroker transactions`: list a cluster's transactions, or describe one, as
kafka-transactions.sh does (its ``list`` and ``describe`` commands).

A client of the wire protocol only (minibroker.tools.wire through groups.Connection), so it
reads a Kafka cluster as well as a minibroker one:

- list: Metadata names every broker; ListTransactions goes to each (a broker lists only the
  transactional ids it coordinates, which is why Kafka's admin client asks them all);
- describe: FindCoordinator (key type 1) names the id's coordinator; DescribeTransactions gives
  its state, producer id and epoch, timeout, start time and partitions.

DescribeTransactions' start time is -1 for a transactional id with no transaction, which kio's
reader refuses (a negative timestamp), so its answer is decoded here by hand.

Exit status: 0 when everything asked for was answered; 1 when a broker could not be reached,
answered with an error, or the transactional id is unknown.
"""

from __future__ import annotations

import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from minibroker.protocol import codec
from minibroker.protocol.errors import Error, error_name
from minibroker.protocol.framing import parse_response_header
from minibroker.protocol.versions import ApiKey
from minibroker.tools import groups
from minibroker.tools.groups import RETRIABLE, Broker, Connection, GroupsError

VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (1, 12),
    ApiKey.FIND_COORDINATOR: (1, 4),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
}
TRANSACTION_KEY_TYPE = 1


class TxnConnection(Connection):
    """groups.Connection speaking this tool's APIs."""

    spoken = VERSIONS

    def __enter__(self) -> TxnConnection:
        return self

    def raw(self, api_key: ApiKey, data: dict) -> bytes:
        """The response frame of a request, undecoded (see the module on DescribeTransactions)."""
        version = self.versions.get(api_key)
        if version is None:
            raise GroupsError(f"{self.address} does not offer {api_key.name}")
        body = codec.encode_entity(codec.build(codec.request_class(api_key, version), data))

        def exchange() -> bytes:
            sent = self._client.send_request(api_key, version, body)
            frame = self._client.receive_frame()
            received, offset = parse_response_header(frame, flexible_header=True)
            if received != sent:
                raise GroupsError(f"{self.address}: answered correlation id {received}")
            return frame[offset:]

        return self._talk(exchange)


def _connect_any(bootstrap: str, deadline: float) -> TxnConnection:
    """groups.connect_any's rule: the first address of ``bootstrap`` that answers."""
    problems = []
    for address in (part.strip() for part in bootstrap.split(",") if part.strip()):
        try:
            return TxnConnection(address, deadline)
        except GroupsError as error:
            problems.append(str(error))
    raise GroupsError("; ".join(problems) or f"no address in {bootstrap!r}")


# -- DescribeTransactions v0, decoded by hand ------------------------------------------------------


@dataclass(frozen=True)
class TransactionView:
    error: Error | int
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]
    coordinator: int = -1


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def string(self) -> str:
        length = self.uvarint() - 1
        text = self.data[self.pos : self.pos + max(length, 0)].decode()
        self.pos += max(length, 0)
        return text

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def decode_describe_transactions(body: bytes) -> list[TransactionView]:
    """A DescribeTransactions v0 response body (after its header)."""
    reader = _Reader(body)
    try:
        reader.take(">i")  # throttle time
        views = []
        for _ in range(reader.uvarint() - 1):
            code = reader.take(">h")
            transactional_id = reader.string()
            state = reader.string()
            timeout_ms = reader.take(">i")
            start = reader.take(">q")
            producer_id = reader.take(">q")
            epoch = reader.take(">h")
            partitions = []
            for _ in range(reader.uvarint() - 1):
                topic = reader.string()
                for _ in range(reader.uvarint() - 1):
                    partitions.append((topic, reader.take(">i")))
                reader.skip_tags()
            reader.skip_tags()
            error = Error(code) if code in Error._value2member_map_ else code
            views.append(
                TransactionView(
                    error,
                    transactional_id,
                    state,
                    timeout_ms,
                    start,
                    producer_id,
                    epoch,
                    partitions,
                )  # fmt: skip
            )
        return views
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise GroupsError(f"cannot decode DescribeTransactions: {error}") from None


# -- the commands -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


def list_transactions(bootstrap: str, timeout: float) -> tuple[list[ListedTransaction], list[str]]:
    """Every broker's transactions, and the problems with the brokers that did not answer."""
    deadline = time.monotonic() + timeout
    with _connect_any(bootstrap, deadline) as conn:
        cluster = groups.metadata(conn, None)
    listed: list[ListedTransaction] = []
    problems: list[str] = []
    for node_id, broker in sorted(cluster.brokers.items()):
        try:
            with TxnConnection(broker.address, deadline) as conn:
                response = conn.request(
                    ApiKey.LIST_TRANSACTIONS,
                    {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
                )
        except GroupsError as error:
            problems.append(str(error))
            continue
        code = int(response.error_code.value)
        if code != Error.NONE:
            problems.append(f"broker {node_id} answered {error_name(code)}")
        for state in response.transaction_states:
            listed.append(
                ListedTransaction(
                    state.transactional_id,
                    node_id,
                    int(state.producer_id),
                    state.transaction_state,
                )
            )
    return sorted(listed, key=lambda t: t.transactional_id), problems


def find_coordinator(conn: TxnConnection, transactional_id: str) -> Broker:
    version = conn.version(ApiKey.FIND_COORDINATOR)
    while True:
        if version >= 4:
            response = conn.request(
                ApiKey.FIND_COORDINATOR,
                {"key_type": TRANSACTION_KEY_TYPE, "coordinator_keys": [transactional_id]},
            )
            answer = response.coordinators[0]
        else:
            answer = conn.request(
                ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE}
            )
        code = int(answer.error_code.value)
        if code == Error.NONE:
            return Broker(int(answer.node_id), answer.host, int(answer.port))
        if code not in RETRIABLE:
            raise GroupsError(
                f"FindCoordinator for {transactional_id!r} answered {error_name(code)}"
            )
        _wait_or_fail(conn.deadline, f"no coordinator for {transactional_id!r}")


def _wait_or_fail(deadline: float, what: str) -> None:
    if time.monotonic() + groups.RETRY_INTERVAL_S >= deadline:
        raise GroupsError(what)
    time.sleep(groups.RETRY_INTERVAL_S)


def describe_transaction(bootstrap: str, transactional_id: str, timeout: float) -> TransactionView:
    deadline = time.monotonic() + timeout
    while True:
        with _connect_any(bootstrap, deadline) as conn:
            coordinator = find_coordinator(conn, transactional_id)
        with TxnConnection(coordinator.address, deadline) as conn:
            body = conn.raw(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
        (view,) = decode_describe_transactions(body)
        if view.error in RETRIABLE:
            _wait_or_fail(deadline, f"the coordinator of {transactional_id!r} answers {view.error}")
            continue
        if view.error != Error.NONE:
            name = error_name(int(view.error))
            raise GroupsError(f"transactional id {transactional_id!r}: {name}")
        return TransactionView(**{**view.__dict__, "coordinator": coordinator.node_id})


def print_list(listed: list[ListedTransaction], out: TextIO) -> None:
    rows = [("TransactionalId", "Coordinator", "ProducerId", "TransactionState")]
    rows += [(t.transactional_id, str(t.coordinator), str(t.producer_id), t.state) for t in listed]
    _table(rows, out)


def print_transaction(view: TransactionView, out: TextIO, now_ms: int | None = None) -> None:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    started = view.start_time_ms
    rows = [
        (
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ),
        (
            str(view.coordinator),
            view.transactional_id,
            str(view.producer_id),
            str(view.producer_epoch),
            view.state,
            str(view.timeout_ms),
            str(started) if started >= 0 else "None",
            str(now_ms - started) if started >= 0 else "None",
            ",".join(f"{t}-{p}" for t, p in sorted(view.partitions)),
        ),
    ]
    _table(rows, out)


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )


def run(bootstrap: str, describe: str | None, timeout: float, out: TextIO = sys.stdout) -> int:
    """The command: print the list, or one transactional id; errors go to stderr."""
    try:
        if describe is None:
            listed, problems = list_transactions(bootstrap, timeout)
            print_list(listed, out)
            for problem in problems:
                print(f"minibroker transactions: {problem}", file=sys.stderr)
            return 1 if problems else 0
        print_transaction(describe_transaction(bootstrap, describe, timeout), out)
        return 0
    except (GroupsError, ValueError) as error:
        print(f"minibroker transactions: {error}", file=sys.stderr)
        return 1
