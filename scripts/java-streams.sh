#!/usr/bin/env bash
# Fetches Kafka Streams (integration-tests/java/streams/pom.xml) from Maven Central into
# .java-streams/lib, once per pom (.java-streams/lib/.complete marks a finished copy and holds the
# pom's sha256sum, so a new Kafka version replaces an older copy), and compiles the Streams
# application integration-tests/java/streams/src into .java-streams/classes with javac, again only
# when a source or the jars are newer than the last build. Used by scripts/test.sh for
# integration-tests/python/test_kafka_streams.py. Kept apart from .java-lib (scripts/java-lib.sh),
# the CLI tests' jars, so each moves on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    echo "mvn and javac are needed for the Kafka Streams test: install maven and a JDK 17+" >&2
    exit 1
fi
out=.java-streams
pom=integration-tests/java/streams/pom.xml
want=$(sha256sum "$pom")
if [ ! -f "$out/lib/.complete" ] || [ "$(cat "$out/lib/.complete")" != "$want" ]; then
    rm -rf "$out/lib"
    mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$(pwd)/$out/lib"
    echo "$want" > "$out/lib/.complete"
fi
src=integration-tests/java/streams/src/main/java
stamp=$out/classes/.built
if [ -f "$stamp" ] && [ -z "$(find "$src" "$out/lib/.complete" -newer "$stamp")" ]; then
    echo "the Kafka Streams application is up to date in $out/classes"
    exit 0
fi
rm -rf "$out/classes"
mkdir -p "$out/classes"
javac -nowarn --release 17 -d "$out/classes" -cp "$out/lib/*" $(find "$src" -name '*.java')
touch "$stamp"
echo "compiled the Kafka Streams application into $out/classes ($(ls "$out"/lib/*.jar | wc -l) jars in $out/lib)"
