"""Confluent's JSON Schema compatibility rules, with no I/O.

Follows ``io.confluent.kafka.schemaregistry.json.diff.SchemaDiff`` (and its ``ObjectSchemaDiff``,
``ArraySchemaDiff``, ``StringSchemaDiff``, ``NumberSchemaDiff``, ``EnumSchemaDiff``,
``CombinedSchemaDiff``): the differences from an original schema to an update are listed by
type, and the update is compatible when each is in ``COMPATIBLE_CHANGES`` (Confluent's
``COMPATIBLE_CHANGES_STRICT``, its default). BACKWARD compares (previous, new), FORWARD
(new, previous). Confluent compares the schemas as the everit library loads them; here the JSON
documents are classified as everit classifies them (a ``type`` list is an anyOf of one schema
per type, several of ``type``/``enum``/``const``/``not``/``allOf``/``anyOf``/``oneOf`` together
an allOf of each) and local ``$ref``s (``#/...``) are followed, a pair already being compared
counting as compatible (Confluent's cycle rule).

Schema references are compared through ``bundle``: the referenced documents are placed inside
the schema and every ``$ref`` to one (by its reference name, with or without a ``#/...``
fragment) becomes a local one, so the comparison follows them as it follows local ones.

Departures: ``$ref`` to other documents that are not references (URLs) is not followed
(compared as the text of the reference); a reference is matched by its name as written, not
resolved against ``$id`` base URIs; combined schemas are matched greedily rather than by a
maximum matching; ``dependentSchemas``, ``contains`` and the ``unevaluated*`` keywords are not
compared; ``patternProperties`` make a content model partially open as Confluent says, without
checking the property against the pattern's schema.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

COMPATIBLE_CHANGES = frozenset(
    {
        "ID_CHANGED",
        "DESCRIPTION_CHANGED",
        "TITLE_CHANGED",
        "DEFAULT_CHANGED",
        "SCHEMA_REMOVED",
        "TYPE_EXTENDED",
        "MAX_LENGTH_INCREASED",
        "MAX_LENGTH_REMOVED",
        "MIN_LENGTH_DECREASED",
        "MIN_LENGTH_REMOVED",
        "PATTERN_REMOVED",
        "MAXIMUM_INCREASED",
        "MAXIMUM_REMOVED",
        "MINIMUM_DECREASED",
        "MINIMUM_REMOVED",
        "EXCLUSIVE_MAXIMUM_INCREASED",
        "EXCLUSIVE_MAXIMUM_REMOVED",
        "EXCLUSIVE_MINIMUM_DECREASED",
        "EXCLUSIVE_MINIMUM_REMOVED",
        "MULTIPLE_OF_REDUCED",
        "MULTIPLE_OF_REMOVED",
        "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED",
        "REQUIRED_ATTRIBUTE_REMOVED",
        "DEPENDENCY_ARRAY_NARROWED",
        "DEPENDENCY_ARRAY_REMOVED",
        "DEPENDENCY_SCHEMA_REMOVED",
        "MAX_PROPERTIES_INCREASED",
        "MAX_PROPERTIES_REMOVED",
        "MIN_PROPERTIES_DECREASED",
        "MIN_PROPERTIES_REMOVED",
        "ADDITIONAL_PROPERTIES_ADDED",
        "ADDITIONAL_PROPERTIES_EXTENDED",
        "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "MAX_ITEMS_INCREASED",
        "MAX_ITEMS_REMOVED",
        "MIN_ITEMS_DECREASED",
        "MIN_ITEMS_REMOVED",
        "UNIQUE_ITEMS_REMOVED",
        "ADDITIONAL_ITEMS_ADDED",
        "ADDITIONAL_ITEMS_EXTENDED",
        "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
        "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ENUM_ARRAY_EXTENDED",
        "COMBINED_TYPE_EXTENDED",
        "PRODUCT_TYPE_NARROWED",
        "SUM_TYPE_EXTENDED",
        "NOT_TYPE_NARROWED",
    }
)

OBJECT_WORDS = (
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "minProperties",
    "maxProperties",
    "dependencies",
    "propertyNames",
)
ARRAY_WORDS = ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains")
STRING_WORDS = ("minLength", "maxLength", "pattern", "format")
NUMBER_WORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
COMBINERS = ("allOf", "anyOf", "oneOf")


@dataclass
class Node:
    """A schema as everit loads it: its kind and its document."""

    kind: str  # empty, false, const, enum, combined, not, object, array, string, number,
    # integer, boolean, null
    doc: dict[str, Any]
    criterion: str = ""  # allOf / anyOf / oneOf for combined
    parts: list[Node] = field(default_factory=list)


# Where ``bundle`` places the referenced documents inside a schema.
REFERENCES_KEY = "x-minibroker-references"


def bundle(document: object, referenced: dict[str, object]) -> object:
    """``document`` with the ``referenced`` documents (by reference name) inside it under
    REFERENCES_KEY, and each ``$ref`` to one, from the schema or from another referenced
    document, rewritten as a local ``$ref`` to its copy; a referenced document's own local
    ``$ref``s point into its copy. Without references (or for a boolean schema, which has
    nowhere to hold them), the document itself."""
    if not referenced or not isinstance(document, dict):
        return document
    index = {name: position for position, name in enumerate(referenced)}

    def pointer(position: int, fragment: str) -> str:
        return f"#/{REFERENCES_KEY}/{position}{fragment}"

    def rewrite(node: object, own: int | None) -> object:
        if isinstance(node, list):
            return [rewrite(item, own) for item in node]
        if not isinstance(node, dict):
            return node
        copied = {key: rewrite(value, own) for key, value in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str):
            name, _, fragment = ref.partition("#")
            fragment = fragment if fragment.startswith("/") else ""
            if name in index:
                copied["$ref"] = pointer(index[name], fragment)
            elif not name and own is not None:
                copied["$ref"] = pointer(own, fragment)
        return copied

    bundled = rewrite(document, None)
    assert isinstance(bundled, dict)
    bundled[REFERENCES_KEY] = [
        rewrite(referenced[name], position) for name, position in index.items()
    ]
    return bundled


def _resolve(root: object, doc: object, depth: int = 0) -> object:
    """Follow a local ``$ref`` (``#`` or ``#/a/b``); other references are left as they are."""
    while isinstance(doc, dict) and isinstance(doc.get("$ref"), str) and depth < 64:
        ref = doc["$ref"]
        if not ref.startswith("#"):
            return doc
        target: object = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return doc
        doc = target
        depth += 1
    return doc


def load(root: object, doc: object) -> Node:
    doc = _resolve(root, doc)
    if doc is True or doc == {}:
        return Node("empty", {})
    if doc is False:
        return Node("false", {})
    if not isinstance(doc, dict):
        return Node("empty", {})
    meta = {k: doc[k] for k in ("title", "description", "default", "$id", "id") if k in doc}
    parts: list[Node] = []
    typed = _typed(root, doc)
    if typed is not None:
        parts.append(typed)
    if "enum" in doc:
        parts.append(Node("enum", doc))
    if "const" in doc:
        parts.append(Node("const", doc))
    if "not" in doc:
        parts.append(Node("not", doc))
    for criterion in COMBINERS:
        if isinstance(doc.get(criterion), list):
            # A set, as Confluent's (a LinkedHashSet of subschemas): duplicates count once.
            unique = {json.dumps(sub, sort_keys=True): sub for sub in doc[criterion]}
            subs = [load(root, sub) for sub in unique.values()]
            parts.append(Node("combined", doc, criterion, subs))
    if not parts:
        return Node("empty", meta)
    if len(parts) == 1:
        node = parts[0]
        node.doc = {**node.doc, **meta}
        return node
    return Node("combined", meta, "allOf", parts)


def _typed(root: object, doc: dict[str, Any]) -> Node | None:
    types = doc.get("type")
    if isinstance(types, list):
        nodes = [Node(str(t), doc) for t in types]
        if len(nodes) == 1:
            return nodes[0]
        return Node("combined", {}, "anyOf", nodes)
    if isinstance(types, str):
        return Node(types, doc)
    for kind, words in (
        ("object", OBJECT_WORDS),
        ("array", ARRAY_WORDS),
        ("number", NUMBER_WORDS),
        ("string", STRING_WORDS),
    ):
        if any(word in doc for word in words):
            return Node(kind, doc)
    return None


@dataclass
class _Context:
    original_root: object
    update_root: object
    differences: list[tuple[str, str]] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    active: set[tuple[int, int]] = field(default_factory=set)

    def add(self, kind: str, *extra: str) -> None:
        self.differences.append((kind, "#/" + "/".join([*self.path, *extra])))

    def sub(self) -> _Context:
        return _Context(self.original_root, self.update_root, [], list(self.path), self.active)

    @property
    def compatible(self) -> bool:
        return all(kind in COMPATIBLE_CHANGES for kind, _ in self.differences)


def differences(original: object, update: object) -> list[tuple[str, str]]:
    context = _Context(original, update)
    _compare(context, original, update)
    return context.differences


def incompatible(original: object, update: object) -> list[tuple[str, str]]:
    return [d for d in differences(original, update) if d[0] not in COMPATIBLE_CHANGES]


def _compare(context: _Context, original: object, update: object) -> None:
    if original is None and update is None:
        return
    if original is None:
        context.add("SCHEMA_ADDED")
        return
    if update is None:
        context.add("SCHEMA_REMOVED")
        return
    original = _resolve(context.original_root, original)
    update = _resolve(context.update_root, update)
    key = (id(original), id(update))
    if key in context.active:
        return  # a cycle: the pair being compared counts as compatible
    context.active.add(key)
    try:
        _types(context, load(context.original_root, original), load(context.update_root, update))
    finally:
        context.active.discard(key)


def _same_class(a: Node, b: Node) -> bool:
    number = {"number", "integer"}
    return a.kind == b.kind or (a.kind in number and b.kind in number)


def _types(context: _Context, original: Node, update: Node) -> None:
    if original.kind != "combined" and update.kind == "combined":
        if len(update.parts) == 1:
            sub = context.sub()
            _nodes(sub, original, update.parts[0])
            if sub.compatible:
                context.differences += sub.differences
                return
        elif update.criterion in ("anyOf", "oneOf"):
            for part in update.parts:
                sub = context.sub()
                _nodes(sub, original, part)
                if sub.compatible:
                    context.differences += sub.differences
                    context.add("SUM_TYPE_EXTENDED")
                    return
    elif original.kind == "combined" and update.kind != "combined":
        if len(original.parts) == 1:
            sub = context.sub()
            _nodes(sub, original.parts[0], update)
            if sub.compatible:
                context.differences += sub.differences
                return
        elif original.criterion == "allOf":
            for part in original.parts:
                sub = context.sub()
                _nodes(sub, part, update)
                if sub.compatible:
                    context.differences += sub.differences
                    context.add("PRODUCT_TYPE_NARROWED")
                    return
    if not _same_class(original, update):
        if original.kind == "false" or update.kind == "empty":
            return
        context.add("TYPE_CHANGED")
        return
    before, after = original.doc, update.doc
    for word, kind in (
        ("$id", "ID_CHANGED"),
        ("title", "TITLE_CHANGED"),
        ("description", "DESCRIPTION_CHANGED"),
        ("default", "DEFAULT_CHANGED"),
    ):
        if before.get(word) != after.get(word):
            context.add(kind)
    kind = original.kind
    if kind == "string":
        _limits(context, before, after, "maxLength", "MAX_LENGTH")
        _limits(context, before, after, "minLength", "MIN_LENGTH")
        if before.get("pattern") is None and after.get("pattern") is not None:
            context.add("PATTERN_ADDED", "pattern")
        elif before.get("pattern") is not None and after.get("pattern") is None:
            context.add("PATTERN_REMOVED", "pattern")
        elif before.get("pattern") != after.get("pattern"):
            context.add("PATTERN_CHANGED", "pattern")
    elif kind in ("number", "integer"):
        _numbers(context, original, update)
    elif kind == "enum":
        _enum(context, before.get("enum"), after.get("enum"))
    elif kind == "const":
        if before.get("const") != after.get("const"):
            context.add("ENUM_ARRAY_CHANGED", "const")
    elif kind == "not":
        # NotSchemaDiff: the update's "not" must reject no more than the original's did.
        sub = context.sub()
        _compare(sub, after.get("not"), before.get("not"))
        context.add("NOT_TYPE_NARROWED" if sub.compatible else "NOT_TYPE_EXTENDED", "not")
    elif kind == "combined":
        _combined(context, original, update)
    elif kind == "object":
        _object(context, before, after)
    elif kind == "array":
        _array(context, before, after)


def _nodes(context: _Context, original: Node, update: Node) -> None:
    _types(context, original, update)


def _limits(
    context: _Context, before: dict[str, Any], after: dict[str, Any], word: str, name: str
) -> None:
    old, new = before.get(word), after.get(word)
    if old == new or (isinstance(old, bool) or isinstance(new, bool)):
        return
    if old is None:
        context.add(f"{name}_ADDED", word)
    elif new is None:
        context.add(f"{name}_REMOVED", word)
    elif new > old:
        context.add(f"{name}_INCREASED", word)
    elif new < old:
        context.add(f"{name}_DECREASED", word)


def _numbers(context: _Context, original: Node, update: Node) -> None:
    before, after = original.doc, update.doc
    if original.kind == "integer" and update.kind == "number":
        context.add("TYPE_EXTENDED")
    elif original.kind == "number" and update.kind == "integer":
        context.add("TYPE_NARROWED")
    for word, name in (
        ("maximum", "MAXIMUM"),
        ("minimum", "MINIMUM"),
        ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"),
        ("exclusiveMinimum", "EXCLUSIVE_MINIMUM"),
    ):
        _limits(context, before, after, word, name)
    old, new = before.get("multipleOf"), after.get("multipleOf")
    if old != new:
        if old is None:
            context.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif new is None:
            context.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif old != 0 and _divides(new, old):
            context.add("MULTIPLE_OF_REDUCED", "multipleOf")
        elif new != 0 and _divides(old, new):
            context.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        else:
            context.add("MULTIPLE_OF_CHANGED", "multipleOf")


def _divides(small: float, big: float) -> bool:
    if small == 0:
        return False
    ratio = big / small
    return math.isclose(ratio, round(ratio))


def _enum(context: _Context, old: object, new: object) -> None:
    before = old if isinstance(old, list) else []
    after = new if isinstance(new, list) else []
    if before == after:
        return
    if all(v in after for v in before):
        context.add("ENUM_ARRAY_EXTENDED", "enum")
    elif all(v in before for v in after):
        context.add("ENUM_ARRAY_NARROWED", "enum")
    else:
        context.add("ENUM_ARRAY_CHANGED", "enum")


def _singleton(node: Node) -> bool:
    return len(node.parts) == 1


def _combined(context: _Context, original: Node, update: Node) -> None:
    """CombinedSchemaDiff.compare (subschemas matched greedily)."""
    a, b = original.criterion, update.criterion
    if a != b:
        if (
            b == "anyOf"
            or (_singleton(original) and _singleton(update))
            or (_singleton(original) and b == "oneOf")
            or (_singleton(update) and a == "allOf")
        ):
            context.add("COMBINED_TYPE_EXTENDED")
        else:
            context.add("COMBINED_TYPE_CHANGED")
            return
    old, new = len(original.parts), len(update.parts)
    if old < new:
        context.add("PRODUCT_TYPE_EXTENDED" if b == "allOf" else "SUM_TYPE_EXTENDED")
    elif old > new:
        context.add("SUM_TYPE_NARROWED" if a in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    used: set[int] = set()
    matched = 0
    for index, part in enumerate(original.parts):
        context.path.append(f"{a}/{index}")
        for other_index, other in enumerate(update.parts):
            if other_index in used:
                continue
            sub = context.sub()
            _types(sub, part, other)
            if sub.compatible:
                used.add(other_index)
                matched += 1
                context.differences += sub.differences
                break
        context.path.pop()
    if matched < min(old, new):
        context.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _permits_additional(doc: dict[str, Any]) -> bool:
    return doc.get("additionalProperties", True) is not False


def _additional_schema(doc: dict[str, Any]) -> object:
    extra = doc.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _open(doc: dict[str, Any]) -> bool:
    """ObjectSchemaDiff.isOpenContentModel."""
    return (
        _permits_additional(doc)
        and _additional_schema(doc) is None
        and not doc.get("patternProperties")
        and doc.get("unevaluatedProperties", True) in (True, {})
    )


def _partial(doc: dict[str, Any], name: str) -> object:
    """The schema a partially open content model gives ``name``: a matching pattern's, or
    additionalProperties'."""
    for pattern, schema in (doc.get("patternProperties") or {}).items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    return _additional_schema(doc)


def _has_default(root: object, schema: object) -> bool:
    resolved = _resolve(root, schema)
    return isinstance(resolved, dict) and "default" in resolved


def _object(context: _Context, before: dict[str, Any], after: dict[str, Any]) -> None:
    old_props = before.get("properties") or {}
    new_props = after.get("properties") or {}
    old_required = set(before.get("required") or [])
    new_required = set(after.get("required") or [])
    for name in old_props:
        if name in new_props:
            if name in old_required and name not in new_required:
                context.add("REQUIRED_ATTRIBUTE_REMOVED", "required", name)
            elif name not in old_required and name in new_required:
                if _has_default(context.update_root, new_props[name]):
                    context.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "required", name)
                else:
                    context.add("REQUIRED_ATTRIBUTE_ADDED", "required", name)
    for name in sorted(set(old_props) | set(new_props)):
        context.path += ["properties", name]
        old, new = old_props.get(name), new_props.get(name)
        if new is None:
            if _open(after):
                context.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
            elif (partial := _partial(after, name)) is not None:
                sub = context.sub()
                _compare(sub, old, partial)
                context.differences += sub.differences
                context.add(
                    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if sub.compatible
                    else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                )
            elif old is False:
                context.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            else:
                context.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        elif old is None:
            required = name in new_required
            default = _has_default(context.update_root, new)
            if _open(before):
                if load(context.update_root, new).kind == "empty" and new in (True, {}):
                    context.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
                elif required:
                    context.add(
                        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"
                        if default
                        else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
                    )
                else:
                    context.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            else:
                if (partial := _partial(before, name)) is not None:
                    sub = context.sub()
                    _compare(sub, partial, new)
                    context.differences += sub.differences
                    context.add(
                        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        if sub.compatible
                        else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    )
                if required:
                    context.add(
                        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"
                        if default
                        else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"
                    )
                else:
                    context.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
        else:
            _compare(context, old, new)
        del context.path[-2:]
    _dependencies(context, before, after)
    context.path.append("additionalProperties")
    if _permits_additional(before) != _permits_additional(after):
        context.add(
            "ADDITIONAL_PROPERTIES_ADDED"
            if _permits_additional(after)
            else "ADDITIONAL_PROPERTIES_REMOVED"
        )
    elif _additional_schema(before) is None and _additional_schema(after) is not None:
        context.add("ADDITIONAL_PROPERTIES_NARROWED")
    elif _additional_schema(after) is None and _additional_schema(before) is not None:
        context.add("ADDITIONAL_PROPERTIES_EXTENDED")
    elif _additional_schema(before) is not None:
        _compare(context, _additional_schema(before), _additional_schema(after))
    context.path.pop()
    _limits(context, before, after, "maxProperties", "MAX_PROPERTIES")
    _limits(context, before, after, "minProperties", "MIN_PROPERTIES")


def _dependencies(context: _Context, before: dict[str, Any], after: dict[str, Any]) -> None:
    old = before.get("dependencies") or {}
    new = after.get("dependencies") or {}
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if isinstance(a, list) or isinstance(b, list):
            if b is None:
                context.add("DEPENDENCY_ARRAY_REMOVED", "dependencies", name)
            elif a is None:
                context.add("DEPENDENCY_ARRAY_ADDED", "dependencies", name)
            elif set(a) != set(b):
                if set(b) >= set(a):
                    context.add("DEPENDENCY_ARRAY_EXTENDED", "dependencies", name)
                elif set(a) >= set(b):
                    context.add("DEPENDENCY_ARRAY_NARROWED", "dependencies", name)
                else:
                    context.add("DEPENDENCY_ARRAY_CHANGED", "dependencies", name)
        elif b is None:
            context.add("DEPENDENCY_SCHEMA_REMOVED", "dependencies", name)
        elif a is None:
            context.add("DEPENDENCY_SCHEMA_ADDED", "dependencies", name)
        else:
            context.path += ["dependencies", name]
            _compare(context, a, b)
            del context.path[-2:]


def _array(context: _Context, before: dict[str, Any], after: dict[str, Any]) -> None:
    """ArraySchemaDiff.compare."""
    old_items, new_items = before.get("items"), after.get("items")
    context.path.append("items")
    _compare(
        context,
        None if isinstance(old_items, list) else old_items,
        None if isinstance(new_items, list) else new_items,
    )
    context.path.pop()
    _tuple_items(context, before, after)
    context.path.append("additionalItems")
    old_permits = before.get("additionalItems", True) is not False
    new_permits = after.get("additionalItems", True) is not False
    old_schema, new_schema = _additional_items(before), _additional_items(after)
    if old_permits != new_permits:
        context.add("ADDITIONAL_ITEMS_REMOVED" if old_permits else "ADDITIONAL_ITEMS_ADDED")
    elif old_schema is None and new_schema is not None:
        context.add("ADDITIONAL_ITEMS_NARROWED")
    elif new_schema is None and old_schema is not None:
        context.add("ADDITIONAL_ITEMS_EXTENDED")
    elif old_schema is not None:
        _compare(context, old_schema, new_schema)
    context.path.pop()
    _limits(context, before, after, "maxItems", "MAX_ITEMS")
    _limits(context, before, after, "minItems", "MIN_ITEMS")
    if bool(before.get("uniqueItems")) != bool(after.get("uniqueItems")):
        context.add(
            "UNIQUE_ITEMS_REMOVED" if before.get("uniqueItems") else "UNIQUE_ITEMS_ADDED",
            "uniqueItems",
        )


def _additional_items(doc: dict[str, Any]) -> object:
    extra = doc.get("additionalItems")
    return extra if isinstance(extra, dict) else None


def _tuple_items(context: _Context, before: dict[str, Any], after: dict[str, Any]) -> None:
    old = before["items"] if isinstance(before.get("items"), list) else []
    new = after["items"] if isinstance(after.get("items"), list) else []
    old_open = (
        before.get("additionalItems", True) is not False and _additional_items(before) is None
    )
    new_open = after.get("additionalItems", True) is not False and _additional_items(after) is None
    for index in range(max(len(old), len(new))):
        context.path.append(f"items/{index}")
        if index >= len(new):
            partial = _additional_items(after)
            if new_open:
                context.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
            elif partial is not None:
                sub = context.sub()
                _compare(sub, old[index], partial)
                context.differences += sub.differences
                context.add(
                    "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if sub.compatible
                    else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                )
            elif old[index] is False:
                context.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            else:
                context.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        elif index >= len(old):
            partial = _additional_items(before)
            if old_open:
                context.add(
                    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                    if new[index] in (True, {})
                    else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"
                )
            elif partial is not None:
                sub = context.sub()
                _compare(sub, partial, new[index])
                context.differences += sub.differences
                context.add(
                    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if sub.compatible
                    else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                )
            else:
                context.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
        else:
            _compare(context, old[index], new[index])
        context.path.pop()
