"""The pytest plugin: fixtures ``kafka_broker`` and ``kafka_cluster``, real minibroker
clusters (minibroker.testing.Cluster) for an application's tests.

Registered through the ``pytest11`` entry point, so installing minibroker is enough. Kafka
has no pytest plugin of its own; the model is what a Python developer expects of a well-kept
one (pytest-postgresql, pytest-redis): a fixture per thing, a scope to choose, data in pytest's
temporary directories, and the server's logs in the report of a test that fails.

- ``kafka_broker``: one broker (its own controller). ``kafka_cluster``: three brokers and a
  controller, unless the marker says otherwise. Both are a ``Cluster``: ``bootstrap_servers``,
  ``create_topic``, the faults.
- Scope: ``function`` (a fresh cluster per test), ``class``, ``module`` or ``session``, from
  the ini option ``minibroker_scope`` or the marker's ``scope``. A shared cluster is reset
  before each test that reuses it: network faults healed, paused nodes resumed, nodes that
  are down restarted (its topics stay).
- ``@pytest.mark.minibroker(brokers=3, scope="module", server_properties={...},
  secure=False, zookeeper=False)`` on a test, a class or a module (``pytestmark``).
- Ports come from the launcher's machine-wide reservation, so pytest-xdist workers (and two
  runs side by side) never collide; every cluster's data is under ``tmp_path_factory``.
- A test that fails gets a report section per node with the end of its log
  (``minibroker_log_lines`` lines, 100 unless set).
- A cluster whose nodes do not shut down cleanly (a node that crashed during the tests
  without being killed by a fault, or exited with a code other than 0 on SIGTERM, or hung)
  fails the teardown of the test that closes it, with each such node's log tail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    # Imported when a fixture is first used, not when pytest loads the plugin: every pytest
    # run where minibroker is installed loads it, and most never start a cluster.
    from minibroker.testing.cluster import Cluster

SCOPES = ("function", "class", "module", "session")
MARKER_OPTIONS = frozenset(
    {"brokers", "scope", "server_properties", "secure", "zookeeper", "schema_registry"}
)
DEFAULT_LOG_LINES = 100

_POOL = pytest.StashKey[dict[tuple, "Cluster | BaseException"]]()
_USED = pytest.StashKey[list["Cluster"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "minibroker_scope",
        "scope of the kafka_broker and kafka_cluster fixtures: function (default), class,"
        " module or session",
        default="function",
    )
    parser.addini(
        "minibroker_log_lines",
        "lines of each minibroker node's log attached to a failing test's report",
        default=str(DEFAULT_LOG_LINES),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "minibroker(brokers=3, scope='function', server_properties=None, secure=False,"
        " zookeeper=False, schema_registry=False): how the kafka_broker / kafka_cluster"
        " fixtures start minibroker",
    )
    config.stash[_POOL] = {}


def _options(request: pytest.FixtureRequest, brokers: int | None) -> tuple[str, dict[str, Any]]:
    """(scope, Cluster keyword arguments) from the closest marker and the ini option."""
    marker = request.node.get_closest_marker("minibroker")
    given = dict(marker.kwargs) if marker is not None else {}
    unknown = set(given) - MARKER_OPTIONS
    if unknown or (marker is not None and marker.args):
        raise pytest.UsageError(
            f"@pytest.mark.minibroker takes keyword arguments {sorted(MARKER_OPTIONS)};"
            f" got {sorted(unknown) or list(marker.args if marker else ())}"
        )
    scope = given.pop("scope", None) or request.config.getini("minibroker_scope")
    if scope not in SCOPES:
        raise pytest.UsageError(f"minibroker scope {scope!r} is not one of {', '.join(SCOPES)}")
    if brokers is not None:
        given["brokers"] = brokers  # kafka_broker is one broker, whatever the marker says
    given.setdefault("brokers", 3)
    given["server_properties"] = dict(given.get("server_properties") or {})
    return scope, given


def _owner(request: pytest.FixtureRequest, scope: str) -> Any:
    """The collection node a cluster of that scope lives and dies with."""
    if scope == "function":
        return request.node
    if scope == "session":
        return request.session
    kinds = (pytest.Class, pytest.Module) if scope == "class" else (pytest.Module,)
    for kind in kinds:
        node = request.node.getparent(kind)
        if node is not None:
            return node
    return request.session


def _cluster_for(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, brokers: int | None
) -> Cluster:
    scope, options = _options(request, brokers)
    owner = _owner(request, scope)
    pool = request.config.stash[_POOL]
    key = (
        owner.nodeid,
        scope,
        tuple(sorted((name, repr(value)) for name, value in options.items())),
    )
    from minibroker.testing.cluster import Cluster

    cluster = pool.get(key)
    if isinstance(cluster, BaseException):
        # A shared cluster that could not start fails each of its tests at once, the same way.
        raise cluster
    if cluster is not None:
        cluster.reset()
    else:
        cluster = Cluster(data_dir=tmp_path_factory.mktemp("minibroker"), **options)
        try:
            cluster.start()
        except Exception as error:
            if scope != "function":
                pool[key] = error
                owner.addfinalizer(lambda: pool.pop(key, None))
            raise
        pool[key] = cluster

        def close() -> None:
            pool.pop(key, None)
            cluster.close()
            if cluster.unclean_shutdowns:
                pytest.fail(
                    "unclean minibroker shutdown:\n" + "\n".join(cluster.unclean_shutdowns),
                    pytrace=False,
                )

        if owner is request.node:
            request.addfinalizer(close)
        else:
            owner.addfinalizer(close)
    request.node.stash.setdefault(_USED, []).append(cluster)
    return cluster


@pytest.fixture
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A single minibroker broker (a Cluster of one): ``kafka_broker.bootstrap_servers``."""
    yield _cluster_for(request, tmp_path_factory, brokers=1)


@pytest.fixture
def kafka_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A minibroker cluster: three brokers unless ``@pytest.mark.minibroker(brokers=N)``."""
    yield _cluster_for(request, tmp_path_factory, brokers=None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the end of every node's log to the report of a test that failed."""
    report = yield
    clusters = item.stash.get(_USED, [])
    if report.failed and clusters:
        lines = int(item.config.getini("minibroker_log_lines"))
        for index, cluster in enumerate(clusters):
            prefix = "minibroker" if len(clusters) == 1 else f"minibroker #{index + 1}"
            for name, text in cluster.logs(lines).items():
                report.sections.append((f"{prefix} {name} log", text))
    return report
