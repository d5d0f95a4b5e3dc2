"""A schema id the registry's copy does not hold yet is not a dead letter (issue 38's kill -9
fault): the Iceberg writer's ``find_schema`` (broker/iceberg/service.py) answers None only
once the copy has applied `_schemas` up to its end as its leader knows it
(``SchemaRegistryService.caught_up_to_end``, the leader's log end asked with a ListOffsets as
a follower asks it, replication/partition_metadata_client.py), and raises while that cannot
be known, so the commit fails and is retried instead of sending the record to the
dead-letter table.

In process under trio's MockClock, on real replica managers (tests/unit/replication_harness.py,
whose connections answer Fetch and ListOffsets as the leader's handlers do) and the real
registry services: broker 1 leads `_schemas` and registers a schema (acks=-1 with ISR [1]);
broker 2 then becomes a follower whose fetches are held, as a broker just restarted or just
made a follower has not fetched yet. Its copy is up to its own high watermark (0), so the
former lookup (catch up to the local high watermark, then ask) answered "not in the schema
registry", and the writer dead-lettered whole partitions of records whose schema had been
registered before they were produced."""

import json
import struct
import uuid
from types import SimpleNamespace

import httpx
import pytest
import trio

from minibroker.apis.produce import _validate_schemas
from minibroker.common.names import SCHEMAS_TOPIC
from minibroker.iceberg.service import find_schema
from minibroker.protocol.errors import Error
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.protocol.records import Record, encode_batch
from minibroker.replication.metadata_cache import BrokerEndpoint, PartitionMetadata, TopicMetadata
from minibroker.replication.partition_metadata_client import PartitionMetadataClient
from minibroker.schema_registry.access import subject_resource
from minibroker.schema_registry.rest import USER_SCOPE_KEY, build_app
from minibroker.schema_registry.service import SchemaRegistryService
from minibroker.schema_registry.state import RegistryError
from tests.unit.replication_harness import LeaderConnection, leader_and_isr, make_broker

SCHEMAS_ID = uuid.UUID(int=11)
USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "number", "type": "long"}],
}
SCHEMAS_CONFIG = {"cleanup.policy": "compact", "min.insync.replicas": "1"}


class Gate:
    """Holds broker 2's fetches from its leader until opened; can make its ListOffsets fail
    as an unreachable leader's would."""

    def __init__(self) -> None:
        self.open = trio.Event()
        self.unreachable = False


class HeldConnection(LeaderConnection):
    def __init__(self, leader, gate: Gate) -> None:
        super().__init__(leader)
        self.gate = gate

    async def request_body(self, api_key: int, version: int, body: bytes):
        await self.gate.open.wait()
        return await super().request_body(api_key, version, body)

    async def request(self, request):
        if self.gate.unreachable:
            raise OSError("connection refused")
        return await super().request(request)


async def no_create_topics(request) -> Error:
    raise AssertionError("`_schemas` exists: nothing to create")


@pytest.fixture
async def registries(tmp_path, nursery, autojump_clock):
    """Broker 1 leads `_schemas` (ISR [1]) and has registered USER; broker 2 is a follower of
    it whose fetches wait for ``gate``; both run the registry, broker 2's wired to the
    leader's log end as the node wires it."""
    by_id: dict = {}
    one = make_broker(tmp_path, 1, by_id)
    two = make_broker(tmp_path, 2, by_id)
    by_id.update({1: one, 2: two})
    gate = Gate()

    async def held_connect(host, port, client_id, security):
        return HeldConnection(by_id[int(host)], gate)

    two.connect = held_connect
    for replicas in (one, two):
        replicas.announced_topic_configs[SCHEMAS_TOPIC] = dict(SCHEMAS_CONFIG)
        replicas.metadata.topics[SCHEMAS_TOPIC] = TopicMetadata(
            SCHEMAS_TOPIC, SCHEMAS_ID, {0: PartitionMetadata(1, 1, (1, 2), (1,), ())}
        )
        replicas.metadata.brokers[1] = BrokerEndpoint(1, "1", 9092)
        await nursery.start(replicas.run)
    await one.apply_leader_and_isr(
        leader_and_isr(1, 1, [1], [1, 2], topic=SCHEMAS_TOPIC, topic_id=SCHEMAS_ID)
    )
    writer = SchemaRegistryService(one.config, one, no_create_topics)
    await nursery.start(writer.run)
    schema_id = await writer.write(
        lambda registry: registry.register(f"{SCHEMAS_TOPIC}-users-value", "AVRO", json.dumps(USER))
    )
    assert writer.schema(schema_id) is not None
    assert one.hosted_partition(SCHEMAS_TOPIC, 0)[0].high_watermark == writer.position > 0

    await two.apply_leader_and_isr(
        leader_and_isr(1, 1, [1], [1, 2], topic=SCHEMAS_TOPIC, topic_id=SCHEMAS_ID)
    )
    leader_end = PartitionMetadataClient(two.config, two)
    await nursery.start(leader_end.run)
    follower = SchemaRegistryService(two.config, two, no_create_topics)
    follower.leader_log_end = leader_end.log_end_offset
    await nursery.start(follower.run)
    return follower, schema_id, gate


