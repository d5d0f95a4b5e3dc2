"""Eligible leader replicas (KIP-966) in the controller's pure core: the ELR and last-known ELR
as Kafka 4.4's PartitionChangeBuilder keeps them, elections from the ELR when the ISR is
empty, unclean shutdowns and unclean elections, the feature off (the rules before KIP-966),
and the ELR carried to brokers (UpdateMetadata's tagged fields, DescribeTopicPartitions)."""

import io
import json
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.update_metadata.v8.request import UpdateMetadataRequest as KioUpdateMetadataV8
from kio.serial import entity_reader, entity_writer

from minibroker.common.features import ELIGIBLE_LEADER_REPLICAS_VERSION, initial_levels
from minibroker.controller import (
    NO_LEADER,
    ControllerState,
    ControllerStore,
    PartitionState,
    alter_partition,
    broker_requests,
    create_topic,
    fence_broker,
    register_broker,
)
from minibroker.controller.configs import alter_configs, elr_cleared_topics, min_isr_settings
from minibroker.controller.state import (
    ElectionType,
    clear_eligible_leader_replicas,
    effective_min_isr,
    elect_leader,
    elr_enabled,
)
from minibroker.controller.zk_layout import state_from_znodes, state_znodes
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.update_metadata_elr import UpdateMetadataRequestV8
from minibroker.replication.metadata_cache import MetadataCache


def cluster(*node_ids: int, elr: bool = True, default_min_isr: int = 1) -> ControllerState:
    state = ControllerState(default_min_isr=default_min_isr)
    state.finalized_features = initial_levels(2)
    if not elr:
        del state.finalized_features[ELIGIBLE_LEADER_REPLICAS_VERSION]
    for node_id in node_ids:
        come_back(state, node_id)
    return state


def come_back(
    state: ControllerState,
    node_id: int,
    incarnation: str | None = None,
    previous_broker_epoch: int = -1,
):
    """The broker registers (again); by default as the same process (a pause, a lost
    session), which never stopped and so shut down cleanly."""
    return register_broker(
        state,
        node_id,
        "localhost",
        9000 + node_id,
        incarnation or f"incarnation-{node_id}",
        0,
        previous_broker_epoch=previous_broker_epoch,
    )


def topic_on(state: ControllerState, *replicas: int, min_isr: int | None = 2) -> None:
    configs = {} if min_isr is None else {"min.insync.replicas": str(min_isr)}
    create_topic(state, "t", -1, -1, configs, assignments={0: list(replicas)})


def part(state: ControllerState) -> PartitionState:
    return state.topics["t"].partitions[0]


def shrink_isr(state: ControllerState, isr: list[int]) -> PartitionState:
    current = part(state)
    return alter_partition(
        state, "t", 0, current.leader, current.leader_epoch, isr, current.partition_epoch
    )


def view(partition: PartitionState) -> tuple:
    return (
        partition.leader,
        partition.isr,
        partition.eligible_leader_replicas,
        partition.last_known_elr,
    )


# --- the KIP's scenarios -------------------------------------------------------------------


def test_the_leader_shrinking_the_isr_below_min_isr_keeps_the_removed_members_eligible():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    before = part(state)
    assert view(shrink_isr(state, [1, 2])) == (1, [1, 2], [], [])  # still at min ISR
    assert view(shrink_isr(state, [1])) == (1, [1], [2], [])
    # AlterPartition's own changes bump the partition epoch only (the leader keeps its epoch).
    assert part(state).leader_epoch == before.leader_epoch
    assert part(state).partition_epoch == before.partition_epoch + 2


def test_the_leader_dying_below_min_isr_hands_over_to_a_live_elr_member():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])  # 2 and 3 stopped fetching (slow, cut off), still registered
    assert view(part(state)) == (1, [1], [2, 3], [])
    fence_broker(state, 1, False)
    # Without ELR the partition would wait for broker 1; 2 held every committed record.
    assert view(part(state)) == (2, [2], [1, 3], [])


