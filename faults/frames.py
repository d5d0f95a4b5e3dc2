"""Request frames for the fuzzer: a corpus of well-formed requests and ways to break them.

The corpus holds, for every API key 0-80 and every version kio has a request schema for,
requests built field by field from the schema with random but plausible values (names from a
small vocabulary, so auto-creation makes a bounded number of topics; record batches that are
real v2 batches, sometimes compressed), encoded with kio's own writer behind a correct request
header. These stand in for frames captured from real clients: the same schemas, at every
version rather than only the ones a given client sends.

``FrameMaker.next()`` returns one frame to send: the bytes on the wire (length prefix
included), whether the declared length matches what follows (a complete frame, after which the
broker must either answer, stay silent for acks=0, or close), and the kind of damage done.
Everything is drawn from one ``random.Random``, so a seed replays the same frames.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import uuid
from functools import cache

from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from minibroker.apis.registry import served_versions
from minibroker.protocol import codec
from minibroker.protocol.records import Record, encode_batch

MAX_API_KEY = 80
MAX_SCHEMA_VERSION = 20
CLIENT_ID = b"fuzzer"

TOPICS = ("fz-0", "fz-1", "fz-2", "fz-3")
GROUPS = ("fzg-0", "fzg-1")
INTERESTING_I32 = (0, 1, -1, 2**31 - 1, -(2**31), 2**24, 0x7FFF, 65536, 100_000_000)
INTERESTING_I16 = (0, 1, -1, 2**15 - 1, -(2**15), 255)
# Four or two bytes that, read as a count or a length, ask for a lot.
HUGE_I32 = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x00\xff\xff\xff", b"\x10\x00\x00\x00")
HUGE_I16 = (b"\x7f\xff", b"\xff\xfe", b"\x40\x00")
HUGE_VARINT = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x80\x01")


@cache
def request_schemas() -> tuple[tuple[int, int, type], ...]:
    """(api key, version, request class) for every request schema kio 0.6.1 has."""
    found = []
    for key in range(MAX_API_KEY + 1):
        for version in range(MAX_SCHEMA_VERSION):
            try:
                found.append((key, version, load_request_schema(key, version)))
            except Exception:  # kio has no such key or version
                continue
    return tuple(found)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def request_header(key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
    header = struct.pack(">hhih", key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    return header + b"\x00" if flexible else header


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class ValueMaker:
    """Plausible random values for the fields of a request schema."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def int_value(self, bits: int, name: str) -> int:
        rng = self.rng
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        roll = rng.random()
        if name in ("num_partitions", "replication_factor", "count"):
            # A valid CreateTopics of thousands of partitions is an admin's legitimate (and
            # slow) request, not bad input: keep valid ones small, so that RSS before and
            # after measures leaks rather than topics; huge ones must still be refused.
            if roll < 0.9:
                return rng.choice((-1, 1, 1, 2, 3))
            return rng.choice((0, -7, low, high, 10_001, 2**24 if bits > 16 else high))
        waits = "timeout" in name or "max_wait" in name or name.endswith("_ms")
        if waits and roll < 0.8:
            return rng.randint(0, 300)  # waits that do not park the fuzzer for long
        if roll < 0.55:
            return rng.randint(-1, 8)
        if roll < 0.8:
            return rng.randint(0, 100_000)
        if roll < 0.9:
            interesting = INTERESTING_I16 if bits <= 16 else INTERESTING_I32
            return max(low, min(high, rng.choice(interesting)))
        return rng.randint(low, high)

    def string_value(self, name: str) -> str:
        rng = self.rng
        roll = rng.random()
        if ("topic" in name or name == "name") and roll < 0.85:
            return rng.choice(TOPICS)
        if "group" in name and roll < 0.85:
            return rng.choice(GROUPS)
        if roll < 0.93:
            return rng.choice(("", "fz", "range", "consumer", "x" * rng.randint(1, 40)))
        return "".join(rng.choice("abc.-_/é\x00 *") for _ in range(rng.randint(0, 20)))

    def records(self) -> bytes:
        rng = self.rng
        count = rng.randint(1, 5)
        records = [
            Record(i, 1_700_000_000_000 + i, rng.choice((None, b"k", b"key")), rng.randbytes(20))
            for i in range(count)
        ]
        codec_id = rng.choice((0, 0, 0, 1, 2, 3, 4))
        producer = rng.random() < 0.2
        return encode_batch(
            records,
            codec=codec_id,
            producer_id=rng.randint(0, 5) if producer else -1,
            producer_epoch=0 if producer else -1,
            base_sequence=rng.randint(0, 3) if producer else -1,
        )

    def primitive(self, field: dataclasses.Field, kafka_type: str):
        rng = self.rng
        name = field.name
        if is_optional(field) and rng.random() < 0.15:
            return None
        if kafka_type == "bool":
            return rng.random() < 0.5
        if kafka_type in ("int8", "int16", "int32", "int64", "uint16"):
            bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint16": 16}[kafka_type]
            value = self.int_value(bits, name)
            return value & 0xFFFF if kafka_type == "uint16" else value
        if kafka_type == "float64":
            return rng.random()
        if kafka_type == "string":
            return self.string_value(name)
        if kafka_type == "bytes":
            return rng.randbytes(rng.randint(0, 40))
        if kafka_type == "records":
            return self.records()
        if kafka_type == "uuid":
            return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.8 else uuid.UUID(int=0)
        if kafka_type == "timedelta_i32":
            return datetime.timedelta(milliseconds=max(0, self.int_value(32, name + "_ms")))
        if kafka_type == "timedelta_i64":
            return datetime.timedelta(milliseconds=max(0, self.int_value(48, name + "_ms")))
        if kafka_type == "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.randint(0, 2_000_000_000), tz=datetime.UTC)
        raise TypeError(f"no value for {kafka_type} ({name})")

    def entity(self, cls: type, depth: int = 0):
        kwargs = {}
        for field in dataclasses.fields(cls):
            kind = classify_field(field)
            kafka_type = field.metadata.get("kafka_type", "")
            if isinstance(kind, EntityTupleField):
                count = 0 if depth > 3 else self.rng.choice((0, 1, 1, 1, 2, 3))
                kwargs[field.name] = tuple(self.entity(kind.type_, depth + 1) for _ in range(count))
            elif isinstance(kind, EntityField):
                if is_optional(field) and self.rng.random() < 0.3:
                    kwargs[field.name] = None
                else:
                    kwargs[field.name] = self.entity(kind.type_, depth + 1)
            elif isinstance(kind, PrimitiveTupleField):
                if is_optional(field) and self.rng.random() < 0.2:
                    kwargs[field.name] = None
                else:
                    count = self.rng.choice((0, 1, 1, 2, 3))
                    kwargs[field.name] = tuple(
                        self.primitive(_not_optional(field), kafka_type) for _ in range(count)
                    )
            else:
                kwargs[field.name] = self.primitive(field, kafka_type)
        return cls(**kwargs)