async def test_an_id_registered_before_is_not_absent_while_the_copy_lags(
    registries, autojump_clock
):
    follower, schema_id, gate = registries
    # The follower's copy is up to its own high watermark (it has not fetched): empty.
    await follower.caught_up()
    assert follower.position == 0 and follower.schema(schema_id) is None
    # Not known yet is not absent: the lookup waits for the leader's end, then says it
    # cannot tell (the commit fails and is retried), never "not registered".
    with pytest.raises(RegistryError) as raised:
        await find_schema(follower, schema_id)
    assert raised.value.code == 50002
    gate.open.set()
    found = await find_schema(follower, schema_id)
    assert found is not None
    schema_type, text, references = found
    assert schema_type == "AVRO" and json.loads(text) == USER and references == {}
    # An id above every registered one is absent, once the copy is at the leader's end.
    assert await find_schema(follower, schema_id + 1) is None


async def test_an_unreachable_leader_leaves_an_unknown_id_undecided(registries, autojump_clock):
    follower, schema_id, gate = registries
    gate.unreachable = True
    with pytest.raises(RegistryError) as raised:
        await find_schema(follower, schema_id)
    assert raised.value.code == 50001
    # Reachable again, with fetches flowing: the id is found.
    gate.unreachable = False
    gate.open.set()
    assert await find_schema(follower, schema_id) is not None


async def test_without_any_schemas_topic_nothing_was_registered(tmp_path, nursery, autojump_clock):
    """A cluster where no schema was ever registered has no `_schemas`: an id is absent."""
    replicas = make_broker(tmp_path, 1)
    await nursery.start(replicas.run)
    service = SchemaRegistryService(replicas.config, replicas, no_create_topics)
    await nursery.start(service.run)
    assert await find_schema(service, 1) is None


@pytest.mark.parametrize(
    ("controller_live", "asked"), [(3, [3]), (5, [3]), (2, [3, 2]), (1, [3, 2, 1])]
)
async def test_schemas_gets_the_replicas_the_controller_can_give(
    tmp_path, nursery, autojump_clock, controller_live, asked
):
    """`_schemas` is made with min(3, live brokers) replicas, the live brokers as the
    controller counts them (it refuses more with INVALID_REPLICATION_FACTOR), not as this
    broker's metadata cache lists them: right after a cluster starts the cache may list fewer
    (here one broker), and counted from it `_schemas` got 2 replicas on 3 brokers, so the
    third broker's copy stayed empty and its Iceberg writer dead-lettered every record."""
    replicas = make_broker(tmp_path, 1)
    replicas.announced_topic_configs[SCHEMAS_TOPIC] = dict(SCHEMAS_CONFIG)
    await nursery.start(replicas.run)
    replicas.metadata.brokers[1] = BrokerEndpoint(1, "1", 9092)
    requested: list[int] = []

    async def controller(request) -> Error:
        (topic,) = request.topics
        assert topic.name == SCHEMAS_TOPIC and topic.num_partitions == 1
        requested.append(topic.replication_factor)
        if topic.replication_factor > controller_live:
            return Error.INVALID_REPLICATION_FACTOR
        # Made: the controller's LeaderAndIsr names this broker the leader.
        replicas.metadata.topics[SCHEMAS_TOPIC] = TopicMetadata(
            SCHEMAS_TOPIC, SCHEMAS_ID, {0: PartitionMetadata(1, 1, (1,), (1,), ())}
        )
        await replicas.apply_leader_and_isr(
            leader_and_isr(1, 1, [1], [1], topic=SCHEMAS_TOPIC, topic_id=SCHEMAS_ID)
        )
        return Error.NONE

    service = SchemaRegistryService(replicas.config, replicas, controller)
    await nursery.start(service.run)
    schema_id = await service.write(
        lambda registry: registry.register("users-value", "AVRO", json.dumps(USER))
    )
    assert requested == asked
    assert service.schema(schema_id) is not None


