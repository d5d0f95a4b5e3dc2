"""The hand-written Metadata response encoder is byte-identical to kio's, at every version the
broker serves (kio's v0-v12 schemas and protocol.schemas' v13 are the oracle)."""

import datetime
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.apis import dispatch
from minibroker.apis.registry import APIS
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.metadata_response import encode_metadata_response
from minibroker.protocol.versions import ApiKey

LOW, HIGH = APIS[ApiKey.METADATA].versions
VERSIONS = range(LOW, HIGH + 1)
OMITTED = -(2**31)

node_ids = st.integers(-1, 2**31 - 1)
# Past 126 entries a compact array's length takes two bytes.
long_lists = st.lists(st.integers(0, 5), min_size=125, max_size=130)
node_lists = st.lists(node_ids, max_size=6) | long_lists
errors = st.sampled_from([0, 3, 5, 9, 17, 29, 39, 56, 69, 100, Error.LEADER_NOT_AVAILABLE])
names = st.text(st.sampled_from("abc-_.XYZ019é"), min_size=0, max_size=20)
operations = st.sampled_from([OMITTED, 0, 3448, 2**31 - 1])


def _maybe(keys: dict, optional: dict) -> st.SearchStrategy:
    """A dict with the required keys and any subset of the optional ones: a key left out
    takes the schema default, which the encoder must write as kio does."""
    return st.fixed_dictionaries(keys, optional=optional)


partitions = _maybe(
    {"error_code": errors, "partition_index": st.integers(0, 2**31 - 1), "leader_id": node_ids},
    {
        "leader_epoch": st.integers(-1, 2**31 - 1),
        "replica_nodes": node_lists,
        "isr_nodes": node_lists,
        "offline_replicas": node_lists,
    },
)
topics = _maybe(
    {"error_code": errors, "name": names},
    {
        "topic_id": st.none() | st.uuids(),
        "is_internal": st.booleans(),
        "partitions": st.lists(partitions, max_size=4),
        "topic_authorized_operations": operations,
    },
)
brokers = _maybe(
    {"node_id": node_ids, "host": names, "port": st.integers(0, 65535)},
    {"rack": st.none() | names},
)
responses = _maybe(
    {},
    {
        "throttle_time": st.integers(0, 2**31 - 1)
        | st.integers(0, 10**6).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        "brokers": st.lists(brokers, max_size=4),
        "cluster_id": st.none() | names,
        "controller_id": node_ids,
        "topics": st.lists(topics, max_size=4),
        "cluster_authorized_operations": operations,
        "error_code": errors,
    },
)


def _kio(version: int, data: dict) -> bytes:
    return codec.encode_response(ApiKey.METADATA, version, data)


@settings(max_examples=500)
@given(st.sampled_from(VERSIONS), responses)
def test_byte_identical_to_kio(version, data):
    encoded = encode_metadata_response(version, data)
    assert encoded is not None  # plain data: the hand-written path, not kio's
    assert encoded == _kio(version, data)


@settings(max_examples=200)
@given(
    st.integers(12, HIGH),
    st.lists(
        _maybe(
            {"error_code": errors, "name": st.none() | names, "topic_id": st.none() | st.uuids()},
            {"partitions": st.lists(partitions, max_size=2)},
        ),
        max_size=4,
    ),
)
def test_null_names_from_v12(version, topic_list):
    """v12 made Name nullable (a topic asked for by an id that does not exist)."""
    data = {"brokers": [], "topics": topic_list}
    assert encode_metadata_response(version, data) == _kio(version, data)


def _topic(name, partitions, **extra) -> dict:
    return {
        "error_code": Error.NONE,
        "name": name,
        "topic_id": uuid.uuid5(uuid.NAMESPACE_URL, name),
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": OMITTED,
        **extra,
    }


def _partition(index, leader, replicas, isr, offline=()) -> dict:
    return {
        "error_code": Error.LEADER_NOT_AVAILABLE if leader < 0 else Error.NONE,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": index % 7,
        "replica_nodes": replicas,
        "isr_nodes": isr,
        "offline_replicas": offline,
    }


# The handler's shapes (broker/apis/metadata.py), built by hand.
CASES = {
    "no topics, no brokers": {"brokers": (), "controller_id": -1, "topics": ()},
    "the v13 error response": {
        "brokers": (),
        "controller_id": -1,
        "topics": (),
        "error_code": Error.REBOOTSTRAP_REQUIRED,
    },
    "the controller's answer": {
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9093}],
        "cluster_id": "MkU3OEVBNTcwNTJENDM2Qk",
        "controller_id": 1,
        "topics": (),
    },
    "a cluster": {
        "brokers": [
            {"node_id": n, "host": f"broker-{n}.example", "port": 9092, "rack": rack}
            for n, rack in ((1, "eu-1a"), (2, None), (3, "eu-1c"))
        ],
        "cluster_id": "MkU3OEVBNTcwNTJENDM2Qk",
        "controller_id": 2,
        "throttle_time": 250,
        "cluster_authorized_operations": 3448,
        "topics": [
            _topic("orders", [_partition(i, i % 3 + 1, [1, 2, 3], [1, 2, 3]) for i in range(300)]),
            _topic(
                "__consumer_offsets",
                [_partition(i, 1, [1, 2], [1]) for i in range(50)],
                is_internal=True,
                topic_authorized_operations=3448,
            ),
            _topic(
                "offline",
                [
                    _partition(0, -1, [1, 2, 3], [], [1, 2, 3]),
                    _partition(1, 2, [1, 2, 3], [2], [3]),
                    _partition(2, 3, [], [], []),
                ],
            ),
            {  # an error entry, as _error_entry makes it
                "error_code": Error.UNKNOWN_TOPIC_OR_PARTITION,
                "name": "missing",
                "topic_id": None,
                "is_internal": False,
                "partitions": (),
                "topic_authorized_operations": OMITTED,
            },
        ],
    },
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_handler_shapes(version, case):
    encoded = encode_metadata_response(version, CASES[case])
    assert encoded is not None
    assert encoded == _kio(version, CASES[case])


@pytest.mark.parametrize("version", range(LOW, 12))
def test_null_name_before_v12_is_left_to_kio(version):
    """Name is not nullable before v12: the encoder declines (None) and kio refuses it."""
    data = {"brokers": (), "topics": [{"error_code": 0, "name": None, "partitions": ()}]}
    assert encode_metadata_response(version, data) is None
    with pytest.raises(TypeError):
        _kio(version, data)


def test_entities_are_left_to_kio():
    """A response holding kio entities (not plain data) is encoded by kio, not here."""
    entity = codec.build(
        codec.response_class(ApiKey.METADATA, 12),
        {"brokers": [], "topics": [_topic("t", [_partition(0, 1, [1], [1])])]},
    )
    data = {"brokers": (), "topics": entity.topics}
    assert encode_metadata_response(12, data) is None


@settings(max_examples=200)
@given(responses)
def test_error_metrics_count_what_the_generic_walk_counts(data):
    """dispatch's Metadata shortcut for the errors metric finds the codes its generic walk of
    the description finds (the response's, the topics', the partitions')."""
    assert sorted(map(int, dispatch._metadata_error_codes(data))) == sorted(
        dispatch._error_codes(data)
    )
