#!/usr/bin/env bash
# Benchmarks release sluice brokers with rdkafka clients on 127.0.0.1 (not part of the tests):
# produce throughput with acks=all (2 KB and 100 B records), produce-to-consume latency at a
# fixed rate, and CPU seconds / peak RSS of every broker per phase. One node by default;
# --nodes 3 starts a 3-node cluster and creates every topic with replication factor 3, with two
# latency consumers, each in its own consumer group committing offsets (--consumers C to change,
# --no-commit to turn commits off). Arguments go to sluice-bench, e.g.
#   scripts/bench.sh --records-2k 500000 --rate 20000 --duration-s 30 --set log.segment.bytes=1073741824
#   scripts/bench.sh --nodes 3 --records-2k 200000 --records-100b 0 --rate 20000 --duration-s 20
#
# scripts/bench.sh --against-kafka [--quick] [--runs N] [--systems sluice,kafka] [--out PATH] [--png PATH]
# runs a 3-node Sluice cluster, a 3-node cluster of the newest Apache Kafka and one of Kafka 4.1
# (jars fetched by scripts/java-lib.sh --kafka-4.1, 1 GB heap per node) in turn, --runs of each
# (default 2) forwards then backwards, A B C C B A (--systems sluice,kafka: A B B A, no 4.1),
# with sluice-bench and the newest Kafka's ProducerPerformance against each (both also in
# 100 ms transactions, beside their non-transactional figures), and prints one table of all,
# each figure's spread across a system's runs and Sluice's ratio to each Kafka
# (scripts/bench_against_kafka.py; docs/performance.md). It writes
# bench-results/against-kafka-<UTC>.json and a PNG of latency percentiles beside it.
# --quick is a smoke run: tiny counts, a few seconds per phase.
# Before run 1 it pauses the VM's free page reporting (where /sys/module/page_reporting exists
# and is writable) and touches the free memory once, restoring the setting afterwards, so that
# no run's page cache grows into memory the host must fault back in (--host-memory as-is: not).
# --security SASL_SSL runs each system twice in its turn, plaintext and then with TLS and SASL
# SCRAM-SHA-512 as its only listener (a test CA's PEM certificate, replication over it too), the
# same workload, and prints each system's throughput, CPU per GB and p99 under both and what
# TLS and SASL cost it. --records-2k, --records-100b, --rate, --duration-s, --pp-max-records,
# --settle-s and --no-linger0 scale the runs, e.g.
#   scripts/bench.sh --against-kafka --security SASL_SSL --records-2k 100000 --records-100b 200000 \
#       --rate 2000 --duration-s 20 --pp-max-records 100000 --settle-s 10 --no-linger0
# Without --against-kafka, --security SASL_SSL has sluice-bench start its brokers secured so.
# SLUICE_BENCH_KEEP=1 keeps --against-kafka's broker data and logs (their paths are printed).
# sluice-bench's own options, after a build: target/release/sluice-bench --help
set -euo pipefail
cd "$(dirname "$0")/.."
# The install step shared by the scripts (issue 30).
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
if wants_help "$@"; then
    print_script_usage
    exit 0
fi
against_kafka=0
declare -a rest=()
for arg in "$@"; do
    if [ "$arg" = --against-kafka ]; then against_kafka=1; else rest+=("$arg"); fi
done
# What the build needs, and for --against-kafka the venv of the report's plot, asked for at once
# so a fresh machine stops (or installs) before Maven fetches any jar.
profiles=(build)
if [ "$against_kafka" = 1 ]; then profiles+=(venv); fi
ensure_system_packages "${profiles[@]}" || exit 1
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
    || TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
if [ "$against_kafka" = 1 ]; then
    bash scripts/java-lib.sh --kafka-4.1
    # The report's plot needs matplotlib, pinned with the test clients in the test venv.
    bash scripts/python-venv.sh
fi
cargo build --release -p sluice-broker
cargo build --release -p sluice-integration-tests --bin sluice-bench
if [ "$against_kafka" = 1 ]; then
    exec .venv/bin/python scripts/bench_against_kafka.py run \
        --sluice-bin "$TARGET_DIR/release/sluice" --bench-bin "$TARGET_DIR/release/sluice-bench" \
        --java-lib "$(pwd)/.java-lib" --kafka-4.1-lib "$(pwd)/.java-lib-kafka-4.1" ${rest[@]+"${rest[@]}"}
fi
export SLUICE_BIN="$TARGET_DIR/release/sluice"
exec "$TARGET_DIR/release/sluice-bench" "$@"