# -- schema validation on produce, and the registry's reads by id, on the lagging copy -------

VALIDATED_TOPIC = f"{SCHEMAS_TOPIC}-users"  # its values' subject is the registered one


def framed_value(schema_id: int) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + b"payload"


async def validate(service, schema_id: int, timeout_s: float = 30.0) -> dict | None:
    """apis/produce.py's check of one partition of a topic with
    confluent.value.schema.validation=true, led by the broker of ``service``: its refusal,
    None when the records may be appended."""
    batch = encode_batch([Record(0, 0, None, framed_value(schema_id))])
    refused: list[dict | None] = [None]
    await _validate_schemas(
        SimpleNamespace(schema_registry=service),
        VALIDATED_TOPIC,
        [PartitionProduceData(0, memoryview(batch))],
        refused,
        False,
        True,
        timeout_s,
    )
    return refused[0]


def count_leader_asks(service) -> list[int]:
    """How many times the service asked `_schemas`' leader where the log ends."""
    asked = [0]
    ask = service.leader_log_end

    async def counted(topic: str, index: int) -> int | None:
        asked[0] += 1
        return await ask(topic, index)

    service.leader_log_end = counted
    return asked


async def test_produce_validation_refuses_an_id_only_once_the_copy_has_caught_up(
    registries, autojump_clock
):
    """A record with a schema id registered before it was produced is not INVALID_RECORD
    while this broker's copy lags: NOT_ENOUGH_REPLICAS (retriable) while the leader's end
    cannot be reached in time, accepted once it is; an id absent at the leader's end is
    INVALID_RECORD. A known id costs no question to the leader."""
    follower, schema_id, gate = registries
    asked = count_leader_asks(follower)
    await follower.caught_up()
    assert follower.schema(schema_id) is None
    started = trio.current_time()
    refused = await validate(follower, schema_id, timeout_s=2.0)
    assert refused is not None and refused["error_code"] == Error.NOT_ENOUGH_REPLICAS
    assert f"schema id {schema_id} is not registered" in refused["error_message"]
    assert "retry" in refused["error_message"]
    # Within the produce request's timeout (2 s of MockClock time, and a few ms the
    # replica managers' timers take), not the registry's 5 s read timeout.
    assert 2.0 <= trio.current_time() - started < 2.1
    assert asked[0] == 1
    gate.open.set()
    assert await validate(follower, schema_id) is None
    assert follower.schema(schema_id) is not None
    # Known now: a dict lookup, no ListOffsets to the leader.
    asked[0] = 0
    for _ in range(3):
        assert await validate(follower, schema_id) is None
    assert asked[0] == 0
    refused = await validate(follower, schema_id + 1)
    assert refused is not None and refused["error_code"] == Error.INVALID_RECORD
    assert f"schema id {schema_id + 1} is not registered" in refused["error_message"]
    assert asked[0] == 1


