"""The request log's line (apis/request_log.py, Kafka's kafka.request.logger): real requests
encoded as a client sends them, decoded as dispatch decodes them, then logged; and dispatch
writes the line only while the logger is at DEBUG."""

from __future__ import annotations

import logging
import uuid

import pytest
import trio

from minibroker.apis import Connection, RequestContext, request_log
from minibroker.apis.dispatch import dispatch
from minibroker.apis.registry import served_versions
from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.protocol import codec
from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.produce_request import decode_produce_request
from minibroker.protocol.versions import ApiKey

TOPIC_ID = uuid.UUID("0f3a5b7c-1d2e-4f60-8a9b-0c1d2e3f4a5b")


def header(key: ApiKey, version: int) -> RequestHeader:
    return RequestHeader(key, version, 7, "consumer-g-1")


def logged(key: ApiKey, version: int, data: dict, size: int = 100) -> dict:
    request = codec.build(codec.request_class(key, version), data)
    frame = codec.encode_entity(request)
    decoded = codec.decode_request(key, version, frame, 0)
    text = request_log.line(
        header(key, version),
        decoded,
        size=size,
        connection="127.0.0.1:50000",
        listener="PLAINTEXT",
        principal="User:ANONYMOUS",
        total_ms=1.25,
    )
    (entry,) = request_log.parse("2026-12-03 INFO kafka.request.logger: " + text)
    return entry


def fetch(session_id: int, epoch: int, partitions: int) -> dict:
    return {
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 52428800,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition": index,
                        "current_leader_epoch": 0,
                        "fetch_offset": 10,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1048576,
                    }
                    for index in range(partitions)
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_a_fetch_is_logged_with_its_header_session_and_size():
    entry = logged(ApiKey.FETCH, 17, fetch(123, 4, 2), size=321)
    assert entry["requestHeader"] == {
        "requestApiKey": 1,
        "requestApiVersion": 17,
        "correlationId": 7,
        "clientId": "consumer-g-1",
        "requestApiKeyName": "FETCH",
    }
    request = entry["request"]
    assert (request["sessionId"], request["sessionEpoch"]) == (123, 4)
    assert request["maxWaitMs"] == 500
    assert request["replicaState"]["replicaId"] == -1
    (topic,) = request["topics"]
    # Kafka's Uuid.toString: URL-safe base64 without padding.
    assert topic["topicId"] == request_log.kafka_uuid(TOPIC_ID) and len(topic["topicId"]) == 22
    assert [p["partition"] for p in topic["partitions"]] == [0, 1]
    assert topic["partitions"][0]["fetchOffset"] == 10
    assert entry["requestSize"] == 321
    assert entry["connection"] == "127.0.0.1:50000"
    assert (entry["listener"], entry["principal"], entry["totalTimeMs"]) == (
        "PLAINTEXT",
        "User:ANONYMOUS",
        1.25,
    )


def test_records_are_logged_by_their_size_only():
    records = b"\x00" * 70
    data = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }
    frame = codec.encode_entity(codec.build(codec.request_class(ApiKey.PRODUCE, 9), data))
    decoded = decode_produce_request(9, bytearray(frame), 0)
    text = request_log.line(
        header(ApiKey.PRODUCE, 9),
        decoded,
        size=len(frame),
        connection="c",
        listener="PLAINTEXT",
        principal="User:ANONYMOUS",
        total_ms=0,
    )
    (entry,) = request_log.parse(text)
    (partition,) = entry["request"]["topicData"][0]["partitionData"]
    assert partition == {"index": 0, "recordsSizeInBytes": 70}
    assert entry["request"]["timeoutMs"] == 30000
    assert "\\u0000" not in text


def test_sasl_tokens_and_config_values_stay_out_of_the_log():
    token = b"\x00alice\x00secret-password"
    entry = logged(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
    assert entry["request"] == {"authBytesSizeInBytes": len(token)}
    configs = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "1",
                "configs": [
                    {
                        "name": "listener.name.x.ssl.key.password",
                        "config_operation": 0,
                        "value": "hunter2",
                    }
                ],
            }
        ],
        "validate_only": False,
    }
    entry = logged(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, configs)
    (config,) = entry["request"]["resources"][0]["configs"]
    assert config == {
        "name": "listener.name.x.ssl.key.password",
        "configOperation": 0,
        "value": "[hidden]",
    }
    assert "hunter2" not in str(entry)


async def _dispatch_api_versions(make_context) -> None:
    request = codec.build(
        codec.request_class(ApiKey.API_VERSIONS, 3),
        {"client_software_name": "t", "client_software_version": "1"},
    )
    frame = bytearray(codec.encode_entity(request))
    response = await dispatch(header(ApiKey.API_VERSIONS, 3), frame, 0, make_context)
    assert response is not None


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_dispatch_logs_only_at_debug(level, caplog):
    config = BrokerConfig.from_properties({"node.id": "1"})

    def make_context(parsed):
        return RequestContext(
            parsed,
            "PLAINTEXT",
            config,
            "mock-cluster",
            served_versions(broker=False, controller=True),
            replicas=None,
            controller=None,
            metrics=BrokerMetrics(),
            connection=Connection("/127.0.0.1", port=50001),
        )

    logger = request_log.logger
    before = logger.level
    logger.setLevel(level)
    try:
        with caplog.at_level(level, logger=logger.name):
            trio.run(_dispatch_api_versions, make_context)
    finally:
        logger.setLevel(before)
    lines = [r.getMessage() for r in caplog.records if r.name == logger.name]
    if level == logging.DEBUG:
        (entry,) = request_log.parse("\n".join(lines))
        assert entry["requestHeader"]["requestApiKeyName"] == "API_VERSIONS"
        assert entry["requestHeader"]["clientId"] == "consumer-g-1"
        assert entry["request"]["clientSoftwareName"] == "t"
        assert entry["connection"] == "127.0.0.1:50001"
    else:
        assert lines == []
