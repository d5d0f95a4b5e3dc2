#!/usr/bin/env bash
# Run librdkafka's own transactional tests (its tests/ directory and test-runner) against a
# 3-broker minibroker cluster started here, and print one line per test. Issue 21.
#
# Not collected by pytest (a shell script); run it by hand from the repository root:
#
#     tests/compat/librdkafka_suite.sh            # build if needed, start a cluster, run, stop
#     RDK_TESTS="0103 0129" tests/compat/librdkafka_suite.sh
#
# Environment (all optional):
#   RDK_GIT     where librdkafka's git history comes from: a bare git dir or a URL
#               (default https://github.com/confluentinc/librdkafka.git)
#   RDK_REF     the tag to build (default: v<the librdkafka of the venv's confluent-kafka>; when
#               RDK_GIT has no such tag, the newest v2.* tag below it, said on stderr)
#   RDK_CACHE   source, build and fake KAFKA_PATH go here (default ~/.cache/minibroker-librdkafka)
#   RDK_TESTS   test numbers to run (default: the ones below)
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
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$repo/.venv
cache=${RDK_CACHE:-$HOME/.cache/minibroker-librdkafka}
git_src=${RDK_GIT:-https://github.com/confluentinc/librdkafka.git}
port=${RDK_PORT:-39092}
kafka_version=${RDK_KAFKA_VERSION:-3.9.0}
jobs=${RDK_JOBS:-2}
# The tests that talk to a real cluster and use transactions or read_committed (see COMPAT.md).
tests=${RDK_TESTS:-"0103 0129 0098 0061 0137 0055"}

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
if [[ ! -f src/librdkafka.so.1 || ! -f src-cpp/librdkafka++.so.1 ]]; then
    say "building librdkafka $ref in $src (log: $src/build.log)"
    nice -n 19 ./configure --disable-zstd --disable-lz4-ext --disable-sasl --disable-curl \
        >"$src/build.log" 2>&1 || die "configure failed: $src/build.log"
    # -O0 without -g: a third of the compile time, and the tests do not measure speed.
    sed -i 's/^CPPFLAGS+=\t-g -O2 /CPPFLAGS+=\t-O0 /' Makefile.config
    nice -n 19 make -j"$jobs" libs >>"$src/build.log" 2>&1 || die "make libs failed: $src/build.log"
fi
cd tests || die "no $src/tests"
runner_tests=$(for t in $tests; do echo "$t"; done | sort | tr '\n' ' ')
if [[ ! -x test-runner || "$(cat .runner-tests 2>/dev/null)" != "$runner_tests" ]]; then
    say "building a test-runner with $runner_tests(log: $src/tests/build.log)"
    c_srcs=() cxx_srcs=() have=()
    for t in $tests; do
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
            printf '%s\n' "${have[@]}" | grep -qx "$fn" && continue
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
kafka_path=$cache/kafka-path
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
    export KAFKA_PATH=$kafka_path
else
    say "no Java client class path ($classpath_file): 0098 will fail to start its Java producer"
fi

# --- 3. a 3-broker cluster -------------------------------------------------------------------
data=$(mktemp -d /tmp/minibroker-rdkafka.XXXXXX)
say "starting a 3-broker cluster under $data (ports $((port - 2)), $port-$((port + 2)))"
sleep 86400 | "$venv/bin/minibroker" dev --data "$data" --first-port "$port" \
    --controller-port $((port - 2)) >"$data/dev.out" 2>&1 &
dev_pid=$!
stop_cluster() {
    kill "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null
    say "cluster stopped; its logs stay in $data"
}
trap stop_cluster EXIT
for _ in $(seq 120); do
    grep -q 'the cluster is ready' "$data/dev.out" && break
    kill -0 "$dev_pid" 2>/dev/null || { cat "$data/dev.out" >&2; die "minibroker dev exited"; }
    sleep 1
done
grep -q 'the cluster is ready' "$data/dev.out" || die "the cluster did not start: $data/dev.out"
bootstrap=127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))

cat >test.conf <<EOF
bootstrap.servers=$bootstrap
# A loaded 2-core machine: give every test timeout three times the time.
test.timeout.multiplier=3
EOF

# --- 4. the tests ----------------------------------------------------------------------------
# A failed assertion ends the whole test-runner, so a test whose sub-tests are independent runs
# one sub-test (SUBTESTS, a substring of the sub-test's name) per test-runner: a failure then
# does not hide the sub-tests after it. -L: not the local (broker-less, mock) tests.
declare -A split=(
    [0103]="do_test_misuse_txn|do_test_basic_producer_txn|do_test_consumer_producer_txn|do not produce after fence|: produce after fence|do_test_fatal_idempo|do_test_empty_txn|do_test_wmark_isolation_level|do_test_txn_abort_control_message_leader_epoch"
)
results=()
failed=0
run_unit() { # test, sub-test filter (may be empty)
    local t=$1 sub=$2 log status secs start rc reason passed
    log=$data/test-$t${sub:+-$(echo "$sub" | tr -c 'A-Za-z0-9_\n' '_' | sed 's/^_*//')}.log
    say "running $t${sub:+ ($sub)} (log: $log)"
    start=$(date +%s)
    TESTS=$t SUBTESTS=$sub TEST_KAFKA_VERSION=$kafka_version LD_LIBRARY_PATH=../src:../src-cpp \
        timeout 1200 ./test-runner -p1 -L >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
    passed=$(grep -cE '^\[[^]]*\] \[ [a-z_0-9]+:[0-9]+.*: PASS \(' <<<"$plain")
    if [[ $rc == 0 ]] && grep -q 'ALL TESTS PASSED' <<<"$plain"; then
        status=PASSED
        grep -qE "^\| *${t}_[^|]*\| *SKIPPED" <<<"$plain" && ! grep -qE "^\| *${t}_[^|]*\| *PASSED" <<<"$plain" &&
            status=SKIPPED
    else
        status=FAILED
        failed=$((failed + 1))
    fi
    reason=$(grep -m1 -A1 -E '^### Test .* failed at' <<<"$plain" | tail -1 | cut -c1-150)
    [[ $rc == 124 ]] && reason="timed out after 1200 s"
    results+=("$(printf '%-5s %-48s %-7s %5ss  %2s sub-test(s) passed  %s' \
        "$t" "${sub:-(whole test)}" "$status" "$secs" "$passed" "${status/PASSED/}${reason:+: $reason}")")
}
for t in $tests; do
    if [[ -n ${split[$t]:-} ]]; then
        IFS='|' read -r -a subs <<<"${split[$t]}"
        for sub in "${subs[@]}"; do run_unit "$t" "$sub"; done
    else
        run_unit "$t" ""
    fi
done

echo
echo "librdkafka $ref test-runner against minibroker ($bootstrap, TEST_KAFKA_VERSION=$kafka_version)"
printf '%s\n' "${results[@]}"
echo "$failed failed; test logs and broker logs: $data"
exit $((failed > 0))
