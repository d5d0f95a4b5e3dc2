"""Topics and partitions: the controller's replication verbs (Kafka:
``ReplicationControlManager`` of the KRaft controller; ZooKeeper-mode Kafka's
``KafkaController`` with its ``PartitionStateMachine`` and ``ReplicaStateMachine``).

CreateTopics, CreatePartitions, DeleteTopics, AlterPartition (ISR changes from leaders),
ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments. Each is the same
thin shell over a pure transition of ``state.py``: apply it (to a copy for validate_only),
save the state once for the whole request, queue the requests brokers must hear, and answer,
for the verbs whose clients expect it, once the brokers applied the decision (within the
request's timeout; topics not applied by then answer REQUEST_TIMED_OUT, as Kafka's do).
"""

import copy
import logging
from typing import TYPE_CHECKING

import trio

from minibroker.common.config_model import TOPIC_RESOURCE, describe_topic
from minibroker.controller import state as transitions
from minibroker.controller.context import ControllerContext
from minibroker.controller.state import (
    ControllerError,
    ControllerState,
    PartitionChange,
    TopicState,
)
from minibroker.protocol.errors import Error
from minibroker.storage.log import LogConfig

if TYPE_CHECKING:
    from minibroker.common.config import BrokerConfig

log = logging.getLogger("controller")


