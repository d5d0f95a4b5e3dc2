"""StreamsGroupTopologyDescriptionUpdate (93) v0: its schemas (protocol/streams_group_schemas.py,
built from Kafka 4.4's message JSONs) against the bytes Kafka 4.4's own message classes write
(the hex below was written by kafka-clients 4.4.0's StreamsGroupTopologyDescriptionUpdate
RequestData and ResponseData, ``Message.write`` at version 0, for the same values), and the
handler's answers as a Kafka 4.4 broker without a topology description plugin gives them."""

from types import SimpleNamespace

import trio

from minibroker.apis.streams_groups import handle_streams_group_topology_description_update
from minibroker.common.features import STREAMS_VERSION, FinalizedFeatures
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey

KEY = ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
SOURCE = {
    "name": "KSTREAM-SOURCE-0000000000",
    "node_type": 1,
    "source_topics": ["in"],
    "sink_topic": None,
    "stores": [],
    "successors": ["KSTREAM-SINK-0000000001"],
}
SINK = {
    "name": "KSTREAM-SINK-0000000001",
    "node_type": 3,
    "source_topics": [],
    "sink_topic": "out",
    "stores": ["s"],
    "successors": [],
}
REQUEST = {
    "group_id": "app",
    "member_id": "m1",
    "topology_epoch": 2,
    "topology_description": {
        "subtopologies": [{"subtopology_id": "0", "nodes": [SOURCE, SINK]}],
        "global_stores": [{"source": SOURCE, "processor": SINK}],
    },
}
KAFKA_REQUEST = (
    "04617070036d3100000002020230031a4b53545245414d2d534f555243452d3030303030303030303001"
    "0203696e000102184b53545245414d2d53494e4b2d3030303030303030303100184b53545245414d2d53"
    "494e4b2d303030303030303030310301046f7574020273010000021a4b53545245414d2d534f55524345"
    "2d30303030303030303030010203696e000102184b53545245414d2d53494e4b2d303030303030303030"
    "3100184b53545245414d2d53494e4b2d303030303030303030310301046f75740202730100000000"
)
KAFKA_RESPONSE = (
    "000000000023485468652062726f6b657220686173206e6f2073747265616d732067726f757020746f70"
    "6f6c6f6779206465736372697074696f6e20706c7567696e20636f6e666967757265642e00"
)


def test_the_request_is_written_and_read_as_kafka_writes_it():
    request = codec.build(codec.request_class(KEY, 0), REQUEST)
    assert codec.encode_entity(request).hex() == KAFKA_REQUEST
    read = codec.decode_request(KEY, 0, bytes.fromhex(KAFKA_REQUEST), 0)
    assert codec.encode_entity(read).hex() == KAFKA_REQUEST
    assert read.member_id == "m1" and read.topology_description.global_stores[0].source.name == (
        "KSTREAM-SOURCE-0000000000"
    )
    node = read.topology_description.subtopologies[0].nodes[1]
    assert (node.node_type, node.sink_topic, node.stores) == (3, "out", ("s",))


def test_the_response_is_written_as_kafka_writes_it():
    body = codec.encode_response(
        KEY,
        0,
        {
            "error_code": 35,
            "error_message": "The broker has no streams group topology description plugin "
            "configured.",
        },
    )
    assert body.hex() == KAFKA_RESPONSE


def test_the_answer_is_kafkas_without_a_plugin_and_unsupported_while_streams_is_off():
    """KafkaApis' checks first, streams.version (UNSUPPORTED_VERSION with Errors' own
    message) and READ on the group, then GroupCoordinatorService's: no topology description
    plugin is configured."""

    class Denying:
        def authorize(self, *args) -> bool:
            return False

    def ctx(levels: dict[str, int], authorizer=None) -> SimpleNamespace:
        features = FinalizedFeatures(levels)
        return SimpleNamespace(
            replica_manager=SimpleNamespace(finalized_features=features),
            authorizer=authorizer,
            controller=None,
            connection=SimpleNamespace(principal="User:alice", host="/127.0.0.1"),
        )

    request = codec.build(codec.request_class(KEY, 0), REQUEST)

    def answer(context) -> tuple[Error, str]:
        result = trio.run(handle_streams_group_topology_description_update, context, request)
        return result["error_code"], result["error_message"]

    assert answer(ctx({STREAMS_VERSION: 1})) == (
        Error.UNSUPPORTED_VERSION,
        "The broker has no streams group topology description plugin configured.",
    )
    assert answer(ctx({})) == (Error.UNSUPPORTED_VERSION, "The version of API is not supported.")
    assert answer(ctx({STREAMS_VERSION: 1}, Denying())) == (
        Error.GROUP_AUTHORIZATION_FAILED,
        "Group authorization failed.",
    )
