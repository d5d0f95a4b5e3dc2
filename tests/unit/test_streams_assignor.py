"""The streams task assignor's rules (broker/coordinator/group/streams_assignor.py)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.coordinator.group.streams_assignor import (
    AssignmentConfigs,
    MemberSpec,
    all_tasks,
    assign,
)


def specs(n, processes=None):
    return {
        f"m{i}": MemberSpec(process_id=processes[i] if processes else f"p{i}") for i in range(n)
    }


def previous(members, result):
    return {
        m: MemberSpec(
            process_id=spec.process_id,
            client_tags=spec.client_tags,
            active=frozenset(result[m].active),
            standby=frozenset(result[m].standby),
            warmup=frozenset(result[m].warmup),
        )
        for m, spec in members.items()
    }


def check_invariants(result, members, counts, stateful, replicas, warmups_expected=False):
    tasks = all_tasks(counts)
    owners = [t for a in result.values() for t in a.active]
    assert sorted(owners) == tasks  # every active task exactly once
    for a in result.values():
        assert not (a.active & a.standby)
        assert not (a.active & a.warmup)
        assert not (a.standby & a.warmup)
        assert all(t[0] in stateful for t in a.standby | a.warmup)
    # never two copies of one task on one process
    for task in tasks:
        processes = [
            members[m].process_id for m, a in result.items() if task in a.active | a.standby
        ]
        assert len(processes) == len(set(processes))
    if not warmups_expected:
        sizes = [len(a.active) for a in result.values()]
        assert max(sizes) - min(sizes) <= 1


def test_even_spread_and_no_members():
    assert assign({}, {"0": 4}, set()) == {}
    result = assign(specs(3), {"0": 4, "1": 3}, set())
    assert sorted(len(a.active) for a in result.values()) == [2, 2, 3]


def test_sticky_when_nothing_changed_and_on_join():
    members = specs(2)
    counts = {"0": 6}
    first = assign(members, counts, {"0"}, AssignmentConfigs(num_standby_replicas=1))
    again = assign(previous(members, first), counts, {"0"}, AssignmentConfigs(1))
    assert again == first
    # A third member joins: the two keep 2 of their 3 tasks each, the newcomer gets 2.
    grown = previous(members, first) | {"m2": MemberSpec(process_id="p2")}
    third = assign(grown, counts, set())
    for m in ("m0", "m1"):
        assert len(third[m].active) == 2 and third[m].active <= first[m].active
    assert len(third["m2"].active) == 2


def test_a_lost_members_stateful_task_goes_to_its_standby_before_stateless_tasks_fill_up():
    """Kafka's StickyTaskAssignor: previous active tasks first, then each task to a member
    that held it as a standby (with room), then the rest. The word count after one of three
    instances died: its stateless 0_2 must not take the room of m0, which has 1_2's state."""
    counts = {"0": 3, "1": 3}
    survivors = {
        "m0": MemberSpec(
            process_id="p0",
            active=frozenset({("0", 0), ("1", 0)}),
            standby=frozenset({("1", 2)}),
        ),
        "m1": MemberSpec(
            process_id="p1",
            active=frozenset({("0", 1), ("1", 1)}),
            standby=frozenset({("1", 0)}),
        ),
    }
    result = assign(survivors, counts, {"1"}, AssignmentConfigs(num_standby_replicas=1))
    assert ("1", 2) in result["m0"].active
    assert result["m0"].active >= {("0", 0), ("1", 0)}
    assert result["m1"].active >= {("0", 1), ("1", 1), ("0", 2)}
    check_invariants(result, survivors, counts, {"1"}, 1)


def test_standby_never_with_active_nor_twice_per_process():
    # Two members of one process, one of another: one standby per task, on the other process.
    members = specs(3, processes=["a", "a", "b"])
    result = assign(members, {"0": 3}, {"0"}, AssignmentConfigs(num_standby_replicas=2))
    check_invariants(result, members, {"0": 3}, {"0"}, 2)
    standbys = sum(len(a.standby) for a in result.values())
    assert standbys == 3  # only one other process per task: the second copy has nowhere to go


