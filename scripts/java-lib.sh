#!/usr/bin/env bash
# Fetches Apache Kafka's Java client and CLI tools (integration-tests/java/pom.xml) from Maven
# Central into .java-lib/, once per pom: .java-lib/.complete marks a finished copy and holds the
# pom's sha256sum, so a changed pom (a new Kafka version) replaces an older copy. Used by
# scripts/test.sh and by the Java adapters of the compatibility matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "mvn and java are needed for the Java client tests: install maven and a JDK 17+" >&2
    exit 1
fi
pom=integration-tests/java/pom.xml
want=$(sha256sum "$pom")
if [ ! -f .java-lib/.complete ] || [ "$(cat .java-lib/.complete)" != "$want" ]; then
    rm -rf .java-lib
    mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$(pwd)/.java-lib"
    echo "$want" > .java-lib/.complete
fi
echo "$(ls .java-lib/*.jar | wc -l) jars in .java-lib"
