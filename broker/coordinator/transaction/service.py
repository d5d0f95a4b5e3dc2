"""The transaction coordinator: transactional ids on `__transaction_state`, on trio.

Kafka's TransactionCoordinator and TransactionStateManager, in the group coordinator's shape
(coordinator/group/service.py). The coordinator of a transactional id is the leader of partition
``abs(hash(id)) % partitions`` of `__transaction_state` (Java's String.hashCode). Each change
of a transactional id is a TransactionLogValue appended as leader through the replica
manager's append_records (AppendOrigin.COORDINATOR, acks=-1) and applied once the ISR has
it, so a new coordinator reads the same state back. The coordinator epoch written into the
markers is the leader epoch at which this broker loaded the partition (as in Kafka, where it
is the partition's leader epoch).

When this broker becomes leader of a partition it reads it from its start and serves its
transactional ids; a transaction found in PrepareCommit or PrepareAbort (its coordinator died
between the decision and the markers) is completed from the log: its markers are sent again
and CompleteCommit/CompleteAbort written, so no transaction hangs and no LSO stays stuck
(Kafka's loadTransactionsForTxnTopicPartition with addTxnMarkersToSend). When it stops leading
the partition, it forgets them and stops their markers.

Leadership of the partitions, loading keyed by leader epoch, the writes and the topic's
creation are the coordinator runtime's (coordinator/runtime.py, Kafka's CoordinatorRuntime).
Departure: Kafka's transaction coordinator keeps its own TransactionStateManager for this
instead of the runtime its group and share coordinators use; minibroker runs it on the
runtime so that every coordinator loads, writes and unloads one way, with the same rules.

The rules are the pure `state.TxnMetadata`; this shell adds the log, producer id
allocation (the controller's blocks, as InitProducerId without a transactional id), the
marker channel (markers.py), a task aborting timed-out transactions every
transaction.abort.timed.out.transaction.cleanup.interval.ms (with an epoch bump that fences
the zombie producer) and one removing transactional ids idle for
transactional.id.expiration.ms.

Both of Kafka's transaction protocols are served (see state.py): TV1, and TV2 (KIP-890 part
2), where EndTxn v5 bumps the epoch and answers the producer id and epoch of the client's
next transaction (allocating a new producer id when the epoch is exhausted), and the leader
of a partition (Produce v12) or the group coordinator (TxnOffsetCommit v5) adds the partition
to the transaction (``add_to_transaction``, Kafka's AddPartitionsToTxnManager with
verifyOnly false). Departure: the answer to EndTxn is sent once PrepareCommit/PrepareAbort is
written, as Kafka does, but markers are written one transaction at a time per broker instead
of batched (see markers.py).
"""

import logging
import time
from collections.abc import Callable

import trio

from minibroker.cluster.controller_client import ControllerUnavailable, build_request
from minibroker.common.config import BrokerConfig
from minibroker.common.names import TRANSACTION_STATE_TOPIC
from minibroker.coordinator.runtime import CoordinatorRuntime, InternalTopic
from minibroker.coordinator.transaction import log_format as txn_log_format
from minibroker.coordinator.transaction.markers import MarkerChannel
from minibroker.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_1,
    TV_2,
    Transit,
    TxnMetadata,
    TxnState,
    valid_timeout,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.records import decode_records
from minibroker.protocol.versions import ApiKey
from minibroker.replication.partition import Partition
from minibroker.replication.replica_manager import ReplicaManager

log = logging.getLogger("txn-coordinator")

LOAD_READ_BYTES = 1024 * 1024
# Kafka's transaction state writes time out at request.timeout.ms.
WRITE_TIMEOUT_S = 30.0
COMPLETE_RETRY_S = 0.5

# Kafka's TransactionStateManager.appendTransactionToLog: what a failed write answers.
_APPEND_ERRORS = {
    Error.UNKNOWN_TOPIC_OR_PARTITION: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Error.COORDINATOR_NOT_AVAILABLE,
    Error.REQUEST_TIMED_OUT: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_LEADER_OR_FOLLOWER: Error.NOT_COORDINATOR,
    Error.FENCED_LEADER_EPOCH: Error.NOT_COORDINATOR,
    Error.KAFKA_STORAGE_ERROR: Error.NOT_COORDINATOR,
    Error.MESSAGE_TOO_LARGE: Error.UNKNOWN_SERVER_ERROR,
    Error.RECORD_LIST_TOO_LARGE: Error.UNKNOWN_SERVER_ERROR,
}