def test_leader_death_with_an_empty_isr_elects_from_the_elr():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    fence_broker(state, 2, False)
    assert view(part(state)) == (1, [1, 3], [], [])
    fence_broker(state, 3, False)  # below min ISR: 3 was in the ISR when it last met it
    assert view(part(state)) == (1, [1], [3], [])
    epoch = part(state).leader_epoch
    fence_broker(state, 1, False)  # the last ISR member: the ISR empties, nobody can lead
    assert view(part(state)) == (NO_LEADER, [], [1, 3], [1])
    assert part(state).leader_epoch == epoch + 1
    # Broker 2 returns: it left the ISR while the ISR still met min ISR, so it may lack
    # records acknowledged after; it is not eligible.
    come_back(state, 2)
    assert view(part(state)) == (NO_LEADER, [], [1, 3], [1])
    # Broker 3 returns: an ELR member, so it leads, alone in the ISR.
    _, changes = come_back(state, 3)
    assert view(part(state)) == (3, [3], [1], [])
    assert part(state).leader_epoch == epoch + 2
    assert [(c.topic, c.partition) for c in changes] == [("t", 0)]


def test_the_isr_meeting_min_isr_again_clears_the_elr():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    assert part(state).eligible_leader_replicas == [2, 3]
    assert view(shrink_isr(state, [1, 3])) == (1, [1, 3], [], [])


def test_feature_off_keeps_the_last_isr_member_and_no_elr():
    state = cluster(1, 2, 3, elr=False)
    topic_on(state, 1, 2, 3)
    assert not elr_enabled(state)
    shrink_isr(state, [1])
    assert view(part(state)) == (1, [1], [], [])
    fence_broker(state, 1, False)
    assert view(part(state)) == (NO_LEADER, [1], [], [])  # waits for broker 1
    come_back(state, 3)
    assert view(part(state)) == (NO_LEADER, [1], [], [])
    come_back(state, 1)
    assert view(part(state)) == (1, [1], [], [])


def test_a_restarted_process_is_an_unclean_shutdown_and_loses_its_eligibility():
    """Kafka's handleBrokerUncleanShutdown: a returning broker that cannot show a clean
    shutdown (minibroker's brokers never can: BrokerRegistration v0) leaves every ISR and ELR
    at once, before it could be elected."""
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    fence_broker(state, 2, False)
    fence_broker(state, 3, False)
    fence_broker(state, 1, False)
    assert view(part(state)) == (NO_LEADER, [], [1, 2, 3], [1])
    come_back(state, 3, incarnation="restarted-3")
    assert view(part(state)) == (NO_LEADER, [], [1, 2], [1])
    come_back(state, 2, incarnation="restarted-2")
    assert view(part(state)) == (NO_LEADER, [], [1], [1])
    # The same process coming back (a pause) keeps its eligibility and leads.
    come_back(state, 1)
    assert view(part(state)) == (1, [1], [], [])


def test_a_restart_after_a_clean_shutdown_keeps_the_eligibility():
    """Kafka 4.4's ClusterControlManager: a new process whose registration carries the
    broker epoch the controller knows (its clean-shutdown markers held it) stopped cleanly
    and stays in the ELR, so it is elected; a stale or missing epoch is an unclean one."""
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    for node_id in (2, 3, 1):
        fence_broker(state, node_id, False)
    assert view(part(state)) == (NO_LEADER, [], [1, 2, 3], [1])
    epochs = {node_id: state.brokers[node_id].broker_epoch for node_id in (1, 2, 3)}
    come_back(state, 3, incarnation="restarted-3", previous_broker_epoch=epochs[3] - 1)
    assert view(part(state)) == (NO_LEADER, [], [1, 2], [1])
    come_back(state, 2, incarnation="restarted-2", previous_broker_epoch=epochs[2])
    assert view(part(state)) == (2, [2], [1], [])


def test_the_last_known_leader_is_elected_when_the_isr_and_the_elr_are_empty():
    """With the ISR and the ELR both empty, Kafka 4.4 elects the last-known leader
    (PartitionChangeBuilder.canElectLastKnownLeader, an unclean election of the replica that
    led last): the ISR becomes that replica, the ELR lists are cleared."""
    state = cluster(1, 2)
    topic_on(state, 1, 2)
    fence_broker(state, 2, False)
    fence_broker(state, 1, False)
    assert view(part(state)) == (NO_LEADER, [], [1, 2], [1])
    come_back(state, 2, incarnation="restarted-2")
    come_back(state, 1, incarnation="restarted-1")
    assert view(part(state)) == (1, [1], [], [])


