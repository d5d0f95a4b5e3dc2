#!/usr/bin/env bash
# Run kafka-python's and aiokafka's own integration tests against a one-broker `minibroker dev`
# started here, and print each suite's pytest summary. Issue 34 (docs/compatibility.md,
# "kafka-python's and aiokafka's integration tests"). Not collected by pytest; run by hand from
# the repository root:
#
#     tests/compat/python_clients_suites.sh            # both suites
#     SUITES=aiokafka tests/compat/python_clients_suites.sh
#
# Environment (all optional):
#   SUITES       kafka-python, aiokafka or both (default "kafka-python aiokafka")
#   KP_GIT, AIO_GIT  where the clients' git histories come from (default GitHub)
#   KP_REF       kafka-python's tag (default 3.0.11: the newest tag; the project's venv may
#                have a newer release, the suite runs with the tag's release in a venv of its own)
#   AIO_REF      aiokafka's tag (default v<the project venv's aiokafka>)
#   CACHE        where sources, venvs and logs go (default ~/.cache/minibroker-python-clients)
#   PORT         the broker's port (default 19192; the controller takes PORT-2)
#
# Both suites start their own Kafka (kafka-python from a Kafka distribution, aiokafka in a
# Docker container). kafka-python's fixtures take an already running broker (KAFKA_URI); for
# aiokafka a shim (tests/compat/aiokafka_conftest_shim.py.txt, appended to its conftest.py)
# replaces the fixtures that start or reach into the container, so its SSL, SASL and ACL tests
# fail here on any broker. The broker gets the settings each suite gives its own Kafka.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$repo/.venv
cache=${CACHE:-$HOME/.cache/minibroker-python-clients}
port=${PORT:-19192}
suites=${SUITES:-"kafka-python aiokafka"}
mkdir -p "$cache"

say() { echo "python_clients_suites: $*" >&2; }

source_of() {  # name git ref -> extracts the tag's tree into $cache/name-ref
    local name=$1 git=$2 ref=$3 dir=$cache/$1-$3
    [[ -d $dir ]] && { echo "$dir"; return; }
    [[ -d $cache/$name.git ]] || git clone -q --bare "$git" "$cache/$name.git" || return 1
    mkdir -p "$dir" && git --git-dir="$cache/$name.git" archive "$ref" | tar -x -C "$dir" || return 1
    echo "$dir"
}

start_broker() {  # data dir, then --override arguments
    local data=$1; shift
    rm -rf "$data"
    "$venv/bin/minibroker" dev --brokers 1 --data "$data" --first-port "$port" \
        --controller-port $((port - 2)) --schema-registry-port 0 "$@" > "$data.log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 60); do
        grep -q "bootstrap servers" "$data.log" 2>/dev/null && return 0
        sleep 1
    done
    say "the broker did not start: $data.log"; return 1
}

stop_broker() { kill -INT "$broker_pid" 2>/dev/null; wait "$broker_pid" 2>/dev/null; }
trap stop_broker EXIT

common=(--override group.initial.rebalance.delay.ms=0 --override group.min.session.timeout.ms=1000
        --override offsets.topic.replication.factor=1
        --override transaction.state.log.replication.factor=1 --override transaction.state.log.min.isr=1)

for suite in $suites; do
    case $suite in
    kafka-python)
        ref=${KP_REF:-3.0.11}
        src=$(source_of kafka-python "${KP_GIT:-https://github.com/dpkp/kafka-python.git}" "$ref") || exit 2
        if [[ ! -x $src/.venv/bin/pytest ]]; then
            python3 -m venv "$src/.venv" && "$src/.venv/bin/pip" install -q "kafka-python==$ref" \
                pytest pytest-timeout pytest-mock crc32c lz4 python-snappy zstandard xxhash || exit 2
        fi
        mkdir -p "$src/servers/4.2.0/kafka-bin"  # the fixture checks it exists, even for KAFKA_URI
        # kafka-python's servers/resources/default/kafka.properties: 4 partitions, an authorizer.
        start_broker "$cache/kafka-python-data" "${common[@]}" --override num.partitions=4 \
            --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
            --override allow.everyone.if.no.acl.found=true || exit 2
        (cd "$src" && KAFKA_VERSION=4.2.0 KAFKA_URI="PLAINTEXT://127.0.0.1:$port" \
            .venv/bin/python -m pytest -q test/integration -p no:cacheprovider --timeout=120 \
            -o log_level=WARNING --tb=line -rfE) > "$cache/kafka-python.log" 2>&1
        stop_broker
        echo "kafka-python $ref: $(grep -E '(passed|failed).* in ' "$cache/kafka-python.log" | tail -1)"
        grep -E '^(FAILED|ERROR) ' "$cache/kafka-python.log"
        ;;
    aiokafka)
        version=$("$venv/bin/python" -c 'import aiokafka; print(aiokafka.__version__)')
        ref=${AIO_REF:-v$version}
        src=$(source_of aiokafka "${AIO_GIT:-https://github.com/aio-libs/aiokafka.git}" "$ref") || exit 2
        if [[ ! -x $src/.venv/bin/pytest ]]; then
            python3 -m venv "$src/.venv" && "$src/.venv/bin/pip" install -q "aiokafka==${ref#v}" \
                pytest==9.0.2 pytest-asyncio==1.3.0 pytest-mock==3.15.1 docker==7.1.0 \
                async-timeout cramjam || exit 2
            cat "$repo/tests/compat/aiokafka_conftest_shim.py.txt" >> "$src/tests/conftest.py"
            # pyproject.toml's [tool.pytest.ini_options], which the tag's tree carries.
            printf '%s\n' '[pytest]' 'testpaths = tests' 'asyncio_mode = auto' 'markers =' \
                '    ssl: Tests that require SSL certificates to run' 'filterwarnings =' \
                '    error' '    default:unclosed event loop:ResourceWarning' > "$src/pytest.ini"
        fi
        # aiokafka's Docker broker: NUM_PARTITIONS=2.
        start_broker "$cache/aiokafka-data" "${common[@]}" --override num.partitions=2 || exit 2
        (cd "$src" && AIOKAFKA_EXTERNAL="127.0.0.1:$port" .venv/bin/python -m pytest -q tests \
            -p no:cacheprovider --docker-image aiolibs/kafka:2.13_3.9.0 --no-pull --tb=line -rfE \
            -o faulthandler_timeout=120) > "$cache/aiokafka.log" 2>&1
        stop_broker
        echo "aiokafka $ref: $(grep -E '(passed|failed).* in ' "$cache/aiokafka.log" | tail -1)"
        grep -E '^(FAILED|ERROR) ' "$cache/aiokafka.log"
        ;;
    *) say "unknown suite $suite"; exit 2 ;;
    esac
done
