#!/usr/bin/env bash
# Scale on one machine (issue 14, part 3): starts a 3-node release Sluice cluster and measures
# creation of 10,000 partitions at RF 3, Metadata time and size, RSS per idle partition replica,
# produce latency spread over every partition, recovery after SIGKILL of all nodes, and the seed
# load with 5,000 idle connections open. Prints a table and writes a JSON result (default
# bench-results/scale-<UTC>.json). Asserts nothing about speed. Arguments go to
# integration-tests/python/scale_bench.py, e.g.
#   scripts/scale.sh                                  # the full run (about 5 minutes)
#   scripts/scale.sh --quick                          # a smoke: 300 partitions, 200 connections
#   scripts/scale.sh --partitions 5000 --per-topic 1000 --idle-connections 2000
#   scripts/scale.sh --against-kafka                  # the same phases against Apache Kafka too,
#                                                     # side by side (--runs N, --kafka-heap OPTS)
#   scripts/scale.sh --seed-alone --skip memory       # the seed load before the partitions exist
#                                                     # too: its p99 beside them over before them
#   scripts/scale.sh --written-idle-partitions 1000   # also: RSS per replica that was written
#                                                     # (--written-idle-mib each), then left idle
# Measured runs on a shared machine: flock /work/bench.lock scripts/scale.sh
# The broker binary is $SLUICE_BIN if set, else target/release/sluice built here first.
# scale_bench.py's own options: .venv/bin/python integration-tests/python/scale_bench.py --help
set -euo pipefail
cd "$(dirname "$0")/.."
# The install step shared by the scripts (issue 30).
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
if wants_help "$@"; then
    print_script_usage
    exit 0
fi
# Only what this run will do: the broker's build unless $SLUICE_BIN is given, and the venv's pip
# unless $PYTHON (default .venv/bin/python) is already there.
PYTHON=${PYTHON:-.venv/bin/python}
profiles=()
if [ -z "${SLUICE_BIN:-}" ]; then profiles+=(broker); fi
if [ ! -x "$PYTHON" ]; then profiles+=(venv); fi
ensure_system_packages ${profiles[@]+"${profiles[@]}"} || exit 1
# Each node holds a file per idle partition replica (its active segment's log) plus its
# connections: raise the soft open-files limit to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ -z "${SLUICE_BIN:-}" ]; then
    TARGET_DIR=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
        || TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
    cargo build --release -p sluice-broker
    export SLUICE_BIN="$TARGET_DIR/release/sluice"
fi
if [ ! -x "$PYTHON" ]; then
    bash scripts/python-venv.sh
fi
for arg in "$@"; do
    # Kafka's broker jars for the side-by-side run, fetched once from Maven Central.
    if [ "$arg" = --against-kafka ]; then bash scripts/java-lib.sh; fi
done
exec "$PYTHON" integration-tests/python/scale_bench.py "$@"