def test_unclean_election_prefers_the_elr_and_clears_it_when_it_must_go_further():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    fence_broker(state, 3, False)
    fence_broker(state, 2, False)
    fence_broker(state, 1, False)
    assert view(part(state)) == (NO_LEADER, [], [1, 2, 3], [1])
    # Clean first: an ELR member elected by ElectLeaders UNCLEAN is a clean election (its
    # registration elects it on its own; the operator's election finds it already leading).
    come_back(state, 3)
    assert view(part(state)) == (3, [3], [1, 2], [])
    # Nothing eligible alive: the unclean election takes any live replica and clears the ELR.
    state2 = cluster(1, 2, 3, 4)
    create_topic(state2, "t", -1, -1, {"min.insync.replicas": "2"}, assignments={0: [1, 2, 4]})
    shrink_isr(state2, [1])
    for node_id in (2, 4, 1):
        fence_broker(state2, node_id, False)
    assert view(part(state2)) == (NO_LEADER, [], [1, 2, 4], [1])
    come_back(state2, 2, incarnation="restarted-2")  # no longer eligible
    assert view(part(state2)) == (NO_LEADER, [], [1, 4], [1])
    assert view(elect_leader(state2, "t", 0, ElectionType.UNCLEAN)) == (2, [2], [], [])


def test_unclean_leader_election_config_elects_the_elr_first():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    state.topics["t"].configs["unclean.leader.election.enable"] = "true"
    shrink_isr(state, [1])  # ELR [2, 3]
    fence_broker(state, 2, True)
    fence_broker(state, 1, True)
    # 3 is alive and eligible: elected cleanly although unclean election is allowed.
    assert view(part(state)) == (3, [3], [1, 2], [])


def test_min_isr_comes_from_the_topic_then_the_cluster_then_the_controller():
    state = cluster(1, 2, 3, default_min_isr=3)
    topic_on(state, 1, 2, 3, min_isr=None)
    topic, partition = state.topics["t"], part(state)
    assert effective_min_isr(state, topic, partition) == 3
    state.broker_configs[""] = {"min.insync.replicas": "2"}
    assert effective_min_isr(state, topic, partition) == 2
    topic.configs["min.insync.replicas"] = "5"  # never more than the replicas
    assert effective_min_isr(state, topic, partition) == 3
    topic.configs["min.insync.replicas"] = "1"
    assert effective_min_isr(state, topic, partition) == 1
    # At min ISR 1 the ELR only ever holds the last ISR member once it is gone.
    assert view(shrink_isr(state, [1])) == (1, [1], [], [])
    fence_broker(state, 1, False)
    assert view(part(state)) == (NO_LEADER, [], [1], [1])


def test_turning_the_feature_off_clears_every_elr():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    fence_broker(state, 2, False)
    fence_broker(state, 3, False)
    fence_broker(state, 1, False)
    epoch = part(state).partition_epoch
    state.finalized_features[ELIGIBLE_LEADER_REPLICAS_VERSION] = 0
    changes = clear_eligible_leader_replicas(state)
    assert [(c.topic, c.partition) for c in changes] == [("t", 0)]
    assert view(part(state)) == (NO_LEADER, [], [], [])
    assert part(state).partition_epoch == epoch + 1
    assert clear_eligible_leader_replicas(state) == []


# --- min.insync.replicas changes (Kafka 4.4's ConfigurationControlManager) -----------------


def alter(state: ControllerState, resource_type: int, name: str, *ops, incremental=True):
    """One AlterConfigs resource through the controller's config core: (error, message)."""
    configs = [SimpleNamespace(name=n, config_operation=op, value=v) for n, op, v in ops]
    resource = SimpleNamespace(resource_type=resource_type, resource_name=name, configs=configs)
    (result,), _ = alter_configs(state, [resource], incremental=incremental, validate_only=False)
    return result["error_code"], result["error_message"]


BROKER, TOPIC = 4, 2
SET, DELETE = 0, 1
BROKER_LEVEL = "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
CLUSTER_LEVEL = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."


