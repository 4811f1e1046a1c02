#!/usr/bin/env bash
# Builds the Java adapters of the compatibility matrix (java-client, kafka-tools): fetches Kafka's
# jars into .java-lib (scripts/java-lib.sh, cached) and compiles compat/clients/java/src into
# .compat-build/java with javac, only when a source or the jars (a new .java-lib copy) are newer
# than the last build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
bash scripts/java-lib.sh
out=.compat-build/java
stamp=$out/.built
if [ -f "$stamp" ] && [ ! .java-lib/.complete -nt "$stamp" ] \
    && [ -z "$(find compat/clients/java/src -newer "$stamp" -name '*.java')" ]; then
    echo "compat Java adapters are up to date in $out"
    exit 0
fi
rm -rf "$out"
mkdir -p "$out"
javac -nowarn -d "$out" -cp ".java-lib/*" $(find compat/clients/java/src -name '*.java')
touch "$stamp"
echo "compiled the compat Java adapters into $out"
