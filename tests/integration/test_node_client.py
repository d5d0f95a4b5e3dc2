"""The broker's own client connection (used by fetchers and the controller) against a broker."""

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from minibroker.apis.registry import advertised_versions, served_versions
from minibroker.cluster.node_connection import NodeConnection


async def test_requests_and_responses_pair_up(broker):
    host, port = broker.bootstrap.rsplit(":", 1)
    connection = await NodeConnection.connect(host, int(port), "node-client-test")
    try:
        versions = await connection.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.none
        assert {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys} == (
            advertised_versions(
                served_versions(broker=True, controller=True), inter_node_listener=True
            )
        )
        metadata = await connection.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="made-by-metadata"),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
        (topic,) = metadata.topics
        assert topic.name == "made-by-metadata"
        assert topic.error_code == ErrorCode.none
        assert topic.topic_id is not None and topic.topic_id.int != 0
        assert [b.port for b in metadata.brokers] == [int(port)]
    finally:
        await connection.aclose()