async def test_produce_validation_with_an_unreachable_leader_answers_retriable(
    registries, autojump_clock
):
    follower, schema_id, gate = registries
    gate.unreachable = True
    refused = await validate(follower, schema_id)
    assert refused is not None and refused["error_code"] == Error.NOT_ENOUGH_REPLICAS
    assert "did not say where its log ends" in refused["error_message"]
    gate.unreachable = False
    gate.open.set()
    assert await validate(follower, schema_id) is None


async def test_reads_by_id_wait_for_the_leaders_end_rather_than_answer_404(
    registries, autojump_clock
):
    """GET /schemas/ids/N on a copy that lags: not 404 for an id registered before the
    request; Confluent's 50002 while the copy cannot reach the leader's end, the schema once
    it does; 404 (40403) for an id absent at the leader's end."""
    follower, schema_id, gate = registries
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(follower)), base_url="http://registry"
    )
    async with client:
        paths = [
            f"/schemas/ids/{schema_id}",
            f"/schemas/ids/{schema_id}/schema",
            f"/schemas/ids/{schema_id}/versions",
            f"/schemas/ids/{schema_id}/subjects",
        ]
        for path in paths:
            answer = await client.get(path)
            assert answer.status_code == 500, path
            assert answer.json()["error_code"] == 50002, path
        gate.open.set()
        answers = [await client.get(path) for path in paths]
        assert [answer.status_code for answer in answers] == [200] * 4
        assert json.loads(answers[0].json()["schema"]) == USER
        assert json.loads(answers[1].text) == USER
        assert answers[2].json() == [{"subject": f"{VALIDATED_TOPIC}-value", "version": 1}]
        assert answers[3].json() == [f"{VALIDATED_TOPIC}-value"]
        answer = await client.get(f"/schemas/ids/{schema_id + 1}")
        assert answer.status_code == 404 and answer.json()["error_code"] == 40403


class SubjectAcls:
    """The broker's authorizer as the registry asks it: READ on the named subjects only."""

    def __init__(self, readable: set[str]) -> None:
        self.readable = readable
        self.asked: list[str] = []

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        self.asked.append(name)
        return name in self.readable


async def test_a_read_by_id_after_catching_up_is_still_authorized(registries, autojump_clock):
    """With basic authentication and ACLs, the subjects holding an id are looked for after
    the copy has caught up: a user without READ on them gets 40301, not the schema that was
    unknown when the request came in."""
    follower, schema_id, gate = registries
    subject = f"{VALIDATED_TOPIC}-value"
    acls = SubjectAcls(set())
    follower.authorizer = acls
    app = build_app(follower)

    async def as_alice(scope, receive, send):
        scope[USER_SCOPE_KEY] = "alice"
        await app(scope, receive, send)

    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=as_alice), base_url="http://r")
    async with client:
        gate.open.set()
        answer = await client.get(f"/schemas/ids/{schema_id}")
        assert answer.status_code == 403 and answer.json()["error_code"] == 40301
        assert acls.asked == [subject_resource(subject)]
        acls.readable.add(subject_resource(subject))
        answer = await client.get(f"/schemas/ids/{schema_id}/schema")
        assert answer.status_code == 200 and json.loads(answer.text) == USER


async def test_produce_validation_without_a_replica_of_schemas_answers_retriable(
    tmp_path, nursery, autojump_clock
):
    """A partition leader that holds no replica of `_schemas` (a cluster of more than three
    brokers) has an empty copy: it cannot tell whether an id is registered, so its
    validating partitions answer NOT_ENOUGH_REPLICAS rather than refuse the records for
    good (a limit written in docs/not-yet-supported.md)."""
    replicas = make_broker(tmp_path, 4)
    await nursery.start(replicas.run)
    replicas.metadata.topics[SCHEMAS_TOPIC] = TopicMetadata(
        SCHEMAS_TOPIC, SCHEMAS_ID, {0: PartitionMetadata(1, 1, (1, 2, 3), (1, 2, 3), ())}
    )
    service = SchemaRegistryService(replicas.config, replicas, no_create_topics)
    await nursery.start(service.run)
    refused = await validate(service, 1)
    assert refused is not None and refused["error_code"] == Error.NOT_ENOUGH_REPLICAS
    assert "holds no replica of _schemas" in refused["error_message"]
