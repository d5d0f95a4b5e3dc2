"""docs/not-yet-supported.md names every API key Kafka 4.4 serves that minibroker does not
(issue 34), judged against the message definitions in kafka-clients-4.4.0.jar (the keys whose
validVersions are not "none": the ones a Kafka 4.4 broker or controller serves) and
minibroker's own API declarations. No broker, no JVM: the jar is read as a zip."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from bench.kafka_ref import classpath
from minibroker.apis.registry import APIS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "not-yet-supported.md"


def served_by_kafka() -> dict[int, str]:
    """Kafka 4.4's served API keys and their names (CreateDelegationToken, ...)."""
    (jar,) = [
        entry
        for entry in classpath("clients").split(":")
        if Path(entry).name == "kafka-clients-4.4.0.jar"
    ]
    served = {}
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if name.startswith("common/message/") and name.endswith("Request.json"):
                text = re.sub(r"^\s*//.*$", "", archive.read(name).decode(), flags=re.MULTILINE)
                message = json.loads(text)
                if message["validVersions"] != "none":
                    served[message["apiKey"]] = message["name"].removesuffix("Request")
    return served


def test_the_page_names_every_api_key_not_served():
    kafka = served_by_kafka()
    assert len(kafka) == 91, sorted(kafka)
    missing = {key: name for key, name in kafka.items() if key not in APIS}
    text = PAGE.read_text()
    section = text[text.index("## API keys not served") :]
    section = section[: section.index("\n## ", 1)]
    rows = [row for row in section.splitlines() if row.startswith("| ") and "---" not in row]
    unnamed = {
        key: name
        for key, name in missing.items()
        if not any(re.search(rf"\b{name}\b", row) for row in rows)
    }
    assert unnamed == {}, unnamed
    assert f"minibroker serves {91 - len(missing)}" in " ".join(section.split())
    assert f"these {len(missing)} it does not" in " ".join(section.split())
