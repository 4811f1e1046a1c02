#!/usr/bin/env bash
# Rebalance cost on one node: one member joining a group of --members (default 100) librdkafka
# consumers on --partitions partitions (default 200) while records flow, with the classic
# protocol (eager and cooperative-sticky) and KIP-848's (group.protocol=consumer), on a release
# sluice node or, with --against-kafka, Apache Kafka 4.4 (scripts/kafka-as-sluice.py). Prints
# how long until the new member holds partitions and the group settles, and the longest pause
# in consumption of the members already there; writes a JSON result (default
# bench-results/rebalance-<broker>-<UTC>.json). Asserts nothing about speed. Arguments go to
# integration-tests/python/rebalance_bench.py, e.g.
#   scripts/rebalance-bench.sh
#   scripts/rebalance-bench.sh --against-kafka
#   scripts/rebalance-bench.sh --protocols consumer --members 50
# Measured runs on a shared machine: flock /work/bench.lock scripts/rebalance-bench.sh ...
# The broker binary is $SLUICE_BIN if set, else target/release/sluice built here first.
# rebalance_bench.py's own options: .venv/bin/python integration-tests/python/rebalance_bench.py --help
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
if wants_help "$@"; then
    print_script_usage
    exit 0
fi
# Only what this run will do (the build, Kafka's jars, the venv): see prepare_python_bench.
prepare_python_bench no-java "$@" || exit 1
exec "$PYTHON" integration-tests/python/rebalance_bench.py "$@"
