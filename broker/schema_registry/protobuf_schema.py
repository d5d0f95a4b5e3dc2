"""Protobuf schemas: parsing into descriptors, and Confluent's Protobuf compatibility rules.

Parsing. A PROTOBUF schema comes as ``.proto`` text (what curl users and the Java serializer
send) or as a base64-encoded ``FileDescriptorProto`` (what confluent-kafka-python's
``ProtobufSerializer`` sends: ``_schema_to_str`` of the generated message's file). Text is read
by ``proto-schema-parser`` (a maintained pure-Python ANTLR grammar of the proto2/proto3
language) into its AST, turned here into a ``FileDescriptorProto``; both forms are then built
into ``protobuf``'s ``DescriptorPool`` with their references (and Google's well-known types)
first, so names are resolved and checked by protobuf itself, not by us: an unknown type, a
duplicate field number or a missing import is refused (42201). grpcio-tools' protoc would parse
text too, but it reads files from disk (no I/O in this pure core) and is a large native wheel.

Compatibility follows Confluent's ``io.confluent.kafka.schemaregistry.protobuf.diff``
(``SchemaDiff``, ``MessageSchemaDiff``, ``FieldSchemaDiff``, ``EnumSchemaDiff``): the
differences between an original and an update are listed by type, and the update is compatible
when every difference is in ``COMPATIBLE_CHANGES``. Confluent's set is the same for both
directions, so BACKWARD compares (previous, new) and FORWARD (new, previous) with one rule.
Departures: Confluent works on Wire's AST and resolves names itself; we compare the resolved
descriptors (same full names, same kinds). Confluent's metadata-driven ``confluent:reserved``
checks are not done (metadata is not supported). Extensions and groups are not compared.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

FDP = descriptor_pb2.FieldDescriptorProto

SCALARS = {
    "double": FDP.TYPE_DOUBLE,
    "float": FDP.TYPE_FLOAT,
    "int64": FDP.TYPE_INT64,
    "uint64": FDP.TYPE_UINT64,
    "int32": FDP.TYPE_INT32,
    "fixed64": FDP.TYPE_FIXED64,
    "fixed32": FDP.TYPE_FIXED32,
    "bool": FDP.TYPE_BOOL,
    "string": FDP.TYPE_STRING,
    "bytes": FDP.TYPE_BYTES,
    "uint32": FDP.TYPE_UINT32,
    "sfixed32": FDP.TYPE_SFIXED32,
    "sfixed64": FDP.TYPE_SFIXED64,
    "sint32": FDP.TYPE_SINT32,
    "sint64": FDP.TYPE_SINT64,
}

# FieldSchemaDiff.scalarKind: the groups of scalars whose encodings are interchangeable.
SCALAR_KINDS = {
    FDP.TYPE_INT32: "GENERAL_NUMBER",
    FDP.TYPE_INT64: "GENERAL_NUMBER",
    FDP.TYPE_UINT32: "GENERAL_NUMBER",
    FDP.TYPE_UINT64: "GENERAL_NUMBER",
    FDP.TYPE_BOOL: "GENERAL_NUMBER",
    FDP.TYPE_ENUM: "GENERAL_NUMBER",
    FDP.TYPE_SINT32: "SIGNED_NUMBER",
    FDP.TYPE_SINT64: "SIGNED_NUMBER",
    FDP.TYPE_STRING: "STRING_OR_BYTES",
    FDP.TYPE_BYTES: "STRING_OR_BYTES",
    FDP.TYPE_FIXED32: "FIXED32",
    FDP.TYPE_SFIXED32: "FIXED32",
    FDP.TYPE_FIXED64: "FIXED64",
    FDP.TYPE_SFIXED64: "FIXED64",
    FDP.TYPE_FLOAT: "FLOAT",
    FDP.TYPE_DOUBLE: "DOUBLE",
}

# SchemaDiff.COMPATIBLE_CHANGES.
COMPATIBLE_CHANGES = frozenset(
    {
        "MESSAGE_ADDED",
        "MESSAGE_MOVED",
        "ENUM_ADDED",
        "ENUM_REMOVED",
        "ENUM_CONST_ADDED",
        "ENUM_CONST_CHANGED",
        "ENUM_CONST_REMOVED",
        "FIELD_ADDED",
        "FIELD_REMOVED",
        "FIELD_NAME_CHANGED",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
        "ONEOF_ADDED",
        "ONEOF_REMOVED",
        "ONEOF_FIELD_ADDED",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    }
)


class ProtobufError(ValueError):
    """A schema that cannot be parsed or built (its message says why)."""


@dataclass(frozen=True)
class ProtoSchema:
    file: descriptor.FileDescriptor
    proto: descriptor_pb2.FileDescriptorProto
    # True when registered as a base64 FileDescriptorProto, False for .proto text.
    serialized: bool

    def to_base64(self) -> str:
        """The schema as confluent-kafka's deserializer asks for it (``format=serialized``)."""
        return base64.standard_b64encode(self.proto.SerializeToString(deterministic=True)).decode()