class ReplicationControlManager:
    """The topic and partition verbs of the controller, over its state."""

    def __init__(self, controller: ControllerContext) -> None:
        self._controller = controller

    @property
    def state(self) -> ControllerState:
        return self._controller.state

    @property
    def config(self) -> "BrokerConfig":
        return self._controller.config

    async def rebalance_leaders(self) -> None:
        """Kafka's auto leader rebalance: after failovers, leadership piles up on the brokers
        that stayed up; move it back to each partition's preferred replica when it is in sync."""
        while True:
            await trio.sleep(self.config.leader_imbalance_check_interval_ms / 1000)
            changes = transitions.elect_preferred_leaders(
                self.state, self.config.leader_imbalance_per_broker_percentage
            )
            if changes:
                log.info("moving leadership of %d partition(s) back to preferred", len(changes))
                await self._controller.save()
                self._controller.propagate(changes)

    async def alter_partition(self, request) -> dict:
        topics = []
        changes: list[PartitionChange] = []
        for topic in request.topics:
            partitions = []
            for data in topic.partitions:
                before = self._partition_or_none(topic.topic_id, data.partition_index)
                new_isr, isr_broker_epochs = _new_isr(data)
                try:
                    new_state = transitions.alter_partition(
                        self.state,
                        topic.topic_id,
                        data.partition_index,
                        request.broker_id,
                        data.leader_epoch,
                        new_isr,
                        data.partition_epoch,
                        broker_epoch=request.broker_epoch,
                        isr_broker_epochs=isr_broker_epochs,
                    )
                except ControllerError as error:
                    partitions.append(
                        {
                            "partition_index": data.partition_index,
                            "error_code": int(error.error),
                            "leader_id": -1,
                            "leader_epoch": -1,
                            "isr": (),
                            "leader_recovery_state": 0,
                            "partition_epoch": -1,
                        }
                    )
                    continue
                if new_state.partition_epoch != data.partition_epoch:
                    known = self.state.topic_by_id(topic.topic_id)
                    assert known is not None  # alter_partition just found it
                    topic_name = known.name
                    changes.append(
                        self._after_isr_change(topic_name, data.partition_index, new_state, before)
                    )
                partitions.append(
                    {
                        "partition_index": data.partition_index,
                        "error_code": Error.NONE,
                        "leader_id": new_state.leader,
                        "leader_epoch": new_state.leader_epoch,
                        "isr": tuple(new_state.isr),
                        "leader_recovery_state": 0,
                        "partition_epoch": new_state.partition_epoch,
                    }
                )
            topics.append({"topic_id": topic.topic_id, "partitions": partitions})
        if changes:
            await self._controller.save()
            # The leader learns the result from this answer; LeaderAndIsr tells it too, in
            # case the answer is lost, and tells the followers.
            self._controller.propagate(changes)
        return {"error_code": Error.NONE, "topics": topics}

    def _partition_or_none(self, topic_id, index: int):
        topic = self.state.topic_by_id(topic_id)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def _after_isr_change(self, name: str, index: int, new_state, before) -> PartitionChange:
        """The change an accepted AlterPartition made. Replicas a completed reassignment
        dropped are to be stopped. With auto.leader.rebalance.enable, a preferred replica that
        is back in the ISR leads again at once, instead of at the next imbalance check (up to
        leader.imbalance.check.interval.seconds later: after a full restart every partition
        would stay led by whichever broker came back first for that long)."""
        removed = tuple(r for r in before.replicas if r not in new_state.replicas) if before else ()
        rejoined = before is not None and new_state.replicas[0] not in before.isr
        if self.config.auto_leader_rebalance_enable and rejoined:
            new_state = transitions.elect_preferred_leader(self.state, name, index) or new_state
        return PartitionChange(name, index, new_state, removed)

    async def elect_leaders(self, request) -> dict:
        """ElectLeaders: PREFERRED or UNCLEAN elections, decided in one step and saved once;
        answered once the brokers were told (within the request's timeout). v0 has no
        election type: it is a preferred election."""
        try:
            election_type = transitions.ElectionType(getattr(request, "election_type", 0))
        except ValueError:
            return {
                "error_code": Error.INVALID_REQUEST,
                "replica_election_results": (),
            }
        targets = (
            None
            if request.topic_partitions is None
            else [(entry.topic, list(entry.partitions)) for entry in request.topic_partitions]
        )
        results, changes = transitions.elect_leaders(self.state, election_type, targets)
        if changes:
            await self._controller.save()
            log.info(
                "%s election moved the leadership of %d partition(s)",
                election_type.name.lower(),
                len(changes),
            )
            events = self._controller.propagate(changes)
            await self._controller.await_delivery(events, request.timeout.total_seconds())
        return {
            "error_code": Error.NONE,
            "replica_election_results": [
                {
                    "topic": name,
                    "partition_result": [
                        {"partition_id": index, "error_code": code, "error_message": message}
                        for index, code, message in outcomes
                    ],
                }
                for name, outcomes in results
            ],
        }

    async def alter_partition_reassignments(self, request) -> dict:
        """AlterPartitionReassignments (KIP-455): start, replace or cancel reassignments.
        Answered once the decision is saved and sent, as Kafka answers once it is committed;
        the reassignment itself completes later, when the new replicas are in the ISR."""
        responses = []
        changes: list[PartitionChange] = []
        # v1: false refuses a target of another size (INVALID_REPLICATION_FACTOR).
        allow_rf_change = getattr(request, "allow_replication_factor_change", True)
        for topic in request.topics:
            partitions = []
            for entry in topic.partitions:
                target = None if entry.replicas is None else list(entry.replicas)
                result = {
                    "partition_index": entry.partition_index,
                    "error_code": Error.NONE,
                    "error_message": None,
                }
                try:
                    change = transitions.alter_reassignment(
                        self.state, topic.name, entry.partition_index, target, allow_rf_change
                    )
                except ControllerError as error:
                    result.update(error_code=int(error.error), error_message=error.message)
                else:
                    changes.append(change)
                    log.info(
                        "%s-%d: %s; replicas %s, adding %s, removing %s",
                        topic.name,
                        entry.partition_index,
                        "reassignment cancelled" if target is None else f"reassigning to {target}",
                        change.state.replicas,
                        change.state.adding_replicas,
                        change.state.removing_replicas,
                    )
                partitions.append(result)
            responses.append({"name": topic.name, "partitions": partitions})
        if changes:
            await self._controller.save()
            self._controller.propagate(changes)
        return {
            "error_code": Error.NONE,
            "error_message": None,
            "allow_replication_factor_change": allow_rf_change,
            "responses": responses,
        }

    async def list_partition_reassignments(self, request) -> dict:
        targets = (
            None
            if request.topics is None
            else [(topic.name, list(topic.partition_indexes)) for topic in request.topics]
        )
        return {
            "error_code": Error.NONE,
            "error_message": None,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": index,
                            "replicas": tuple(partition.replicas),
                            "adding_replicas": tuple(partition.adding_replicas),
                            "removing_replicas": tuple(partition.removing_replicas),
                        }
                        for index, partition in ongoing
                    ],
                }
                for name, ongoing in transitions.list_reassignments(self.state, targets)
            ],
        }

    async def create_topics(self, request) -> dict:
        """Create the request's topics in one decision: the state is saved once and the
        brokers get one LeaderAndIsr and one UpdateMetadata each, however many topics (a
        thousand topics used to mean a thousand full-state writes and full-cluster
        UpdateMetadata rounds, long enough to starve heartbeats). The answer waits for the
        brokers to apply it, within the request's timeout; topics they had not applied by
        then answer REQUEST_TIMED_OUT, as Kafka's do (they are created nonetheless)."""
        results = []
        names = [topic.name for topic in request.topics]
        # validate_only works on a copy, taken once for the whole request.
        target = copy.deepcopy(self.state) if request.validate_only else self.state
        changes: list[PartitionChange] = []
        created_any = False
        for topic in request.topics:
            if names.count(topic.name) > 1:
                results.append(
                    _topic_error(topic.name, Error.INVALID_REQUEST, "Duplicate topic in request")
                )
                continue
            result, topic_changes = self._create_one(
                target, topic, with_configs=request.__version__ >= 5
            )
            results.append(result)
            changes += topic_changes
            created_any = created_any or result["error_code"] == Error.NONE
            await trio.lowlevel.checkpoint()  # heartbeats and other requests get their turn
        if request.validate_only or not created_any:
            return {"topics": results}
        await self._controller.save()
        created = [r["name"] for r in results if r["error_code"] == Error.NONE]
        log.info(
            "created %d topic(s) (%d partitions): %s",
            len(created),
            len(changes),
            ", ".join(created[:5]) + (f" and {len(created) - 5} more" if len(created) > 5 else ""),
        )
        # The new topics' configs reach their brokers just before the LeaderAndIsr that
        # creates their replicas, so the brokers need not ask for them.
        self._controller.push_configs([(TOPIC_RESOURCE, name) for name in created])
        events = self._controller.propagate(changes)
        if not await self._controller.await_delivery(events, request.timeout.total_seconds()):
            for result in results:
                if result["error_code"] == Error.NONE:
                    result.update(
                        error_code=Error.REQUEST_TIMED_OUT,
                        error_message="created, but not every broker had applied it within"
                        f" the request's timeout of {request.timeout.total_seconds():g} s",
                    )
        return {"topics": results}

    def _create_one(
        self, target: ControllerState, topic, *, with_configs: bool
    ) -> tuple[dict, list[PartitionChange]]:
        configs = {config.name: config.value for config in topic.configs}
        try:
            LogConfig.from_topic_configs(LogConfig(), configs)
        except ValueError as error:
            return _topic_error(topic.name, Error.INVALID_CONFIG, str(error)), []
        assignments = (
            {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            if topic.assignments
            else None
        )
        try:
            created, changes = transitions.create_topic(
                target,
                topic.name,
                topic.num_partitions,
                topic.replication_factor,
                configs,
                assignments,
                default_partitions=self.config.num_partitions,
                default_replication_factor=self.config.default_replication_factor,
                rng=self._controller.rng,
            )
        except ControllerError as error:
            return _topic_error(topic.name, int(error.error), error.message), []
        log.debug(
            "created topic %s: %d partition(s), replicas %s",
            created.name,
            len(created.partitions),
            [p.replicas for p in created.partitions],
        )
        result = {
            "name": created.name,
            "topic_id": created.topic_id,
            "error_code": Error.NONE,
            "error_message": None,
            "num_partitions": len(created.partitions),
            "replication_factor": len(created.partitions[0].replicas),
            # Every config of the new topic and where its value comes from (v5+), as Kafka's
            # controller describes them with its own properties.
            "configs": (
                describe_topic(configs, self._controller.config_layers(), include_synonyms=False)
                if with_configs
                else ()
            ),
        }
        return result, changes

    async def create_partitions(self, request) -> dict:
        """CreatePartitions, decided like CreateTopics: one save, one round of LeaderAndIsr
        and UpdateMetadata, answered once the brokers applied it (within the timeout)."""
        target = copy.deepcopy(self.state) if request.validate_only else self.state
        results = []
        changes: list[PartitionChange] = []
        names = [topic.name for topic in request.topics]
        for topic in request.topics:
            result = {"name": topic.name, "error_code": Error.NONE, "error_message": None}
            if names.count(topic.name) > 1:
                result.update(error_code=Error.INVALID_REQUEST, error_message="Duplicate topic")
            else:
                assignments = (
                    [list(a.broker_ids) for a in topic.assignments]
                    if topic.assignments is not None
                    else None
                )
                try:
                    changes += transitions.create_partitions(
                        target, topic.name, topic.count, assignments, self._controller.rng
                    )
                except ControllerError as error:
                    result.update(error_code=int(error.error), error_message=error.message)
            results.append(result)
        if changes and not request.validate_only:
            await self._controller.save()
            log.info(
                "created %d partition(s) of %s", len(changes), sorted({c.topic for c in changes})
            )
            events = self._controller.propagate(changes)
            if not await self._controller.await_delivery(events, request.timeout.total_seconds()):
                for result in results:
                    if result["error_code"] == Error.NONE:
                        result["error_code"] = Error.REQUEST_TIMED_OUT
        return {"results": results}

    async def delete_topics(self, request) -> dict:
        if hasattr(request, "topic_names"):
            targets = [(name, None) for name in request.topic_names]
        else:
            targets = [(topic.name, topic.topic_id) for topic in request.topics]
        if not self.config.delete_topic_enable:
            # Kafka's answer: INVALID_REQUEST to clients too old to know the newer code.
            error = (
                Error.TOPIC_DELETION_DISABLED if request.__version__ >= 3 else Error.INVALID_REQUEST
            )
            return {
                "responses": [
                    {"name": name, "topic_id": topic_id, "error_code": error}
                    for name, topic_id in targets
                ]
            }
        results = []
        stopped: list[TopicState] = []
        for name, topic_id in targets:
            if name is None and topic_id is not None:
                found = self.state.topic_by_id(topic_id)
                if found is None:
                    results.append(
                        {"name": None, "topic_id": topic_id, "error_code": Error.UNKNOWN_TOPIC_ID}
                    )
                    continue
                name = found.name
            try:
                removed = transitions.delete_topic(self.state, name)
            except ControllerError as error:
                results.append(
                    {
                        "name": name,
                        "topic_id": topic_id,
                        "error_code": int(error.error),
                        "error_message": error.message,
                    }
                )
                continue
            stopped.append(removed)
            results.append({"name": name, "topic_id": removed.topic_id, "error_code": Error.NONE})
        if stopped:
            await self._controller.save()
            log.info(
                "deleted %d topic(s): %s",
                len(stopped),
                ", ".join(t.name for t in stopped[:5]) + (" ..." if len(stopped) > 5 else ""),
            )
            events = self._controller.propagate([], stopped=stopped)
            if not await self._controller.await_delivery(events, request.timeout.total_seconds()):
                for result in results:
                    if result["error_code"] == Error.NONE:
                        result["error_code"] = Error.REQUEST_TIMED_OUT
        return {"responses": results}


def _topic_error(name: str, error: int, message: str) -> dict:
    return {
        "name": name,
        "topic_id": None,
        "error_code": error,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
    }


def _new_isr(data) -> tuple[list[int], dict[int, int] | None]:
    """An AlterPartition partition's new ISR, and the broker epoch of each member where the
    request carries them: v3's NewIsrWithEpochs (KIP-903), v2's plain NewIsr (no epochs, as
    Kafka's AlterPartitionRequest.newIsrToSimpleNewIsrWithBrokerEpochs gives -1 to each)."""
    with_epochs = getattr(data, "new_isr_with_epochs", None)
    if with_epochs is None:
        return list(data.new_isr), None
    return (
        [member.broker_id for member in with_epochs],
        {member.broker_id: member.broker_epoch for member in with_epochs},
    )
