"""The client data path's schemas are loaded before a node serves (apis/registry.py
``warm_client_schemas``, issue 40): after it, decoding the newest Fetch, ListOffsets and
ApiVersions requests and encoding their responses imports no module (a first import while
serving stalls every client for 5-25 ms). Run in a fresh interpreter, since this test
process has long imported everything."""

import json
import subprocess
import sys

PROGRAM = """
import json
import sys
sys.modules.setdefault("hypothesis", None)
from minibroker.apis.registry import APIS, warm_client_schemas
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey

warm = "warm" in sys.argv
if warm:
    warm_client_schemas()
before = set(sys.modules)
for key in (ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS):
    version = APIS[key].versions[1]
    codec.warm([(key, version)])  # what the first request and response of it load
print(json.dumps(sorted(n for n in set(sys.modules) - before if n.startswith("kio.schema"))))
"""


def loaded_on_first_use(*arguments: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, *arguments],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_newest_client_versions_import_nothing_on_first_use():
    assert loaded_on_first_use("warm") == []


def test_without_the_warm_up_they_would():
    # The test above can fail: the same first uses, not warmed, import kio's schema modules.
    loaded = loaded_on_first_use()
    assert any(name.endswith(".request") for name in loaded), loaded