def _well_known() -> dict[str, bytes]:
    from google.protobuf import (
        any_pb2,
        api_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    modules = (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )
    return {m.DESCRIPTOR.name: m.DESCRIPTOR.serialized_pb for m in modules}


WELL_KNOWN = _well_known()


def to_file_proto(
    text: str, name: str = "default.proto"
) -> tuple[descriptor_pb2.FileDescriptorProto, bool]:
    """``text`` as a FileDescriptorProto, and whether it came base64-encoded."""
    stripped = text.strip()
    if stripped and "\n" not in stripped and " " not in stripped:
        try:
            raw = base64.b64decode(stripped, validate=True)
            proto = descriptor_pb2.FileDescriptorProto()
            proto.ParseFromString(raw)
            if proto.name or proto.message_type or proto.enum_type:
                if not proto.name:
                    proto.name = name
                return proto, True
        except (binascii.Error, ValueError, DecodeError):
            pass
    try:
        tree = Parser().parse(text)
    except Exception as error:  # the ANTLR parser raises its own errors
        raise ProtobufError(f"Could not parse Protobuf schema: {error}") from None
    return _convert(tree, name), False


def parse(text: str, dependencies: Mapping[str, str] | None = None) -> ProtoSchema:
    """Build ``text`` with ``dependencies`` (import name -> schema text, already flattened,
    references of references included) into a pool of its own."""
    deps = dict(dependencies or {})
    pool = descriptor_pool.DescriptorPool()
    protos: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for dep_name, dep_text in deps.items():
        proto, _ = to_file_proto(dep_text, dep_name)
        proto.name = dep_name
        protos[dep_name] = proto
    main, serialized = to_file_proto(text)
    added: set[str] = set()

    def add(proto: descriptor_pb2.FileDescriptorProto, trail: tuple[str, ...]) -> None:
        if proto.name in added:
            return
        if proto.name in trail:
            raise ProtobufError(f"Circular import of {proto.name}")
        for imported in proto.dependency:
            if imported in protos:
                add(protos[imported], (*trail, proto.name))
            elif imported in WELL_KNOWN:
                if imported not in added:
                    pool.AddSerializedFile(WELL_KNOWN[imported])
                    added.add(imported)
            else:
                raise ProtobufError(f"Import {imported!r} is not among the schema's references")
        try:
            pool.Add(proto)
        except (TypeError, ValueError, KeyError) as error:
            raise ProtobufError(f"Invalid Protobuf schema {proto.name}: {error}") from None
        added.add(proto.name)

    if main.name in protos:
        main.name = "default.proto"
    add(main, ())
    return ProtoSchema(pool.FindFileByName(main.name), main, serialized)


# -- .proto text to FileDescriptorProto ------------------------------------------------------


def _convert(tree: ast.File, name: str) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=name)
    syntax = tree.syntax or "proto2"
    if tree.edition is not None:
        raise ProtobufError("Protobuf editions are not supported by this registry")
    if syntax not in ("proto2", "proto3"):
        raise ProtobufError(f"Unknown syntax {syntax!r}")
    proto.syntax = syntax
    proto3 = syntax == "proto3"
    for element in tree.file_elements:
        if isinstance(element, ast.Package):
            proto.package = element.name
        elif isinstance(element, ast.Import):
            if element.public:
                proto.public_dependency.append(len(proto.dependency))
            proto.dependency.append(element.name)
        elif isinstance(element, ast.Message):
            _message(proto.message_type.add(), element, proto3)
        elif isinstance(element, ast.Enum):
            _enum(proto.enum_type.add(), element)
        elif isinstance(element, ast.Service):
            service = proto.service.add(name=element.name)
            for method in element.elements:
                if isinstance(method, ast.Method):
                    service.method.add(
                        name=method.name,
                        input_type=method.input_type.type,
                        output_type=method.output_type.type,
                        client_streaming=method.input_type.stream,
                        server_streaming=method.output_type.stream,
                    )
    return proto


