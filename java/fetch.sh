#!/usr/bin/env bash
# Resolve the pinned Java artifacts of java/pom.xml from Maven Central into the local Maven cache
# (~/.m2) and write one class path per module to build/java/<module>.classpath:
#   clients  kafka-clients, kafka-tools, kafka-streams
#   connect  connect-runtime and connect-file (4.3.1: connect-file 4.4.0 is not served)
#   kafka    Apache Kafka's broker (kafka_2.13), the reference
#   spark    Spark's built-in connector (spark-sql-kafka-0-10) without Spark itself
#   iceberg-rest  Apache Iceberg's REST catalog server (RESTCatalogServer, iceberg-open-api's
#            test fixtures), the server of the apache/iceberg-rest-fixture image
#   iceberg-spark  Iceberg's Spark runtime (4.1_2.13) and SQLite's JDBC driver, for Spark to
#            read Iceberg topics' tables (tests/spark/test_iceberg_read.py)
# One Maven run for them all; offline first, so a repeated run neither downloads nor asks.
# A module that cannot be resolved (no mvn, Maven Central unreachable, an artifact not served)
# leaves build/java/<module>.missing with the reason instead, and the tests under tests/java
# skip with it. The script exits 0 all the same unless called with --strict, so that CI goes
# on without Maven.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/java
modules=(clients connect kafka spark iceberg-rest iceberg-spark)
mkdir -p "$out"
strict=0
[[ "${1:-}" == "--strict" ]] && strict=1
for module in "${modules[@]}"; do
    rm -f "$out/$module.classpath" "$out/$module.missing"
done
log=$out/mvn.log
if ! command -v mvn >/dev/null; then
    echo "mvn is not installed (apt-get install maven)" >"$log"
elif ! mvn -o -q -B -fae -f java/pom.xml validate >"$log" 2>&1; then
    # Not everything is cached yet: ask Maven Central.
    mvn -q -B -fae -f java/pom.xml validate >"$log" 2>&1
fi
failed=0
for module in "${modules[@]}"; do
    if [[ -f "$out/$module.classpath" ]]; then
        echo "$module: $out/$module.classpath ($(tr ':' '\n' <"$out/$module.classpath" | wc -l) jars)"
    else
        failed=1
        # Maven's first ERROR line about this module names the artifact or host it lacked.
        reason=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m1 -E "ERROR.*(project $module|$module:)" \
            || sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m1 . )
        echo "mvn could not resolve java/$module/pom.xml: $reason" >"$out/$module.missing"
        echo "$module: not resolved: $reason" >&2
    fi
done
if (( strict && failed )); then
    exit 1
fi
exit 0
