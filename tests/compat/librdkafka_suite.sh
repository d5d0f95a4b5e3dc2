#!/usr/bin/env bash
# Run librdkafka's own transactional tests (its tests/ directory and test-runner) against a
# 3-broker minibroker cluster started here, and print one line per test. Issue 21.
#
# Not collected by pytest (a shell script); run it by hand from the repository root:
#
#     tests/compat/librdkafka_suite.sh            # build if needed, start a cluster, run, stop
#     RDK_TESTS="0103 0129" tests/compat/librdkafka_suite.sh
#     RDK_TESTS=all RDK_PORT=39192 tests/compat/librdkafka_suite.sh   # every test 0001-0150
#
# Environment (all optional):
#   RDK_GIT     where librdkafka's git history comes from: a bare git dir or a URL
#               (default https://github.com/confluentinc/librdkafka.git)
#   RDK_REF     the tag to build (default: v<the librdkafka of the venv's confluent-kafka>; when
#               RDK_GIT has no such tag, the newest v2.* tag below it, said on stderr)
#   RDK_CACHE   source, build and fake KAFKA_PATH go here (default ~/.cache/minibroker-librdkafka)
#   RDK_TESTS   test numbers to run (default: the transactional ones below), or "all": every
#               test 0001-0150 with an entry in test.c's table that is not TEST_F_LOCAL (what
#               -L runs; mock-cluster tests the table does not mark local run too), each test
#               number whole in its own test-runner; see "all" below
#   RDK_TEST_TIMEOUT  seconds one test-runner may take before it is killed (default 1200);
#               the line then says TIMEOUT
#   RDK_SPLIT   0: the numbers of RDK_TESTS run whole and on the cluster of their scenario, as
#               "all" runs them (to run some tests of an "all" run again); default 1, 0103's
#               and 0081's sub-tests split as below
#   RDK_SUBTESTS  "name|name...": each given test runs once per sub-test (SUBTESTS=name)
#   RDK_PARALLEL  test-runners run side by side against the cluster (default 1); each test's
#               topics and groups are its own (librdkafka's random names), as in its CI's -p
#   RDK_PORT    the first broker's port (default 39092; the controller takes RDK_PORT-2)
#   RDK_KAFKA_VERSION  the broker version the test-runner assumes (default 3.9.0)
#   RDK_JOBS    make -j (default 2); every compile runs under nice -n 19
#
# What is built: librdkafka without optimisation (-O0, to build fast on small machines), with
# zstd, external lz4, SASL (Cyrus) and curl disabled, and a test-runner that holds only the
# chosen tests (the others are linked as stubs that the runner never calls, since TESTS picks
# which run). 0098 drives Kafka's Java client through tests/java/TransactionProducerCli.java:
# KAFKA_PATH points at a fake Kafka directory whose libs/ are the jars of java/fetch.sh's
# clients class path and whose bin/kafka-run-class.sh runs java with them.
#
# RDK_TESTS=all (issue 34): one test-runner process per test number (0045's cluster tests in
# one), one line each: PASSED, FAILED with the first failure line, SKIPPED with the test's own
# reason, TIMEOUT, or "not run" with why; then the totals. kafka-topics.sh, kafka-acls.sh and
# kafka-configs.sh (0045, 0052, 0077, 0109, 0115, 0119) are org.apache.kafka.tools' commands from
# the same class path (BROKERS names the cluster for them). The tests of scenario "noautocreate"
# (0045's topic_remove and non_exist_and_partchange, 0107, 0111) run on their own cluster with
# auto.create.topics.enable=false and `-s noautocreate`, as librdkafka's CI runs them.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$repo/.venv
cache=${RDK_CACHE:-$HOME/.cache/minibroker-librdkafka}
git_src=${RDK_GIT:-https://github.com/confluentinc/librdkafka.git}
port=${RDK_PORT:-39092}
kafka_version=${RDK_KAFKA_VERSION:-3.9.0}
jobs=${RDK_JOBS:-2}
# The tests that talk to a real cluster and use transactions or read_committed (see docs/compatibility.md).
tests=${RDK_TESTS:-"0103 0129 0098 0061 0137 0055 0081 0142"}
test_timeout=${RDK_TEST_TIMEOUT:-1200}
parallel=${RDK_PARALLEL:-1}
all_mode=
[[ $tests == all ]] && all_mode=1

say() { echo "librdkafka_suite: $*" >&2; }
die() { say "$*"; exit 2; }

[[ -x $venv/bin/minibroker ]] || die "no $venv/bin/minibroker: create the venv first (README)"

# --- 1. the source -------------------------------------------------------------------------
mkdir -p "$cache"
wheel_version=$("$venv/bin/python" -c 'import confluent_kafka as c; print(c.libversion()[0])' 2>/dev/null)
ref=${RDK_REF:-v${wheel_version:-2.16.0}}
gitdir=$cache/librdkafka.git
if [[ ! -d $gitdir ]]; then
    if [[ -d $git_src ]]; then
        git clone -q --bare "$git_src" "$gitdir" || die "cannot clone $git_src"
    else
        git clone -q --bare --filter=blob:none "$git_src" "$gitdir" || die "cannot clone $git_src"
    fi
fi
if ! git --git-dir="$gitdir" rev-parse -q --verify "refs/tags/$ref" >/dev/null; then
    git --git-dir="$gitdir" fetch -q --tags 2>/dev/null
fi
if ! git --git-dir="$gitdir" rev-parse -q --verify "refs/tags/$ref" >/dev/null; then
    wanted=$ref
    ref=$( (git --git-dir="$gitdir" tag -l 'v2.*' | grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$'; echo "$wanted") |
        sort -V | grep -B1 -x "$wanted" | head -1)
    [[ $ref != "$wanted" ]] || die "no tag $wanted nor an older v2 tag in $gitdir"
    say "$wanted is not in $git_src: building $ref, the newest release tag below it"
fi
src=$cache/librdkafka-$ref
if [[ ! -f $src/.extracted ]]; then
    rm -rf "$src" && mkdir -p "$src"
    git --git-dir="$gitdir" archive "$ref" | tar -x -C "$src" || die "cannot extract $ref"
    touch "$src/.extracted"
fi

# --- 2. the library and the test-runner ------------------------------------------------------
cd "$src" || die "no $src"
# 0053, 0098, 0101 and 0110 check statistics JSON with RapidJSON and skip themselves without it
# (Debian: rapidjson-dev, found by configure).
[[ -f /usr/include/rapidjson/schema.h ]] || say "no RapidJSON headers: 0053, 0098, 0101, 0110 will skip"
# "not run" and why: tests that need what this machine does not have (RDK_TESTS=all).
declare -A not_run=()
noauto_tests=()
if [[ -n $all_mode || ${RDK_SPLIT:-1} == 0 ]]; then
    # test.c's table: every _TEST(name, flags...) entry; a number is run when one of its
    # entries is not TEST_F_LOCAL (-L then runs just those entries). Entries of scenario
    # noautocreate go to the third cluster. With RDK_SPLIT=0 (whole tests, as "all" runs
    # them: to run again some tests of an "all" run), the numbers given, sorted so.
    read -r all_tests noauto < <(python3 - tests/test.c <<'PY'
import sys
src = open(sys.argv[1]).read()
table = src[src.index("struct test tests[]"):]
table = table[: table.index("\n};")]
table = "\n".join(l for l in table.splitlines() if not l.lstrip().startswith("#"))
run, noauto = [], []
for chunk in table.split("_TEST(")[1:]:
    num = chunk.split(",")[0].strip()[:4]
    if not num.isdigit() or not "0001" <= num <= "0150" or "TEST_F_LOCAL" in chunk:
        continue
    into = noauto if 'scenario = "noautocreate"' in chunk else run
    if num not in into:
        into.append(num)
print(",".join(run), ",".join(noauto))
PY
    )
    if [[ -n $all_mode ]]; then
        tests=${all_tests//,/ }
        IFS=',' read -r -a noauto_tests <<<"$noauto"
    else
        given=$tests tests=
        for t in $given; do
            [[ ",$all_tests," == *",$t,"* || ",$noauto," != *",$t,"* ]] && tests+="$t "
            [[ ",$noauto," == *",$t,"* ]] && noauto_tests+=("$t")
        done
    fi
    not_run[0126]="needs an OIDC token endpoint and brokers configured for OAUTHBEARER/OIDC (trivup's)"
fi
if [[ ! -f src/librdkafka.so.1 || ! -f src-cpp/librdkafka++.so.1 ]]; then
    say "building librdkafka $ref in $src (log: $src/build.log)"
    nice -n 19 ./configure --disable-zstd --disable-lz4-ext --disable-sasl --disable-curl \
        >"$src/build.log" 2>&1 || die "configure failed: $src/build.log"
    # -O0 without -g: a third of the compile time, and the tests do not measure speed.
    sed -i 's/^CPPFLAGS+=\t-g -O2 /CPPFLAGS+=\t-O0 /' Makefile.config
    nice -n 19 make -j"$jobs" libs >>"$src/build.log" 2>&1 || die "make libs failed: $src/build.log"
fi
cd tests || die "no $src/tests"
runner_tests=$(for t in $tests "${noauto_tests[@]}"; do echo "$t"; done | sort -u | tr '\n' ' ')
built=$(cat .runner-tests 2>/dev/null)
missing=$(for t in $runner_tests; do [[ " $built " == *" $t "* ]] || echo "$t"; done)
if [[ ! -x test-runner || -n $missing ]]; then
    say "building a test-runner with $runner_tests(log: $src/tests/build.log)"
    c_srcs=() cxx_srcs=() have=()
    for t in $runner_tests; do
        for f in "$t"-*.c "$t"-*.cpp; do
            [[ -f $f ]] || continue
            [[ $f == *.c ]] && c_srcs+=("$f") || cxx_srcs+=("$f")
            have+=($(grep -ohE '^int main_[0-9a-z_]+' "$f" | sed 's/^int //'))
        done
    done
    # Every test test.c names but was not chosen: a stub, so that the runner links.
    {
        echo '/* Generated by minibroker tests/compat/librdkafka_suite.sh: tests not built. */'
        for fn in $(grep -oE '^_TEST_DECL\([0-9a-z_]+\)' test.c | sed 's/_TEST_DECL(\(.*\))/main_\1/'); do
            # (not `printf | grep -q`: with pipefail, grep's early exit failed the pipe)
            [[ " ${have[*]} " == *" $fn "* ]] && continue
            echo "int $fn(int argc, char **argv) { (void)argc; (void)argv; return 0; }"
        done
    } >stubs.c
    rm -f test-runner test.o
    nice -n 19 make -j"$jobs" TESTSRCS_C="${c_srcs[*]} stubs.c" TESTSRCS_CXX="${cxx_srcs[*]}" \
        test-runner >build.log 2>&1 || die "building the test-runner failed: $src/tests/build.log"
    echo "$runner_tests" >.runner-tests
fi

# A fake Kafka directory for the Java helper of 0098 (test_run_java: KAFKA_PATH/libs and
# KAFKA_PATH/bin/kafka-run-class.sh).
kafka_path=$cache/kafka-path-$port
classpath_file=$repo/build/java/clients.classpath
[[ -f $classpath_file ]] || (cd "$repo" && java/fetch.sh >/dev/null 2>&1)
if [[ -f $classpath_file ]] && command -v java >/dev/null; then
    rm -rf "$kafka_path" && mkdir -p "$kafka_path/libs" "$kafka_path/bin"
    tr ':' '\n' <"$classpath_file" | while read -r jar; do ln -sf "$jar" "$kafka_path/libs/"; done
    cat >"$kafka_path/bin/kafka-run-class.sh" <<'EOF'
#!/usr/bin/env bash
exec java -cp "${CLASSPATH:+$CLASSPATH:}$(dirname "$0")/../libs/*" "$@"
EOF
    chmod +x "$kafka_path/bin/kafka-run-class.sh"
    # Kafka's shell commands the tests call (test_kafka_topics, test_kafka_cmd): the commands'
    # classes in kafka-tools.
    for cmd in kafka-topics:TopicCommand kafka-acls:AclCommand kafka-configs:ConfigCommand; do
        printf '#!/usr/bin/env bash\nexec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.%s "$@"\n' \
            "${cmd#*:}" >"$kafka_path/bin/${cmd%%:*}.sh"
        chmod +x "$kafka_path/bin/${cmd%%:*}.sh"
    done
    export KAFKA_PATH=$kafka_path
else
    say "no Java client class path ($classpath_file): 0098 will fail to start its Java producer"
fi

# --- 3. clusters -----------------------------------------------------------------------------
# The tests run against `minibroker dev` (3 brokers, PLAINTEXT). 0142 needs SASL and
# connections.max.reauth.ms: it gets its own cluster, `dev --secure` (a SASL_SSL listener at
# each broker's port + 100) with connections.max.reauth.ms=10000, started after the others.
data=$(mktemp -d /tmp/minibroker-rdkafka.XXXXXX)
dev_pid= stdin_pid=
stop_cluster() {
    [[ -n $dev_pid ]] || return 0
    kill "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null
    kill "$stdin_pid" 2>/dev/null
    exec {dev_stdin}<&-
    say "cluster stopped; its logs stay in $cluster_dir"
    dev_pid= stdin_pid=
}
trap stop_cluster EXIT
# No schema registry (its default port 8081 would clash with another cluster's); a broker
# older than the registry has no such option and starts none.
no_registry=()
"$venv/bin/minibroker" dev --help | grep -q -- --schema-registry-port && no_registry=(--schema-registry-port 0)
# librdkafka's test scenarios (tests/scenarios/*.json) give auto-created topics 4 partitions
# and 3 replicas; tests produce to partition 1-3 of a topic that Metadata created. Its CI's
# brokers (trivup 0.15's KafkaBrokerApp) have the StandardAuthorizer, super.users=User:admin
# and allow.everyone.if.no.acl.found=true: 0081, 0109, 0115 and 0119 create ACLs.
scenario_conf=(--override num.partitions=4 --override default.replication.factor=3
    --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    --override super.users=User:admin --override allow.everyone.if.no.acl.found=true)
start_cluster() { # directory, first port, extra dev arguments...
    cluster_dir=$1 first=$2
    shift 2
    say "starting a 3-broker cluster under $cluster_dir (ports $((first - 2)), $first-$((first + 2)))"
    mkdir -p "$cluster_dir"
    # dev stops at the end of its stdin: give it one that stays open until stop_cluster.
    exec {dev_stdin}< <(exec sleep 86400)
    stdin_pid=$!
    "$venv/bin/minibroker" dev --data "$cluster_dir" --first-port "$first" \
        --controller-port $((first - 2)) "${no_registry[@]}" "${scenario_conf[@]}" "$@" <&"$dev_stdin" >"$cluster_dir/dev.out" 2>&1 &
    dev_pid=$!
    for _ in $(seq 120); do
        grep -q 'the cluster is ready' "$cluster_dir/dev.out" && break
        kill -0 "$dev_pid" 2>/dev/null || { cat "$cluster_dir/dev.out" >&2; die "minibroker dev exited"; }
        sleep 1
    done
    grep -q 'the cluster is ready' "$cluster_dir/dev.out" || die "no cluster: $cluster_dir/dev.out"
    bootstrap=127.0.0.1:$first,127.0.0.1:$((first + 1)),127.0.0.1:$((first + 2))
}

# --- 4. the tests ----------------------------------------------------------------------------
# A failed assertion ends the whole test-runner, so a test whose sub-tests are independent runs
# one sub-test (SUBTESTS, a substring of the sub-test's name) per test-runner: a failure then
# does not hide the sub-tests after it. 0081 (admin) runs only its ListOffsets sub-tests
# (read_committed). -L: not the local (broker-less, mock) tests. RDK_TESTS=all runs each test
# number whole (0081 all of it), one test-runner each.
declare -A split=()
if [[ -z $all_mode && ${RDK_SPLIT:-1} != 0 ]]; then
    split=(
        [0103]="do_test_misuse_txn|do_test_basic_producer_txn|do_test_consumer_producer_txn|do not produce after fence|: produce after fence|do_test_fatal_idempo|do_test_empty_txn|do_test_wmark_isolation_level|do_test_txn_abort_control_message_leader_epoch"
        [0081]="do_test_ListOffsets"
    )
fi
# RDK_SUBTESTS="a|b|...": every test given runs one test-runner per sub-test named so (to see
# the sub-tests a failure hides, e.g. 0081's after its first failed one).
if [[ -n ${RDK_SUBTESTS:-} ]]; then
    for t in $tests; do split[$t]=$RDK_SUBTESTS; done
fi
# Each test's line goes to its own file (results/NNNN, in the order started), so that tests
# run side by side (RDK_PARALLEL) report as they end.
results_dir=$data/results
mkdir -p "$results_dir"
unit_no=0
unit_pids=()
report() { # the line of one test, also on stderr as it ends
    printf '%s\n' "$1" >"$results_dir/$(printf %04d "$unit_no")"
    say "result: $1"
}
run_unit() { # test, sub-test filter (may be empty), extra test-runner arguments...
    local t=$1 sub=$2 log status secs start rc reason passed plain
    shift 2
    log=$cluster_dir/test-$t${sub:+-$(printf '%s' "$sub" | tr -c 'A-Za-z0-9_' '_' | sed 's/^_*//')}.log
    say "running $t${sub:+ ($sub)} (log: $log)"
    start=$(date +%s)
    # In a subshell, so that a test-runner ended by a failed assertion (abort) is reported in
    # its log, not here.
    (RDKAFKA_TEST_CONF=$cluster_dir/test.conf TESTS=$t SUBTESTS=$sub \
        TEST_KAFKA_VERSION=$kafka_version LD_LIBRARY_PATH=../src:../src-cpp \
        timeout -k 10 "$test_timeout" ./test-runner -p1 -L "$@") >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
    passed=$(grep -cE '^\[[^]]*\] \[ [A-Za-z_0-9]+:[0-9]+.*: PASS \(' <<<"$plain")
    # The first failure: the line after "### Test ... failed at ...", else the assertion or
    # the runner's last words (a crash).
    reason=$(grep -m1 -A1 -E '^### Test .* failed at' <<<"$plain" | tail -1 | cut -c1-150)
    [[ -n $reason ]] || reason=$(grep -m1 -E 'FAIL|Assertion|assert' <<<"$plain" | cut -c1-150)
    if [[ $rc == 0 ]] && grep -q 'ALL TESTS PASSED' <<<"$plain"; then
        status=PASSED
        reason=
        if ! grep -qE "^\| *${t}_[^|]*\| *PASSED" <<<"$plain"; then
            status=SKIPPED
            # The reason in the summary table's row of a test -L did not filter out.
            reason=$(grep -E "^\| *${t}_[^|]*\| *SKIPPED" <<<"$plain" |
                grep -v 'Filtered due to negative test flags' | head -1 | cut -d'|' -f5- | cut -c1-150)
        fi
    elif ((secs >= test_timeout)) && [[ $rc == 124 || $rc == 137 ]]; then
        # Killed by timeout(1). A test-runner that gives up on its own test timeout (its
        # "timed out" line) is FAILED.
        status=TIMEOUT
        reason="killed after $test_timeout s${reason:+; before: $reason}"
    else
        status=FAILED
        [[ -n $reason ]] || reason="exit $rc: $(grep -v '^\s*$' <<<"$plain" | tail -1 | cut -c1-130)"
    fi
    # Sub-tests passed: those the test reports (SUB_TEST); 0129 and 0098 have none.
    report "$(printf '%-5s %-46s %-7s %5ss  %3s%s' \
        "$t" "${sub:-(whole test)}" "$status" "$secs" "$passed" "${reason:+  $reason}")"
}
run_tests() { # extra test-runner arguments -- test numbers...
    local t sub subs extra=()
    while [[ $1 != -- ]]; do extra+=("$1") && shift; done
    shift
    for t in "$@"; do
        if [[ -n ${not_run[$t]:-} ]]; then
            unit_no=$((unit_no + 1))
            report "$(printf '%-5s %-46s %-7s %6s  %3s  %s' "$t" "(whole test)" "not run" - - "${not_run[$t]}")"
        elif [[ -n ${split[$t]:-} ]]; then
            IFS='|' read -r -a subs <<<"${split[$t]}"
            for sub in "${subs[@]}"; do start_unit "$t" "$sub" "${extra[@]}"; done
        else
            start_unit "$t" "" "${extra[@]}"
        fi
    done
    ((${#unit_pids[@]} == 0)) || wait "${unit_pids[@]}"
    unit_pids=()
}
start_unit() { # as run_unit; in the background when RDK_PARALLEL > 1
    unit_no=$((unit_no + 1))
    if ((parallel > 1)); then
        # Not `jobs`/`wait -n`: the cluster's `minibroker dev` is a job of this shell too.
        local pid live
        while :; do
            live=()
            for pid in "${unit_pids[@]}"; do kill -0 "$pid" 2>/dev/null && live+=("$pid"); done
            unit_pids=("${live[@]}")
            ((${#unit_pids[@]} < parallel)) && break
            sleep 1
        done
        run_unit "$@" &
        unit_pids+=($!)
    else
        run_unit "$@"
    fi
}
write_conf() { # bootstrap servers
    cat >"$cluster_dir/test.conf" <<EOF2
bootstrap.servers=$1
# A loaded 2-core machine: give every test timeout three times the time.
test.timeout.multiplier=3
EOF2
}

plain_tests=() secure_tests=()
# 0142 and 0135 (SASL credentials; it skips itself without SASL PLAIN or SCRAM) on the secure one.
for t in $tests; do [[ $t == 0142 || $t == 0135 ]] && secure_tests+=("$t") || plain_tests+=("$t"); done
summary_bootstrap=
if ((${#plain_tests[@]})); then
    start_cluster "$data/plain" "$port"
    summary_bootstrap=$bootstrap
    export BROKERS=$bootstrap
    write_conf "$bootstrap"
    run_tests -- "${plain_tests[@]}"
    stop_cluster
fi
if ((${#noauto_tests[@]})); then
    # librdkafka's scenario "noautocreate": brokers that do not create topics on Metadata.
    start_cluster "$data/noautocreate" "$port" --override auto.create.topics.enable=false
    export BROKERS=$bootstrap
    write_conf "$bootstrap"
    run_tests -s noautocreate -- "${noauto_tests[@]}"
    stop_cluster
fi
if ((${#secure_tests[@]})); then
    start_cluster "$data/secure" "$port" --secure --override connections.max.reauth.ms=10000
    password=$(grep -m1 -oE 'user alice, password [^ ]+' "$cluster_dir/dev.out" | awk '{print $4}')
    cat >"$cluster_dir/test.conf" <<EOF2
bootstrap.servers=127.0.0.1:$((port + 100)),127.0.0.1:$((port + 101)),127.0.0.1:$((port + 102))
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=alice
sasl.password=$password
ssl.ca.location=$cluster_dir/secure/ca.pem
test.timeout.multiplier=3
EOF2
    run_tests -- "${secure_tests[@]}"
    stop_cluster
fi

echo
echo "librdkafka $ref test-runner against minibroker dev (3 brokers${summary_bootstrap:+, $summary_bootstrap}), TEST_KAFKA_VERSION=$kafka_version"
printf '%-5s %-46s %-7s %6s  %3s\n' test sub-test result time 'sub-tests passed'
cat "$results_dir"/* 2>/dev/null
count() { cut -c54-60 "$results_dir"/* 2>/dev/null | grep -c "^$1"; }
failed=$(($(count FAILED) + $(count TIMEOUT)))
echo "totals: $(count PASSED) passed, $(count FAILED) failed, $(count TIMEOUT) timed out (${test_timeout} s)," \
    "$(count SKIPPED) skipped, $(count 'not run') not run"
echo "$failed failed or timed out; test logs and broker logs under $data"
exit $((failed > 0))