def test_broker_and_cluster_min_isr_refusals_while_elr_is_on():
    """isDisallowedBrokerMinIsrTransition / isDisallowedClusterMinIsrTransition, INVALID_CONFIG
    with Kafka's messages; nothing refused with the feature off."""
    state = cluster(1, 2, 3)
    assert alter(state, BROKER, "1", ("min.insync.replicas", SET, "2")) == (
        Error.INVALID_CONFIG,
        BROKER_LEVEL,
    )
    assert alter(state, BROKER, "1", ("min.insync.replicas", DELETE, None))[0] == Error.NONE
    assert alter(state, BROKER, "", ("min.insync.replicas", DELETE, None)) == (
        Error.INVALID_CONFIG,
        CLUSTER_LEVEL,
    )
    # Other cluster configs may change; setting the cluster value too, not deleting it.
    assert alter(state, BROKER, "", ("log.retention.ms", SET, "7000"))[0] == Error.NONE
    assert alter(state, BROKER, "", ("min.insync.replicas", SET, "2"))[0] == Error.NONE
    assert state.broker_configs[""]["min.insync.replicas"] == "2"
    refused = alter(state, BROKER, "", ("log.retention.ms", SET, "7000"), incremental=False)
    assert refused == (Error.INVALID_CONFIG, CLUSTER_LEVEL)
    assert alter(state, BROKER, "", ("min.insync.replicas", DELETE, None))[1] == CLUSTER_LEVEL
    assert state.broker_configs[""]["min.insync.replicas"] == "2"
    off = cluster(1, 2, 3, elr=False)
    assert alter(off, BROKER, "1", ("min.insync.replicas", SET, "2"))[0] == Error.NONE
    assert alter(off, BROKER, "", ("min.insync.replicas", DELETE, None))[0] == Error.NONE


def test_a_min_isr_change_names_the_topics_whose_elr_it_clears():
    """createClearElrRecordsAsNeeded: a topic's change clears that topic's ELRs, the cluster
    value's every topic's (None), with the feature on only; an unchanged value nothing."""
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    keys = [(TOPIC, "t"), (BROKER, "")]
    before = min_isr_settings(state, keys)
    assert alter(state, TOPIC, "t", ("min.insync.replicas", SET, "2"))[0] == Error.NONE
    assert elr_cleared_topics(state, before, min_isr_settings(state, keys)) == set()
    assert alter(state, TOPIC, "t", ("min.insync.replicas", SET, "1"))[0] == Error.NONE
    assert elr_cleared_topics(state, before, min_isr_settings(state, keys)) == {"t"}
    assert alter(state, BROKER, "", ("min.insync.replicas", SET, "3"))[0] == Error.NONE
    assert elr_cleared_topics(state, before, min_isr_settings(state, keys)) is None
    assert part(state).eligible_leader_replicas == [2, 3]
    changes = clear_eligible_leader_replicas(state, {"t", "gone"})
    assert [(c.topic, c.partition) for c in changes] == [("t", 0)]
    assert view(part(state)) == (1, [1], [], [])
    off = cluster(1, 2, 3, elr=False)
    assert elr_cleared_topics(off, {(TOPIC, "t"): "2"}, {(TOPIC, "t"): "1"}) == set()


# --- no acknowledged record is lost --------------------------------------------------------

EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["produce", "fence", "return", "shrink", "expand"]),
        st.sampled_from([1, 2, 3]),
    ),
    max_size=16,
)


