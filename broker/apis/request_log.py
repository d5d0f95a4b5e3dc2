"""The request log: one line per request served, as Kafka's ``kafka.request.logger``.

Kafka's RequestChannel logs every completed request to the logger ``kafka.request.logger``
when it is at DEBUG (off by default; ``kafka-configs --alter --entity-type broker-loggers
--entity-name <id> --add-config kafka.request.logger=DEBUG`` switches it on at runtime, as
here through the BROKER_LOGGER config resource): ``Completed request:`` and a JSON object
(RequestConvertToJson.requestDescMetrics) with the request header (``requestHeader``: api
key, version, correlation id, client id, api key name), the request itself (``request``, in
the message's own field names), the connection, the total time, the security protocol's
listener and the principal. This module writes the same line, with these departures:

- ``requestSize``: the bytes of the request (its frame, header included) is minibroker's own
  field. Kafka counts them in its RequestBytes histogram only; in the log they show what a
  request costs on the wire, e.g. a fetch session's incremental fetch against its full one
  (KIP-227, tests/java/test_fetch_sessions.py);
- ``request`` never holds a byte field's contents, only its size (``<field>SizeInBytes``, as
  Kafka writes ``recordsSizeInBytes`` for records): SASL tokens and SCRAM salts stay out of
  the log, where Kafka writes base64 for bytes other than records; and the values of
  AlterConfigs and IncrementalAlterConfigs are all written ``[hidden]``, where Kafka hides
  only sensitive (password) configs: a broker-side config's type is not known here for
  every resource;
- no ``response``, and one total time instead of Kafka's queue, local, remote, throttle and
  send times (one event loop has no request queue or network threads to time);
- ``connection`` is the client's address and port, not Kafka's connection id (which names
  the broker's end and a processor as well).
"""

import base64
import dataclasses
import datetime
import enum
import json
import logging
import uuid
from typing import Any

from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.versions import ApiKey

# Kafka's logger name, so that kafka-configs' broker-loggers commands find it by that name.
logger = logging.getLogger("kafka.request.logger")

_HIDDEN_VALUES = frozenset({ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS})


def enabled() -> bool:
    """Whether requests are logged (cheap: the logging module caches the answer)."""
    return logger.isEnabledFor(logging.DEBUG)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def kafka_uuid(value: uuid.UUID) -> str:
    """A uuid as Kafka's Uuid.toString writes it (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _json(value: Any, hide_values: bool) -> Any:
    """A decoded request (a kio entity or a hand-decoded dataclass) as Kafka's JSON
    converters write it: field names in the message's lower camel case, uuids as Kafka's
    Uuid.toString, times in milliseconds, bytes as their size."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            name = _camel(field.name)
            if isinstance(item, bytes | bytearray | memoryview):
                out[f"{name}SizeInBytes"] = len(item)
            elif isinstance(item, datetime.timedelta):
                # kio names a ...Ms field without its unit (max_wait for MaxWaitMs).
                out[name if name.endswith("Ms") else f"{name}Ms"] = int(item.total_seconds() * 1000)
            elif hide_values and field.name == "value" and item is not None:
                out[name] = "[hidden]"
            else:
                out[name] = _json(item, hide_values)
        return out
    if isinstance(value, list | tuple | frozenset | set):
        return [_json(item, hide_values) for item in value]
    if isinstance(value, uuid.UUID):
        return kafka_uuid(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"sizeInBytes": len(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def write(header: RequestHeader, request: Any, **fields: Any) -> None:
    """Log one completed request (call only when :func:`enabled`)."""
    logger.debug(line(header, request, **fields))


def line(
    header: RequestHeader,
    request: Any,
    *,
    size: int,
    connection: str,
    listener: str,
    principal: str,
    total_ms: float,
) -> str:
    """The log line of one completed request (see the module's docstring)."""
    key = header.api_key
    name = ApiKey(key).name if key in ApiKey._value2member_map_ else str(key)
    entry = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": key,
            "requestApiVersion": header.api_version,
            "correlationId": header.correlation_id,
            "clientId": header.client_id,
            "requestApiKeyName": name,
        },
        "request": _json(request, key in _HIDDEN_VALUES),
        "requestSize": size,
        "connection": connection,
        "totalTimeMs": round(total_ms, 3),
        "listener": listener,
        "principal": principal,
    }
    return "Completed request:" + json.dumps(entry, separators=(",", ":"))


def parse(text: str) -> list[dict]:
    """Every request-log entry in a node's log output, in order (for tests and tools)."""
    # With the brace: a traceback in the same output (a loop-stall warning's) may quote
    # this module's source, where the marker is followed by a quote.
    marker = "Completed request:{"
    entries = []
    for row in text.splitlines():
        at = row.find(marker)
        if at != -1:
            entries.append(json.loads(row[at + len(marker) - 1 :]))
    return entries