def _field(target: descriptor_pb2.FieldDescriptorProto, element: ast.Field, proto3: bool) -> None:
    target.name = element.name
    target.number = element.number
    if element.type in SCALARS:
        target.type = SCALARS[element.type]
    else:
        # Left to the pool to resolve (C++ scoping rules), as protoc's parser leaves it.
        target.type_name = element.type
    cardinality = element.cardinality
    if cardinality is ast.FieldCardinality.REPEATED:
        target.label = FDP.LABEL_REPEATED
    elif cardinality is ast.FieldCardinality.REQUIRED:
        target.label = FDP.LABEL_REQUIRED
    else:
        target.label = FDP.LABEL_OPTIONAL
        if proto3 and cardinality is ast.FieldCardinality.OPTIONAL:
            target.proto3_optional = True
    for option in element.options:
        if option.name == "packed" and isinstance(option.value, bool):
            target.options.packed = option.value
        elif option.name == "deprecated" and isinstance(option.value, bool):
            target.options.deprecated = option.value
        elif option.name == "json_name" and isinstance(option.value, str):
            target.json_name = option.value


def _entry_name(field_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_")) + "Entry"


def _message(target: descriptor_pb2.DescriptorProto, element: ast.Message, proto3: bool) -> None:
    target.name = element.name
    for item in element.elements:
        if isinstance(item, ast.Field):
            _field(target.field.add(), item, proto3)
            if target.field[-1].proto3_optional:
                target.field[-1].oneof_index = len(target.oneof_decl)
                target.oneof_decl.add(name="_" + item.name)
        elif isinstance(item, ast.MapField):
            entry = target.nested_type.add(name=_entry_name(item.name))
            entry.options.map_entry = True
            for number, (field_name, type_name) in enumerate(
                (("key", item.key_type), ("value", item.value_type)), start=1
            ):
                _field(entry.field.add(), ast.Field(field_name, number, type_name), proto3)
            target.field.add(
                name=item.name,
                number=item.number,
                label=FDP.LABEL_REPEATED,
                type=FDP.TYPE_MESSAGE,
                type_name=entry.name,
            )
        elif isinstance(item, ast.OneOf):
            index = len(target.oneof_decl)
            target.oneof_decl.add(name=item.name)
            for member in item.elements:
                if isinstance(member, ast.Field):
                    _field(target.field.add(), member, proto3)
                    target.field[-1].oneof_index = index
        elif isinstance(item, ast.Message):
            _message(target.nested_type.add(), item, proto3)
        elif isinstance(item, ast.Enum):
            _enum(target.enum_type.add(), item)
        elif isinstance(item, ast.Reserved):
            target.reserved_name.extend(item.names)
            for start, end in _ranges(item.ranges, 536870911):
                target.reserved_range.add(start=start, end=end + 1)
        elif isinstance(item, ast.Group):
            raise ProtobufError("Protobuf groups are not supported by this registry")


def _enum(target: descriptor_pb2.EnumDescriptorProto, element: ast.Enum) -> None:
    target.name = element.name
    for item in element.elements:
        if isinstance(item, ast.EnumValue):
            target.value.add(name=item.name, number=item.number)
        elif isinstance(item, ast.Option) and item.name == "allow_alias":
            target.options.allow_alias = bool(item.value)
        elif isinstance(item, ast.EnumReserved):
            target.reserved_name.extend(item.names)
            for start, end in _ranges(item.ranges, 2**31 - 1):
                target.reserved_range.add(start=start, end=end)


def _ranges(ranges: list[str], maximum: int) -> list[tuple[int, int]]:
    found = []
    for text in ranges:
        low, _, high = (part.strip() for part in str(text).partition(" to "))
        try:
            start = int(low, 0)
            end = maximum if high == "max" else int(high, 0) if high else start
        except ValueError:
            raise ProtobufError(f"Invalid reserved range {text!r}") from None
        found.append((start, end))
    return found


# -- compatibility (Confluent's protobuf.diff) -----------------------------------------------


@dataclass
class _Context:
    differences: list[tuple[str, str]] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    visited: set[tuple[str, str]] = field(default_factory=set)

    def add(self, kind: str, *extra: str) -> None:
        self.differences.append((kind, "#/" + "/".join([*self.path, *extra])))


def differences(original: ProtoSchema, update: ProtoSchema) -> list[tuple[str, str]]:
    """SchemaDiff.compare: every (difference type, path) from ``original`` to ``update``."""
    context = _Context()
    if original.file.package != update.file.package:
        context.add("PACKAGE_CHANGED")
    _types(
        context,
        original.file.message_types_by_name,
        update.file.message_types_by_name,
        original.file.enum_types_by_name,
        update.file.enum_types_by_name,
    )
    return context.differences


def incompatible(original: ProtoSchema, update: ProtoSchema) -> list[tuple[str, str]]:
    return [d for d in differences(original, update) if d[0] not in COMPATIBLE_CHANGES]


def _is_map(message: descriptor.Descriptor) -> bool:
    return bool(message.GetOptions().map_entry)


def _types(
    context: _Context,
    original_messages: Mapping[str, descriptor.Descriptor],
    update_messages: Mapping[str, descriptor.Descriptor],
    original_enums: Mapping[str, descriptor.EnumDescriptor],
    update_enums: Mapping[str, descriptor.EnumDescriptor],
) -> None:
    original_index = [n for n, m in original_messages.items() if not _is_map(m)]
    update_index = [n for n, m in update_messages.items() if not _is_map(m)]
    for name in sorted(set(original_messages) | set(update_messages)):
        before, after = original_messages.get(name), update_messages.get(name)
        context.path.append(name)
        if after is None:
            if before is not None and not _is_map(before):
                context.add("MESSAGE_REMOVED")
        elif before is None:
            if not _is_map(after):
                context.add("MESSAGE_ADDED")
        else:
            _message_diff(context, before, after)
            if not _is_map(before) and (
                name not in update_index or original_index.index(name) != update_index.index(name)
            ):
                context.add("MESSAGE_MOVED")
        context.path.pop()
    for name in sorted(set(original_enums) | set(update_enums)):
        context.path.append(name)
        before_enum, after_enum = original_enums.get(name), update_enums.get(name)
        if after_enum is None:
            context.add("ENUM_REMOVED")
        elif before_enum is None:
            context.add("ENUM_ADDED")
        else:
            _enum_diff(context, before_enum, after_enum)
        context.path.pop()


def _enum_diff(
    context: _Context, original: descriptor.EnumDescriptor, update: descriptor.EnumDescriptor
) -> None:
    before = {v.number: v.name for v in reversed(original.values)}
    after = {v.number: v.name for v in reversed(update.values)}
    for number in sorted(set(before) | set(after)):
        if number not in after:
            context.add("ENUM_CONST_REMOVED", str(number))
        elif number not in before:
            context.add("ENUM_CONST_ADDED", str(number))
        elif before[number] != after[number]:
            context.add("ENUM_CONST_CHANGED", str(number))


def _oneof_of(f: descriptor.FieldDescriptor) -> str | None:
    """The oneof a field is in; None for top-level fields and proto3 ``optional`` ones (whose
    synthetic oneof Wire's AST does not have)."""
    oneof = f.containing_oneof
    if oneof is None or (
        len(oneof.fields) == 1 and getattr(f, "has_presence", False) and oneof.name == "_" + f.name
    ):
        return None
    return str(oneof.name)


def _message_diff(
    context: _Context, original: descriptor.Descriptor, update: descriptor.Descriptor
) -> None:
    """MessageSchemaDiff.compare."""
    key = (original.full_name, update.full_name)
    if key not in context.visited:
        context.visited.add(key)
        before = {f.number: f for f in original.fields}
        after = {f.number: f for f in update.fields}
        before_oneof = {n: o for n, f in before.items() if (o := _oneof_of(f)) is not None}
        after_oneof = {n: o for n, f in after.items() if (o := _oneof_of(f)) is not None}
        before_oneofs = set(before_oneof.values())
        after_oneofs = set(after_oneof.values())
        deleted = {
            name
            for name in before_oneofs - after_oneofs
            if not any(o == name and n in after for n, o in before_oneof.items())
        }
        for oneof in sorted(after_oneofs):
            origins: set[str] = set()
            moved_in = 0
            for number, name in after_oneof.items():
                if name != oneof:
                    continue
                if number in before_oneof:
                    origins.add("oneof:" + before_oneof[number])
                elif number in before:
                    origins.add(f"field:{number}")
                    moved_in += 1
            if len(origins) > 1:
                context.add(
                    "MULTIPLE_FIELDS_MOVED_TO_ONEOF"
                    if moved_in > 1
                    else "FIELD_MOVED_TO_EXISTING_ONEOF",
                    oneof,
                )
        for oneof in sorted(before_oneofs | after_oneofs):
            if oneof not in after_oneofs:
                context.add("ONEOF_REMOVED", oneof)
            elif oneof not in before_oneofs:
                context.add("ONEOF_ADDED", oneof)
        for number in sorted(set(before) | set(after)):
            old, new = before.get(number), after.get(number)
            if new is None:
                assert old is not None
                if number in before_oneof:
                    if before_oneof[number] not in deleted:
                        context.add("ONEOF_FIELD_REMOVED", before_oneof[number], str(number))
                else:
                    required = old.is_required
                    context.add(
                        "REQUIRED_FIELD_REMOVED" if required else "FIELD_REMOVED", str(number)
                    )
            elif old is None:
                if number in after_oneof:
                    context.add("ONEOF_FIELD_ADDED", after_oneof[number], str(number))
                else:
                    required = new.is_required
                    context.add("REQUIRED_FIELD_ADDED" if required else "FIELD_ADDED", str(number))
            else:
                if number in before_oneof and number not in after_oneof:
                    context.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(number))
                scope = [after_oneof[number]] if number in after_oneof else []
                context.path += [*scope, str(number)]
                _field_diff(context, old, new)
                del context.path[-1 - len(scope) :]
    _types(
        context,
        original.nested_types_by_name,
        update.nested_types_by_name,
        original.enum_types_by_name,
        update.enum_types_by_name,
    )