@settings(max_examples=300, deadline=None)
@given(events=EVENTS, elr=st.booleans())
# Broker 3 falls behind while the ISR meets min ISR; an acknowledged record; then the ISR
# loses broker 2 and its leader: only 2 (dead) and 1 (dead) may lead, never 3.
@example(events=[("shrink", 3), ("produce", 1), ("fence", 2), ("fence", 1)], elr=True)
def test_no_acknowledged_record_is_lost_whatever_the_failures(events, elr):
    """A model of the data path beside the controller: acks=all appends to every ISR member
    and is acknowledged only while the ISR meets min ISR (2 of 3); a leader shrinks its ISR
    (AlterPartition) or adds a live follower after it copied the leader's log; brokers die and
    come back (the same process, log intact). Whoever the controller elects, from the ISR or
    from the ELR, holds every acknowledged record at its offset."""
    state = cluster(1, 2, 3, elr=elr)
    topic_on(state, 1, 2, 3)
    logs: dict[int, list[int]] = {1: [], 2: [], 3: []}
    acknowledged: list[int] = []
    for number, (event, broker) in enumerate(events):
        p = part(state)
        if event == "produce" and p.leader != NO_LEADER:
            if len(p.isr) >= 2:  # else NOT_ENOUGH_REPLICAS: nothing appended
                for member in p.isr:
                    logs[member].append(number)
                acknowledged.append(number)
        elif event == "fence" and state.is_live(broker):
            fence_broker(state, broker, False)
        elif event == "return" and not state.is_live(broker):
            come_back(state, broker)
        elif event == "shrink" and p.leader not in (NO_LEADER, broker) and broker in p.isr:
            shrink_isr(state, [r for r in p.isr if r != broker])
        elif event == "expand" and p.leader != NO_LEADER and broker not in p.isr:
            # A live follower truncated to and caught up with the leader's log joins the ISR.
            live = state.is_live(broker)
            logs[broker] = list(logs[p.leader]) if live else logs[broker]
            if live:
                shrink_isr(state, [*p.isr, broker])
        p = part(state)
        if p.leader != NO_LEADER:
            leader_log = logs[p.leader]
            assert leader_log[: len(acknowledged)] == acknowledged, (p, logs)
        for member in p.eligible_leader_replicas:
            assert logs[member][: len(acknowledged)] == acknowledged, (p, logs)


# --- persisted and told to brokers ----------------------------------------------------------


def elr_state() -> ControllerState:
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    shrink_isr(state, [1])
    for node_id in (2, 3, 1):
        fence_broker(state, node_id, False)
    return state


def test_the_elr_survives_a_controller_restart(tmp_path):
    state = elr_state()
    store = ControllerStore(tmp_path / "controller-state.json")
    store.save(state)
    saved = json.loads((tmp_path / "controller-state.json").read_text())
    assert saved["topics"][0]["partitions"][0]["eligible_leader_replicas"] == [1, 2, 3]
    assert view(store.load().topics["t"].partitions[0]) == (NO_LEADER, [], [1, 2, 3], [1])
    znodes = state_znodes(state, {})
    loaded = state_from_znodes(znodes, state.controller_epoch)
    assert view(loaded.topics["t"].partitions[0]) == (NO_LEADER, [], [1, 2, 3], [1])


def encoded(entity_class, request) -> memoryview:
    out = io.BytesIO()
    entity_writer(entity_class)(out, request)
    return memoryview(out.getvalue())


def test_update_metadata_carries_the_elr_as_tagged_fields():
    state = elr_state()
    request = broker_requests.update_metadata(state, 0)(2)
    assert isinstance(request, UpdateMetadataRequestV8)
    raw = encoded(UpdateMetadataRequestV8, request)
    ours, size = entity_reader(UpdateMetadataRequestV8)(raw, 0)
    assert size == len(raw)
    (partition,) = ours.topic_states[0].partition_states
    assert (partition.eligible_leader_replicas, partition.last_known_elr) == ((1, 2, 3), (1,))
    cache = MetadataCache()
    cache.update(ours)
    cached = cache.topic("t").partitions[0]
    assert (cached.eligible_leader_replicas, cached.last_known_elr) == ((1, 2, 3), (1,))
    assert codec.request_class(6, 8) is UpdateMetadataRequestV8


def test_without_an_elr_update_metadata_is_kafkas_v8_byte_for_byte():
    """Empty lists are the tags' defaults, which a flexible version does not write: a
    partition without ELR is encoded exactly as Kafka's (kio's) v8 encodes it."""
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    request = broker_requests.update_metadata(state, 0)(2)
    ours = encoded(UpdateMetadataRequestV8, request)
    plain, size = entity_reader(KioUpdateMetadataV8)(ours, 0)
    assert size == len(ours)
    assert bytes(encoded(KioUpdateMetadataV8, plain)) == bytes(ours)


@pytest.mark.parametrize("elr", [True, False])
def test_a_new_cluster_finalizes_the_feature_at_1(elr):
    levels = initial_levels(2)
    assert levels[ELIGIBLE_LEADER_REPLICAS_VERSION] == 1
    assert elr_enabled(cluster(1, elr=elr)) is elr
