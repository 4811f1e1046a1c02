#!/usr/bin/env bash
# Fetches Apache Kafka's Java client and CLI tools (integration-tests/java/pom.xml) from Maven
# Central into .java-lib/, and Kafka 4.1's Java client alone (integration-tests/java/clients-4.1/
# pom.xml: the first KafkaShareConsumer) into .java-lib-4.1/, once per pom: <dir>/.complete
# marks a finished copy and holds the pom's sha256sum, so a changed pom (a new Kafka version)
# replaces an older copy. Used by scripts/test.sh and by the Java adapters of the compatibility
# matrix. With --kafka-4.1 it also copies Kafka 4.1's broker (integration-tests/java/kafka-4.1/
# pom.xml) into .java-lib-kafka-4.1/, which only `scripts/bench.sh --against-kafka` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "mvn and java are needed for the Java client tests: install maven and a JDK 17+" >&2
    exit 1
fi
# copy <pom> <dir>: the pom's classpath into <dir>, unless it holds this pom's already.
copy() {
    local pom=$1 dir=$2 want
    want=$(sha256sum "$pom")
    if [ ! -f "$dir/.complete" ] || [ "$(cat "$dir/.complete")" != "$want" ]; then
        rm -rf "$dir"
        mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$(pwd)/$dir"
        echo "$want" > "$dir/.complete"
    fi
    echo "$(ls "$dir"/*.jar | wc -l) jars in $dir"
}
copy integration-tests/java/pom.xml .java-lib
copy integration-tests/java/clients-4.1/pom.xml .java-lib-4.1
if [ "${1:-}" = --kafka-4.1 ]; then
    copy integration-tests/java/kafka-4.1/pom.xml .java-lib-kafka-4.1
fi