def _not_optional(field: dataclasses.Field) -> dataclasses.Field:
    """Tuple items are never null even when the tuple may be."""
    copy = dataclasses.field(metadata=field.metadata)
    copy.name = field.name
    copy.type = int
    return copy


def encode_request(entity) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


@dataclasses.dataclass(frozen=True, slots=True)
class CorpusEntry:
    key: int
    version: int
    header_size: int  # bytes of request header at the start of payload
    payload: bytes  # header + body, without the length prefix
    source: str  # "kio" or "client"


def build_corpus(rng: random.Random, per_version: int = 3) -> list[CorpusEntry]:
    """Well-formed requests for every API key and version kio has a schema for."""
    values = ValueMaker(rng)
    corpus = []
    for key, version, cls in request_schemas():
        flexible = bool(cls.__flexible__)
        header = request_header(key, version, 0, flexible)
        for _ in range(per_version):
            try:
                body = encode_request(values.entity(cls))
            except Exception:  # a value kio refuses (out of range): draw again next time
                continue
            corpus.append(CorpusEntry(key, version, len(header), header + body, "kio"))
    return corpus


SERVED = served_versions(broker=True, controller=True)


@dataclasses.dataclass(slots=True)
class Frame:
    wire: bytes  # exactly what is sent
    complete: bool  # the length prefix matches what follows (one whole frame)
    kind: str