def _label(f: descriptor.FieldDescriptor) -> str | None:
    """Wire's label: None for a proto3 singular field without ``optional`` and for maps."""
    if f.is_repeated:
        if f.message_type is not None and _is_map(f.message_type):
            return None
        return "REPEATED"
    if f.is_required:
        return "REQUIRED"
    if f.containing_oneof is None:
        return None if _syntax(f.file.serialized_pb) == "proto3" else "OPTIONAL"
    if _oneof_of(f) is not None:
        return None
    return "OPTIONAL"


@functools.lru_cache(maxsize=256)
def _syntax(serialized: bytes) -> str:
    """A file's syntax (protobuf 7's FileDescriptor no longer has it)."""
    return descriptor_pb2.FileDescriptorProto.FromString(serialized).syntax or "proto2"


def _kind(f: descriptor.FieldDescriptor) -> str:
    if f.message_type is None:
        return "SCALAR"  # enums too
    return "MAP" if _is_map(f.message_type) else "MESSAGE"


def _field_diff(
    context: _Context, original: descriptor.FieldDescriptor, update: descriptor.FieldDescriptor
) -> None:
    """FieldSchemaDiff.compare."""
    if original.name != update.name:
        context.add("FIELD_NAME_CHANGED")
    _labels_and_types(context, original, update, _label(original), _label(update))


