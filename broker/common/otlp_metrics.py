"""A pushed telemetry payload (KIP-714) decoded into Prometheus series. Pure.

The payload is an OpenTelemetry ``MetricsData`` (Kafka's ClientTelemetryUtils
.deserializeMetricsData; the same wire layout as the collector's ExportMetricsServiceRequest),
compressed as the PushTelemetry request's CompressionType says (Kafka's record codecs:
none, gzip, snappy in xerial's framing or raw, lz4 frames, zstd; protocol/records.py). It is
parsed by the OpenTelemetry project's generated protobuf classes (``opentelemetry-proto``),
not by hand.

Names follow Prometheus' OTLP translation: every character outside ``[a-zA-Z0-9_:]``
becomes ``_`` (``org.apache.kafka.producer.record.send.rate`` ->
``org_apache_kafka_producer_record_send_rate``), and so do attribute keys. Gauges and
non-monotonic sums are gauges, monotonic sums counters, histograms (explicit buckets)
histograms; exponential histograms and summaries are skipped. Kafka asks clients for delta
temporality (GetTelemetrySubscriptions' DeltaTemporality): a delta point is added to the
value kept, a cumulative one replaces it, so counters stay cumulative for Prometheus.
"""

import re
import zlib
from collections.abc import Iterable
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from minibroker.common.client_metrics import Histogram, SeriesKey, SeriesValue
from minibroker.protocol.records import RecordError, decompress

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"
_DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def prometheus_name(name: str) -> str:
    cleaned = _INVALID.sub("_", name)
    return "_" + cleaned if cleaned[:1].isdigit() else cleaned


def _value(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    found = getattr(value, kind)
    if kind == "bool_value":
        return "true" if found else "false"
    return str(found)


def _labels(attributes: Iterable[Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((_INVALID.sub("_", a.key), _value(a.value)) for a in attributes if a.key))


def _number(point: Any) -> float:
    return float(point.as_int if point.WhichOneof("value") == "as_int" else point.as_double)


# The most a pushed payload may decompress to: a 1 MiB gzip or zstd payload of zeros would
# otherwise become a gigabyte in the broker's memory (Kafka sets no such bound).
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


def _bounded(compression_type: int, payload: bytes, limit: int) -> bytes:
    """Decompress gzip, lz4 and zstd to at most ``limit`` bytes (ValueError beyond); the
    others by protocol/records.py (snappy's blocks cannot grow much)."""
    if compression_type == 1:
        inflater = zlib.decompressobj(wbits=31)
        raw = inflater.decompress(payload, limit + 1)
    elif compression_type == 3:
        import lz4.frame

        raw = lz4.frame.LZ4FrameDecompressor().decompress(payload, max_length=limit + 1)
    elif compression_type == 4:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(payload)
        raw = reader.read(limit + 1)
    else:
        raw = decompress(compression_type, payload)
    if len(raw) > limit:
        raise ValueError(f"decompresses to more than {limit} bytes")
    return bytes(raw)


def decode(payload: bytes, compression_type: int, series: dict[SeriesKey, SeriesValue]) -> None:
    """Decompress and parse ``payload``, folding its points into ``series``; ValueError when
    it does not decompress or parse."""
    try:
        raw = _bounded(compression_type, payload, MAX_DECOMPRESSED_BYTES)
    except ValueError:
        raise
    except (RecordError, OSError, EOFError, RuntimeError) as bad:
        raise ValueError(f"does not decompress: {bad}") from None
    except Exception as bad:  # the codecs' own errors (lz4, zstandard, snappy)
        raise ValueError(f"does not decompress: {bad}") from None
    try:
        data = MetricsData.FromString(raw)
    except DecodeError as bad:
        raise ValueError(f"not an OTLP MetricsData: {bad}") from None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                _fold(metric, series)


def _fold(metric: Any, series: dict[SeriesKey, SeriesValue]) -> None:
    name = prometheus_name(metric.name)
    kind = metric.WhichOneof("data")
    if kind == "gauge":
        for point in metric.gauge.data_points:
            series[(name, _labels(point.attributes))] = (GAUGE, _number(point))
    elif kind == "sum":
        counter = metric.sum.is_monotonic
        delta = metric.sum.aggregation_temporality == _DELTA
        for point in metric.sum.data_points:
            key = (name, _labels(point.attributes))
            value = _number(point)
            previous = series.get(key)
            if delta and previous is not None and isinstance(previous[1], float):
                value += previous[1]
            series[key] = (COUNTER if counter else GAUGE, value)
    elif kind == "histogram":
        delta = metric.histogram.aggregation_temporality == _DELTA
        for point in metric.histogram.data_points:
            key = (name, _labels(point.attributes))
            counts = list(point.bucket_counts)
            bounds = list(point.explicit_bounds)
            if len(counts) != len(bounds) + 1:
                continue
            total = float(point.sum)
            previous = series.get(key)
            if delta and previous is not None and isinstance(previous[1], tuple):
                old: Histogram = previous[1]
                old_bounds, old_counts, old_sum = old
                if old_bounds == bounds:
                    counts = [a + b for a, b in zip(counts, old_counts, strict=True)]
                    total += old_sum
            series[key] = (HISTOGRAM, (bounds, counts, total))