class FrameMaker:
    """Draws frames: random bytes, broken real requests, every key with random versions."""

    def __init__(self, rng: random.Random, corpus: list[CorpusEntry], max_frame: int) -> None:
        self.rng = rng
        self.corpus = corpus
        self.max_frame = max_frame
        self.correlation = rng.randint(0, 1000)
        self._kinds = (
            (0.12, self.random_bytes_valid_prefix),
            (0.08, self.random_bytes_invalid_prefix),
            (0.10, self.random_key_and_version),
            (0.20, self.bit_flips),
            (0.12, self.truncated),
            (0.18, self.huge_count_or_length),
            (0.08, self.splice),
            (0.12, self.unmodified),
        )

    def next(self) -> Frame:
        roll = self.rng.random()
        for weight, make in self._kinds:
            if roll < weight:
                return make()
            roll -= weight
        return self.unmodified()

    # -- helpers ---------------------------------------------------------------------------

    def _entry(self) -> CorpusEntry:
        return self.rng.choice(self.corpus)

    def _with_correlation(self, entry: CorpusEntry) -> bytearray:
        payload = bytearray(entry.payload)
        self.correlation = (self.correlation + 1) & 0x7FFFFFFF
        struct.pack_into(">i", payload, 4, self.correlation)
        return payload

    def _body_position(self, entry: CorpusEntry, payload: bytes) -> int:
        """A position to damage: mostly inside the body, sometimes in the header."""
        if self.rng.random() < 0.1 or len(payload) <= entry.header_size:
            return self.rng.randrange(len(payload))
        return self.rng.randrange(entry.header_size, len(payload))

    # -- kinds -----------------------------------------------------------------------------

    def random_bytes_valid_prefix(self) -> Frame:
        size = self.rng.choice((0, 1, 2, 7, 8, 9, 10, self.rng.randint(0, 64), 500))
        return Frame(framed(self.rng.randbytes(size)), True, "random bytes, valid length")

    def random_bytes_invalid_prefix(self) -> Frame:
        rng = self.rng
        body = rng.randbytes(rng.randint(0, 100))
        choice = rng.random()
        if choice < 0.3:
            prefix = rng.randint(-(2**31), -1)
        elif choice < 0.5:
            prefix = rng.randint(self.max_frame + 1, 2**31 - 1)
        elif choice < 0.8:
            # Declares more than follows: the broker must wait, then see the peer leave.
            prefix = rng.randint(len(body) + 1, len(body) + 5000)
            return Frame(struct.pack(">i", prefix) + body, False, "length longer than frame")
        else:
            # Declares less: the rest is read as the next frame's length and more.
            prefix = rng.randint(0, max(0, len(body) - 1))
            return Frame(struct.pack(">i", prefix) + body, False, "length shorter than frame")
        return Frame(struct.pack(">i", prefix) + body, True, "invalid length prefix")

    def random_key_and_version(self) -> Frame:
        """Any API key 0-80 at a random version, over a real body of some other request."""
        rng = self.rng
        entry = self._entry()
        key = rng.randint(0, MAX_API_KEY)
        version = rng.choice((rng.randint(0, 16), rng.randint(-(2**15), 2**15 - 1), -1))
        if rng.random() < 0.5 and key in SERVED:
            version = rng.randint(SERVED[key][0], SERVED[key][1])
        payload = bytearray(entry.payload)
        struct.pack_into(">hh", payload, 0, key, version)
        if rng.random() < 0.5:
            payload[entry.header_size :] = rng.randbytes(rng.randint(0, 200))
        return Frame(framed(bytes(payload)), True, "api key 0-80, random version")

    def bit_flips(self) -> Frame:
        entry = self._entry()
        payload = self._with_correlation(entry)
        for _ in range(self.rng.choice((1, 1, 2, 3, 8))):
            position = self._body_position(entry, payload)
            payload[position] ^= 1 << self.rng.randrange(8)
        return Frame(framed(bytes(payload)), True, f"bit flips ({entry.source})")

    def truncated(self) -> Frame:
        entry = self._entry()
        payload = self._with_correlation(entry)
        cut = self.rng.randrange(len(payload))
        if self.rng.random() < 0.3:
            # The prefix still declares the whole frame, the connection then ends.
            return Frame(framed(bytes(payload))[: 4 + cut], False, "truncated, peer leaves")
        return Frame(framed(bytes(payload[:cut])), True, f"truncated ({entry.source})")

    def huge_count_or_length(self) -> Frame:
        """Overwrite what is likely an array count, a string length or a varint with a big
        number; for flexible versions a varint, else four or two bytes."""
        rng = self.rng
        entry = self._entry()
        payload = self._with_correlation(entry)
        for _ in range(rng.choice((1, 1, 2))):
            position = self._body_position(entry, payload)
            flexible = codec.request_is_flexible(entry.key, entry.version)
            roll = rng.random()
            if flexible and roll < 0.5:
                patch = rng.choice(HUGE_VARINT)
            elif roll < 0.8:
                patch = rng.choice(HUGE_I32)
            else:
                patch = rng.choice(HUGE_I16)
            payload[position : position + len(patch)] = patch
        return Frame(framed(bytes(payload)), True, f"huge count or length ({entry.source})")

    def splice(self) -> Frame:
        """A real header with the tail of another request, or bytes inserted or repeated."""
        rng = self.rng
        entry = self._entry()
        payload = self._with_correlation(entry)
        other = self._entry().payload
        roll = rng.random()
        if roll < 0.4:
            payload[entry.header_size :] = other[rng.randrange(len(other)) :]
        elif roll < 0.7:
            position = self._body_position(entry, payload)
            payload[position:position] = rng.randbytes(rng.randint(1, 16))
        else:
            start = self._body_position(entry, payload)
            chunk = payload[start : start + rng.randint(1, 64)]
            payload[start:start] = chunk * rng.randint(1, 20)
        return Frame(framed(bytes(payload)), True, "spliced")

    def unmodified(self) -> Frame:
        entry = self._entry()
        return Frame(framed(bytes(self._with_correlation(entry))), True, f"valid ({entry.source})")