def _labels_and_types(
    context: _Context,
    original: descriptor.FieldDescriptor,
    update: descriptor.FieldDescriptor,
    original_label: str | None,
    update_label: str | None,
) -> None:
    kind = _kind(original)
    if kind != _kind(update):
        context.add("FIELD_KIND_CHANGED")
    elif kind == "SCALAR":
        scalar = SCALAR_KINDS[original.type]
        if scalar != SCALAR_KINDS[update.type]:
            context.add("FIELD_SCALAR_KIND_CHANGED")
        elif original_label is not None and update_label not in (None, original_label):
            if scalar == "STRING_OR_BYTES":
                context.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED")
            else:
                context.add("FIELD_NUMERIC_LABEL_CHANGED")
    elif kind == "MESSAGE":
        _message_types(context, original.message_type, update.message_type)
    else:
        before, after = original.message_type, update.message_type
        for name in ("key", "value"):
            _labels_and_types(
                context, before.fields_by_name[name], after.fields_by_name[name], None, None
            )


def _local(message: descriptor.Descriptor) -> str:
    package = message.file.package
    name = message.full_name
    return str(name[len(package) + 1 :] if package and name.startswith(package + ".") else name)


def _message_types(
    context: _Context, original: descriptor.Descriptor, update: descriptor.Descriptor
) -> None:
    """FieldSchemaDiff.compareMessageTypes: a field's message type is compared where it is
    declared; an incompatible one also counts as FIELD_NAMED_TYPE_CHANGED."""
    if _local(original) != _local(update):
        context.add("FIELD_NAMED_TYPE_CHANGED")
        return
    sub = _Context(visited=context.visited)
    sub.path = _local(original).split(".")
    _message_diff(sub, original, update)
    context.differences += sub.differences
    if any(kind not in COMPATIBLE_CHANGES for kind, _ in sub.differences):
        context.add("FIELD_NAMED_TYPE_CHANGED")