def test_stateless_tasks_get_no_standby():
    result = assign(specs(2), {"0": 2, "1": 2}, {"1"}, AssignmentConfigs(num_standby_replicas=1))
    assert {t for a in result.values() for t in a.standby} == {("1", 0), ("1", 1)}


def test_lost_task_goes_to_its_standby():
    members = specs(3)
    counts = {"0": 3}
    first = assign(members, counts, {"0"}, AssignmentConfigs(num_standby_replicas=1))
    prev = previous(members, first)
    gone = next(iter(first["m0"].active))
    del prev["m0"]
    second = assign(prev, counts, {"0"}, AssignmentConfigs(num_standby_replicas=1))
    (holder,) = [m for m, a in first.items() if gone in a.standby]
    assert gone in second[holder].active


def test_warmup_when_the_new_owner_is_not_caught_up():
    counts = {"0": 4}
    old = MemberSpec("p0", active=frozenset(all_tasks(counts)))
    new = MemberSpec("p1")
    configs = AssignmentConfigs(max_warmup_replicas=1, acceptable_recovery_lag=100)
    result = assign({"m0": old, "m1": new}, counts, {"0"}, configs)
    assert len(result["m0"].active) == 3 and len(result["m1"].active) == 1
    assert len(result["m1"].warmup) == 1
    # Once caught up (lag within acceptable.recovery.lag), the task moves.
    (warm,) = result["m1"].warmup
    caught_up = MemberSpec("p1", warmup=frozenset({warm}), lags={warm: 5})
    old2 = MemberSpec("p0", active=frozenset(result["m0"].active))
    later = assign({"m0": old2, "m1": caught_up}, counts, {"0"}, configs)
    assert warm in later["m1"].active and not later["m1"].warmup
    # Stateless tasks move at once.
    stateless = assign({"m0": old, "m1": new}, counts, set(), configs)
    assert len(stateless["m1"].active) == 2 and not stateless["m1"].warmup


def test_client_tags_spread_standbys():
    members = {
        "m0": MemberSpec("p0", client_tags={"zone": "a"}),
        "m1": MemberSpec("p1", client_tags={"zone": "a"}),
        "m2": MemberSpec("p2", client_tags={"zone": "b"}),
    }
    result = assign(members, {"0": 1}, {"0"}, AssignmentConfigs(num_standby_replicas=1))
    (active,) = [m for m, a in result.items() if a.active]
    (standby,) = [m for m, a in result.items() if a.standby]
    assert members[active].client_tags != members[standby].client_tags


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 6))
    processes = [f"p{draw(st.integers(0, n - 1))}" for _ in range(n)]
    counts = {str(i): draw(st.integers(0, 6)) for i in range(draw(st.integers(1, 3)))}
    stateful = {s for s in counts if draw(st.booleans())}
    replicas = draw(st.integers(0, 2))
    tasks = all_tasks(counts)
    members = {}
    for i in range(n):
        active = draw(st.sets(st.sampled_from(tasks), max_size=4)) if tasks else set()
        members[f"m{i}"] = MemberSpec(processes[i], active=frozenset(active))
    return members, counts, stateful, replicas


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_properties(scenario):
    members, counts, stateful, replicas = scenario
    configs = AssignmentConfigs(num_standby_replicas=replicas, max_warmup_replicas=0)
    result = assign(members, counts, stateful, configs)
    check_invariants(result, members, counts, stateful, replicas)
    # Stickiness: run again on its own output, nothing moves.
    assert assign(previous(members, result), counts, stateful, configs) == result
    # A member keeps its previous tasks as far as its quota allows.
    base = len(all_tasks(counts)) // len(members)
    for m, spec in members.items():
        if len(spec.active) <= base and not any(
            t in other.active for o, other in members.items() if o < m for t in spec.active
        ):
            assert spec.active & set(all_tasks(counts)) <= result[m].active


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.integers(0, 3))
def test_properties_with_warmups(scenario, warmups):
    members, counts, stateful, replicas = scenario
    configs = AssignmentConfigs(num_standby_replicas=replicas, max_warmup_replicas=warmups)
    result = assign(members, counts, stateful, configs)
    check_invariants(result, members, counts, stateful, replicas, warmups_expected=True)
    assert sum(len(a.warmup) for a in result.values()) <= warmups
