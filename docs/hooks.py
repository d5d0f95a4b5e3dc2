"""MkDocs hook: the reference tables generated from the code at build time, so none can drift.

A page asks for a table with a marker line, `<!-- generated: NAME -->`, which is replaced by
the table that :data:`TABLES` builds for NAME:

- `apis`: the Supported APIs, from the `@api` declarations under broker/apis (their key,
  versions, roles and senders); the names and notes are docs/reference/apis.yml, keyed by API
  key, and the build fails when an API is declared without a note or a note names an API that
  is not declared.
- `metrics`: every metric of the broker's registry (minibroker.common.metrics.BrokerMetrics)
  and of the connection collector, with its type, labels and help text.
- `broker-config`: every property minibroker reads (the config model's parser table), with
  minibroker's default (BrokerConfig), Kafka's default and type (the config model).
- `topic-config`: every topic config of the config model, with its type, default and broker
  synonyms.

An unknown marker fails the build too.

A page also includes a section of the README with a line `--8<-- "README.md:NAME"`: the text
between the README's `<!-- --8<-- [start:NAME] -->` and `[end:NAME]` comments, one text for
both. The README's links into the site (`docs/testing.md`) are rewritten to the site's own
(`testing.md`) so that they work in both places; an unknown section fails the build.

Run by `mkdocs build` and `mkdocs serve` (mkdocs.yml's
`hooks`), in the environment minibroker is installed in.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import yaml

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)
INCLUDE = re.compile(r'^--8<-- "README\.md:([a-z-]+)"$', re.M)
DOCS = Path(__file__).resolve().parent
README = DOCS.parent / "README.md"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _versions(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low}-{high}"


def apis_table() -> str:
    from minibroker.apis import Role, Senders
    from minibroker.apis.registry import APIS

    notes = yaml.safe_load((DOCS / "reference" / "apis.yml").read_text())
    declared, described = set(APIS), set(notes)
    if declared != described:
        raise ValueError(
            "docs/reference/apis.yml and the @api declarations differ: declared without a"
            f" note {sorted(declared - described)}, a note without a declaration"
            f" {sorted(described - declared)}"
        )
    # APIs that share a note share a row (in the order of the first one's key).
    rows: dict[str, list[int]] = {}
    for key in APIS:
        rows.setdefault(notes[key]["note"], []).append(key)
    lines = [
        "| API (key) | versions | served by | notes |",
        "|---|---|---|---|",
    ]
    for note, keys in rows.items():
        names = ", ".join(f"{notes[k]['name']} ({int(k)})" for k in keys)
        versions = ", ".join(_versions(*APIS[k].versions) for k in keys)
        served = set()
        for k in keys:
            api = APIS[k]
            who = {Role.BROKER: "brokers", Role.CONTROLLER: "the controller"}.get(
                api.roles, "brokers and the controller"
            )
            if api.controller_decides:
                who = "the controller (brokers forward)"
            if api.senders is Senders.NODES:
                who += "; from nodes only"
            served.add(who)
        lines.append(f"| {names} | {versions} | {'; '.join(sorted(served))} | {_cell(note)} |")
    return "\n".join(lines)


def metrics_table() -> str:
    from minibroker.common.metrics import BrokerMetrics
    from minibroker.node.connection_limits import ConnectionQuotas, MemoryPool
    from minibroker.node.metrics import ConnectionCollector

    metrics = BrokerMetrics()
    # A labelled metric has no sample until it is used: its label names are on the metric.
    label_names = {
        metric._name: metric._labelnames
        for metric in vars(metrics).values()
        if hasattr(metric, "_labelnames")
    }
    families = [
        family
        for family in metrics.registry.collect()
        if not family.name.startswith(("process_", "python_"))
    ]
    quotas = ConnectionQuotas()
    quotas.admit("PLAINTEXT", "127.0.0.1")  # so that the per-listener gauges have a series
    families += list(ConnectionCollector(quotas, MemoryPool(10)).collect())
    lines = ["| metric | type | labels | help |", "|---|---|---|---|"]
    for family in sorted(families, key=lambda f: f.name):
        suffix = "_total" if family.type == "counter" else ""
        labels = sorted(
            {label for sample in family.samples for label in sample.labels if label != "le"}
            | set(label_names.get(family.name, ()))
        )
        lines.append(
            f"| `{family.name}{suffix}` | {family.type} | {', '.join(labels)} |"
            f" {_cell(family.documentation)} |"
        )
    return "\n".join(lines)


def broker_config_table() -> str:
    from minibroker.common import config as config_module
    from minibroker.common.config_model import BROKER_CONFIG_DEFS

    type_names = _type_names()
    defaults = {field.name: field for field in dataclasses.fields(config_module.BrokerConfig)}
    lines = [
        "| property | minibroker's default | Kafka's default | type |",
        "|---|---|---|---|",
    ]
    for name, prop in sorted(config_module._PROPERTIES.items()):
        field = defaults.get(prop.attribute)
        ours = _default_text(field)
        kafka_type, kafka_default = BROKER_CONFIG_DEFS.get(name, (None, None))
        lines.append(
            f"| `{name}` | {_cell(ours)} | "
            f"{_cell(kafka_default) if kafka_default is not None else ''} | "
            f"{type_names.get(kafka_type, '')} |"
        )
    return "\n".join(lines)


def _default_text(field: dataclasses.Field | None) -> str:
    if field is None:
        return ""
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return ""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple | frozenset | set | list):
        value = (
            ",".join(sorted(str(v) for v in value))
            if isinstance(value, frozenset)
            else (",".join(str(v) for v in value))
        )
    elif isinstance(value, dict):
        value = ",".join(f"{k}:{v}" for k, v in value.items())
    return f"`{value}`" if str(value) != "" else "empty"


def _type_names() -> dict[int, str]:
    from minibroker.common import config_model

    return {
        getattr(config_model, name): name.lower()
        for name in ("BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST")
    }


def topic_config_table() -> str:
    from minibroker.common.config_model import TOPIC_CONFIG_DEFS

    type_names = _type_names()
    lines = ["| topic config | default | type | broker synonyms |", "|---|---|---|---|"]
    for name, definition in TOPIC_CONFIG_DEFS.items():
        synonyms = ", ".join(f"`{s.name}`" for s in definition.synonyms)
        default = f"`{definition.default}`" if definition.default != "" else "empty"
        lines.append(
            f"| `{name}` | {_cell(default)} | {type_names[definition.type]} | {synonyms} |"
        )
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {
    "apis": apis_table,
    "metrics": metrics_table,
    "broker-config": broker_config_table,
    "topic-config": topic_config_table,
}


def render(markdown: str) -> str:
    """The page with each marker replaced by its table (an unknown marker is an error)."""

    def table(match: re.Match) -> str:
        name = match[1]
        if name not in TABLES:
            raise ValueError(f"unknown generated table {name!r} (known: {sorted(TABLES)})")
        return TABLES[name]()

    return MARKER.sub(table, markdown)


def readme_section(name: str, readme: str | None = None) -> str:
    """The README's section NAME, its links into docs/ made relative to the site."""
    text = README.read_text() if readme is None else readme
    mark = re.escape(name)
    found = re.search(
        rf"^<!-- --8<-- \[start:{mark}\] -->\n(.*?)^<!-- --8<-- \[end:{mark}\] -->$",
        text,
        re.M | re.S,
    )
    if found is None:
        raise ValueError(f"README.md has no section {name!r}")
    return re.sub(r"\]\(docs/", "](", found[1])


def include(markdown: str) -> str:
    return INCLUDE.sub(lambda match: readme_section(match[1]), markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return render(include(markdown))