TopicPartition = tuple[str, int]


class TransactionCoordinator:
    """The transactional ids of the `__transaction_state` partitions this broker leads."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        clock_ms: Callable[[], int] | None = None,
        markers: MarkerChannel | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.clock_ms = clock_ms or replicas.clock_ms
        self.markers = markers or MarkerChannel(config, replicas)
        self.transactions: dict[str, TxnMetadata] = {}
        self._nursery: trio.Nursery | None = None
        self.transactions_committed = 0
        self.transactions_aborted = 0
        # Leadership of the `__transaction_state` partitions (the coordinator epoch is the
        # leader epoch a partition was loaded at), loading, writing as the coordinator and the
        # topic's creation: the runtime shared by every coordinator.
        self.runtime = CoordinatorRuntime(
            TRANSACTION_STATE_TOPIC,
            replicas,
            loader=self._load,
            unloader=self._unload,
            default_partitions=lambda: self.config.transaction_state_log_num_partitions,
            topic_spec=self._topic_spec,
            log=log,
        )

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(
                    self._every,
                    self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                    self.abort_timed_out,
                )
                nursery.start_soon(
                    self._every,
                    self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                    self.expire_transactional_ids,
                )
                await nursery.start(self.runtime.run)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await self.markers.aclose()

    async def _every(self, interval_ms: int, task) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            await task(self.clock_ms())

    # -- which transactional ids are served here ------------------------------------------------

    def partition_count(self) -> int:
        return self.runtime.partition_count()

    def partition_of(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    def check(self, transactional_id: str) -> Error:
        """Whether this broker serves ``transactional_id`` now: NONE, or the error to answer."""
        return self.runtime.check(transactional_id)

    def _owns(self, meta: TxnMetadata, coordinator_epoch: int) -> bool:
        """``meta`` is still the one served here, at ``coordinator_epoch``."""
        return (
            self.runtime.active_epoch(meta.transactional_id) == coordinator_epoch
            and self.transactions.get(meta.transactional_id) is meta
        )

    def coordinator_epoch(self, transactional_id: str) -> int:
        epoch = self.runtime.active_epoch(transactional_id)
        return -1 if epoch is None else epoch

    def _unload(self, index: int) -> None:
        """The runtime dropped (or is reloading) a partition: forget its transactional ids
        (their marker tasks see they are no longer owned and stop)."""
        gone = [t for t in self.transactions if self.partition_of(t) == index]
        for transactional_id in gone:
            del self.transactions[transactional_id]
        if gone:
            log.info(
                "unloaded %d transactional ids (no longer leader of %s-%d)",
                len(gone),
                TRANSACTION_STATE_TOPIC,
                index,
            )

    async def _load(self, partition: Partition, epoch: int) -> Callable[[], None]:
        """Read the partition (the runtime's read_batches: from its start to its end) and
        return what serves its transactional ids and completes those found between decision
        and markers."""
        started = time.monotonic()
        found: dict[str, txn_log_format.TxnLogValue | None] = {}
        async for header, batch in self.runtime.read_batches(partition, epoch):
            if header.is_control:
                continue
            for record in decode_records(batch):
                if record.key is None:
                    continue
                try:
                    transactional_id = txn_log_format.read_key(record.key)
                    found[transactional_id] = (
                        None if record.value is None else txn_log_format.read_value(record.value)
                    )
                except txn_log_format.TxnRecordFormatError as error:
                    log.warning(
                        "skipping offset %d of %s-%d: %s",
                        record.offset,
                        TRANSACTION_STATE_TOPIC,
                        partition.index,
                        error,
                    )

        def install() -> None:
            self._install(partition, epoch, found, started)

        return install

    def _install(
        self,
        partition: Partition,
        epoch: int,
        found: dict[str, txn_log_format.TxnLogValue | None],
        started: float,
    ) -> None:
        resume = []
        for transactional_id, value in found.items():
            if value is None:
                continue
            try:
                meta = TxnMetadata.from_log(transactional_id, value)
            except ValueError as error:  # a state id Kafka does not have
                log.warning("skipping transactional id %s: %s", transactional_id, error)
                continue
            self.transactions[transactional_id] = meta
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                resume.append(meta)
        assert self._nursery is not None
        for meta in resume:
            # The failover rule: the decision is in the log, so it is carried out.
            log.info(
                "completing %s of %s found in the log",
                meta.state.kafka_name,
                meta.transactional_id,
            )
            transit = meta.prepare_complete(self.clock_ms())
            self._nursery.start_soon(self._send_markers, meta, transit, epoch)
        loaded = sum(1 for t in self.transactions if self.partition_of(t) == partition.index)
        log.log(
            logging.INFO if loaded else logging.DEBUG,
            "loaded %d transactional ids of %s-%d in %.0f ms",
            loaded,
            TRANSACTION_STATE_TOPIC,
            partition.index,
            (time.monotonic() - started) * 1000,
        )

    # -- writing the log ----------------------------------------------------------------------

    async def _append(self, transactional_id: str, value: bytes | None) -> Error:
        """One record to the id's partition as the coordinator (the runtime's write:
        append_records with AppendOrigin.COORDINATOR, acks=-1; Kafka's
        appendTransactionToLog)."""
        error, _ = await self.runtime.write(
            transactional_id,
            [(txn_log_format.key(transactional_id), value)],
            timeout_s=WRITE_TIMEOUT_S,
            now_ms=self.clock_ms(),
        )
        return _APPEND_ERRORS.get(error, error)

    async def _write(self, meta: TxnMetadata, transit: Transit, fence: bool = False) -> Error:
        """Write ``transit`` and apply it if this broker still serves the id at the epoch
        it was prepared at; else NOT_COORDINATOR and nothing applied."""
        epoch = self.coordinator_epoch(meta.transactional_id)
        error = await self._append(meta.transactional_id, txn_log_format.value(transit.log_value()))
        if error == Error.NONE and not self._owns(meta, epoch):
            error = Error.NOT_COORDINATOR
        if error != Error.NONE:
            meta.abandon(transit, fence=fence)
            return error
        meta.complete(transit)
        return Error.NONE

    # -- InitProducerId ------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[Error, int, int]:
        """Kafka's handleInitProducerId with a transactional id: (error, producer id, epoch).
        ``expected`` is KIP-360's (producer id, epoch), None when the client sent -1."""
        if transactional_id == "":
            return Error.INVALID_REQUEST, -1, -1
        if not valid_timeout(timeout_ms, self.config.transaction_max_timeout_ms):
            return Error.INVALID_TRANSACTION_TIMEOUT, -1, -1
        if (error := self.check(transactional_id)) != Error.NONE:
            return error, -1, -1
        meta = self.transactions.get(transactional_id)
        try:
            if meta is None:
                producer_id = await self.replicas.next_producer_id()
                if (error := self.check(transactional_id)) != Error.NONE:
                    return error, -1, -1
                meta = self.transactions.setdefault(
                    transactional_id,
                    TxnMetadata(
                        transactional_id,
                        producer_id,
                        timeout_ms=timeout_ms,
                        last_update_ms=self.clock_ms(),
                    ),
                )
            new_producer_id = None
            if meta.needs_new_producer_id(expected):
                new_producer_id = await self.replicas.next_producer_id()
        except ControllerUnavailable:
            return Error.COORDINATOR_NOT_AVAILABLE, -1, -1
        if (error := self.check(transactional_id)) != Error.NONE:
            return error, -1, -1
        if self.transactions.get(transactional_id) is not meta:
            return Error.CONCURRENT_TRANSACTIONS, -1, -1
        if meta.needs_new_producer_id(expected) and new_producer_id is None:
            return Error.CONCURRENT_TRANSACTIONS, -1, -1
        result = meta.prepare_init(timeout_ms, expected, self.clock_ms(), new_producer_id)
        if isinstance(result, Error):
            return result, -1, -1
        if result.state == TxnState.PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction with a bumped epoch (fencing its producer) and let
            # the client retry once the markers are written.
            error, _ = await self._end(
                meta, result.producer_id, result.producer_epoch, False, from_client=False
            )
            return (Error.CONCURRENT_TRANSACTIONS if error == Error.NONE else error), -1, -1
        error = await self._write(meta, result)
        if error != Error.NONE:
            return error, -1, -1
        log.info(
            "initialized transactional id %s with producer id %d, epoch %d",
            transactional_id,
            result.producer_id,
            result.producer_epoch,
        )
        return Error.NONE, result.producer_id, result.producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        client_transaction_version: int = TV_1,
    ) -> Error:
        """Kafka's handleAddPartitionsToTransaction (and AddOffsetsToTxn, whose group's
        `__consumer_offsets` partition joins the transaction); TV2 when a partition leader or
        the group coordinator adds it for the client."""
        if transactional_id == "":
            return Error.INVALID_REQUEST
        if (error := self.check(transactional_id)) != Error.NONE:
            return error
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return Error.INVALID_PRODUCER_ID_MAPPING
        result = meta.prepare_add_partitions(
            producer_id, producer_epoch, partitions, self.clock_ms(), client_transaction_version
        )
        if isinstance(result, Error):
            return result
        return await self._write(meta, result)

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, Error]:
        """KIP-890's check here (Kafka's handleVerifyPartitionsInTransaction)."""
        if not transactional_id:
            return dict.fromkeys(partitions, Error.INVALID_REQUEST)
        if (error := self.check(transactional_id)) != Error.NONE:
            return dict.fromkeys(partitions, error)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return dict.fromkeys(partitions, Error.INVALID_PRODUCER_ID_MAPPING)
        return meta.verify_partitions(producer_id, producer_epoch, partitions)

    async def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        add: bool = False,
    ) -> dict[tuple[str, int], Error]:
        """For a partition leader (the Produce handler, KIP-890): whether each partition is
        in the producer's ongoing transaction, or with ``add`` (TV2: Produce v12,
        TxnOffsetCommit v5) the partitions added to it. Asked here when this broker
        coordinates the id, else with AddPartitionsToTxn v5 (verify_only unless ``add``) to
        the coordinator over the inter-broker listener (Kafka's AddPartitionsToTxnManager).
        No coordinator known: COORDINATOR_NOT_AVAILABLE; the coordinator unreachable:
        NOT_COORDINATOR."""
        topic = self.replicas.metadata.topic(TRANSACTION_STATE_TOPIC)
        index = self.partition_of(transactional_id)
        state = topic.partitions.get(index) if topic is not None else None
        if state is None or state.leader < 0:
            return dict.fromkeys(partitions, Error.COORDINATOR_NOT_AVAILABLE)
        if state.leader == self.config.node_id:
            if add:
                error = await self.add_partitions(
                    transactional_id, producer_id, producer_epoch, set(partitions), TV_2
                )
                return dict.fromkeys(partitions, error)
            return self.verify(transactional_id, producer_id, producer_epoch, partitions)
        by_topic: dict[str, list[int]] = {}
        for name, partition in partitions:
            by_topic.setdefault(name, []).append(partition)
        request = build_request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {
                "transactions": [
                    {
                        "transactional_id": transactional_id,
                        "producer_id": producer_id,
                        "producer_epoch": producer_epoch,
                        "verify_only": not add,
                        "topics": [
                            {"name": name, "partitions": indexes}
                            for name, indexes in by_topic.items()
                        ],
                    }
                ]
            },
        )
        try:
            response = await self.markers.request(state.leader, request)
        except Exception as error:  # the coordinator unreachable, or a broken answer
            log.debug("verification with broker %d failed: %r", state.leader, error)
            return dict.fromkeys(partitions, Error.NOT_COORDINATOR)
        if response.error_code.value != Error.NONE:
            return dict.fromkeys(partitions, Error(response.error_code.value))
        answers: dict[tuple[str, int], Error] = {}
        for result in response.results_by_transaction:
            for topic_result in result.topic_results:
                for partition_result in topic_result.results_by_partition:
                    key = (str(topic_result.name), int(partition_result.partition_index))
                    answers[key] = Error(partition_result.partition_error_code.value)
        return {p: answers.get(p, Error.UNKNOWN_SERVER_ERROR) for p in partitions}

    # -- EndTxn --------------------------------------------------------------------------------

    async def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int = TV_1,
    ) -> tuple[Error, int, int]:
        """Kafka's handleEndTransaction: (error, producer id, epoch), answered once
        PrepareCommit/PrepareAbort is in the log; the markers and the completion follow in
        the background. The id and epoch (EndTxn v5) are those the client continues with:
        with TV2 the bumped epoch, or a new id at epoch 0; for a retry answered NONE, the
        current ones; -1 with an error. A TV2 ABORT of a transaction with no partition in it
        (Kafka 4) writes PrepareAbort with no partitions: no marker to send, its completion
        follows at once."""
        failed = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if transactional_id == "":
            return Error.INVALID_REQUEST, *failed
        if (error := self.check(transactional_id)) != Error.NONE:
            return error, *failed
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return Error.INVALID_PRODUCER_ID_MAPPING, *failed
        next_producer_id = None
        if meta.needs_next_producer_id(client_transaction_version, commit):
            try:
                next_producer_id = await self.replicas.next_producer_id()
            except ControllerUnavailable:
                return Error.COORDINATOR_NOT_AVAILABLE, *failed
            if (error := self.check(transactional_id)) != Error.NONE:
                return error, *failed
            if self.transactions.get(transactional_id) is not meta:
                return Error.CONCURRENT_TRANSACTIONS, *failed
        error, transit = await self._end(
            meta,
            producer_id,
            producer_epoch,
            commit,
            from_client=True,
            client_transaction_version=client_transaction_version,
            next_producer_id=next_producer_id,
        )
        if error != Error.NONE:
            return error, *failed
        if transit is None:  # a retry of a completed transaction
            return Error.NONE, meta.producer_id, meta.producer_epoch
        return Error.NONE, transit.producer_id, transit.producer_epoch

    async def _end(
        self,
        meta: TxnMetadata,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool,
        client_transaction_version: int = TV_1,
        next_producer_id: int | None = None,
    ) -> tuple[Error, Transit | None]:
        """The decision written and the markers started: (NONE, the completion transit to
        come), (NONE, None) when nothing was to be written, or the error."""
        fence = meta.pending == TxnState.PREPARE_EPOCH_FENCE
        result = meta.prepare_end(
            producer_id,
            producer_epoch,
            commit,
            self.clock_ms(),
            from_client,
            client_transaction_version,
            next_producer_id,
        )
        if isinstance(result, Error):
            if fence and meta.pending == TxnState.PREPARE_EPOCH_FENCE:
                meta.pending = None
            return result, None
        epoch = self.coordinator_epoch(meta.transactional_id)
        error = await self._write(meta, result, fence=fence)
        if error != Error.NONE:
            return error, None
        transit = meta.prepare_complete(self.clock_ms())
        assert self._nursery is not None
        self._nursery.start_soon(self._send_markers, meta, transit, epoch)
        return Error.NONE, transit

    async def _send_markers(self, meta: TxnMetadata, transit: Transit, epoch: int) -> None:
        """Markers to every partition of the transaction, then CompleteCommit/CompleteAbort
        (retried while this broker still coordinates the id; else the next coordinator
        completes it from the log)."""
        commit = transit.state == TxnState.COMPLETE_COMMIT
        written = await self.markers.write(
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            coordinator_epoch=epoch,
            commit=commit,
            partitions=set(meta.partitions),
            still_valid=lambda: self._owns(meta, epoch),
            # Kafka's TxnMarkerEntry: the transaction's clientTransactionVersion (KIP-1228).
            transaction_version=meta.client_transaction_version,
        )
        if not written:
            return
        while self._owns(meta, epoch):
            error = await self._append(
                meta.transactional_id, txn_log_format.value(transit.log_value())
            )
            if error == Error.NONE and self._owns(meta, epoch):
                meta.complete(transit)
                if commit:
                    self.transactions_committed += 1
                else:
                    self.transactions_aborted += 1
                return
            log.warning(
                "cannot write the completion of %s (%s); retrying",
                meta.transactional_id,
                error.name,
            )
            await trio.sleep(COMPLETE_RETRY_S)

    # -- timers ------------------------------------------------------------------------------------

    async def abort_timed_out(self, now_ms: int) -> None:
        """Kafka's abortTimedOutTransactions: an Ongoing transaction past its timeout is
        aborted with a bumped epoch, which fences the producer that left it."""
        for meta in list(self.transactions.values()):
            if not meta.timed_out(now_ms) or self.check(meta.transactional_id) != Error.NONE:
                continue
            fence = meta.prepare_fence()
            error, _ = await self._end(
                meta, meta.producer_id, fence.producer_epoch, False, from_client=False
            )
            if error == Error.NONE:
                log.info(
                    "aborting the timed-out transaction of %s (producer %d, epoch now %d)",
                    meta.transactional_id,
                    meta.producer_id,
                    meta.producer_epoch,
                )
            else:
                log.warning(
                    "cannot abort the timed-out transaction of %s: %s",
                    meta.transactional_id,
                    error.name,
                )

    async def expire_transactional_ids(self, now_ms: int) -> None:
        """transactional.id.expiration.ms: an id idle that long in Empty, CompleteCommit or
        CompleteAbort is removed, with a tombstone (Kafka's removeExpiredTransactionalIds)."""
        for meta in list(self.transactions.values()):
            transactional_id = meta.transactional_id
            if self.check(transactional_id) != Error.NONE or not meta.expired(
                now_ms, self.config.transactional_id_expiration_ms
            ):
                continue
            epoch = self.coordinator_epoch(transactional_id)
            transit = meta.prepare_dead()
            error = await self._append(transactional_id, None)
            if error == Error.NONE and self._owns(meta, epoch):
                del self.transactions[transactional_id]
                log.info("expired transactional id %s", transactional_id)
            else:
                meta.abandon(transit)

    # -- admin ---------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[Error, TxnMetadata | None]:
        """Kafka's handleDescribeTransactions."""
        if transactional_id == "":
            return Error.INVALID_REQUEST, None
        if (error := self.check(transactional_id)) != Error.NONE:
            return error, None
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return Error.TRANSACTIONAL_ID_NOT_FOUND, None
        return Error.NONE, meta

    def list_transactions(
        self, states: list[str], producer_ids: list[int], duration_ms: int = -1
    ) -> tuple[Error, list[str], list[TxnMetadata]]:
        """Kafka's listTransactionStates: (error, unknown state filters, transactions)."""
        if self.runtime.is_loading():
            return Error.COORDINATOR_LOAD_IN_PROGRESS, [], []
        wanted: set[TxnState] = set()
        unknown = []
        for name in states:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        now = self.clock_ms()
        listed = []
        for meta in self.transactions.values():
            if meta.state == TxnState.DEAD:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if states and meta.state not in wanted:
                continue
            if duration_ms >= 0 and now - meta.start_ms <= duration_ms:
                continue
            listed.append(meta)
        return Error.NONE, unknown, listed

    def ongoing_count(self) -> int:
        """Transactions begun and not completed, for the metrics."""
        return sum(1 for m in self.transactions.values() if m.has_pending_transaction)

    # -- the transaction state topic -------------------------------------------------------------

    def _topic_spec(self) -> InternalTopic:
        """Kafka's transactionTopicConfigs: compacted, min.insync.replicas
        transaction.state.log.min.isr capped at the replication factor, which is
        min(transaction.state.log.replication.factor, live brokers) so a single node serves
        transactions too (Kafka would refuse until enough brokers are up)."""
        live = max(len(self.replicas.metadata.brokers), 1)
        replication = min(self.config.transaction_state_log_replication_factor, live)
        min_isr = min(self.config.transaction_state_log_min_isr, replication)
        return InternalTopic(
            self.config.transaction_state_log_num_partitions,
            replication,
            {
                "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
                "segment.bytes": str(self.config.transaction_state_log_segment_bytes),
            },
        )
