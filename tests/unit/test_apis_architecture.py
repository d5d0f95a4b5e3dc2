"""Handlers decide, the replica manager does: no module of broker/apis reaches a partition's
log (`partition.log`, `p.log.read(...)`, `log = partition.log`), nor imports the storage
layer's log classes. Reads and writes go through the replica manager's append_records,
read_records and the offset methods, as Kafka's KafkaApis goes through its ReplicaManager.
"""

import ast
from pathlib import Path

APIS = Path(__file__).resolve().parents[2] / "broker" / "apis"
# The module logger (`log = logging.getLogger(...)`) and the logging module may say `.log`.
LOGGERS = {"log", "logging"}
FORBIDDEN_IMPORTS = ("minibroker.storage.log", "minibroker.storage.segment")


def log_reaches(source: str) -> list[int]:
    """Lines where an attribute named `log` is read from anything but a logger."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "log"
            and not (isinstance(node.value, ast.Name) and node.value.id in LOGGERS)
        ):
            found.append(node.lineno)
    return found


def storage_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith(FORBIDDEN_IMPORTS)
        ):
            found.append(node.module)
    return found


def test_the_check_catches_a_reach():
    assert log_reaches("x = partition.log.read(0)\n") == [1]
    assert log_reaches("log = p.log\n") == [1]
    assert log_reaches("ctx.replicas.leader_partition(t, 0)[0].log.log_end_offset\n") == [1]
    assert log_reaches("log.info('fine')\nlogging.log(10, 'fine')\n") == []
    assert storage_imports("from minibroker.storage.log import PartitionLog\n")


def test_no_handler_reaches_a_partition_log():
    modules = sorted(APIS.glob("*.py"))
    assert len(modules) > 20
    reaches = {path.name: lines for path in modules if (lines := log_reaches(path.read_text()))}
    assert reaches == {}, f"handlers reaching a partition's log (file: lines): {reaches}"
    imports = {path.name: found for path in modules if (found := storage_imports(path.read_text()))}
    assert imports == {}, f"handlers importing the storage layer's logs: {imports}"
