#!/usr/bin/env bash
# Benchmarks release sluice brokers with rdkafka clients on 127.0.0.1 (not part of the tests):
# produce throughput with acks=all (2 KB and 100 B records), produce-to-consume latency at a
# fixed rate, and CPU seconds / peak RSS of every broker per phase. One node by default;
# --nodes 3 starts a 3-node cluster and creates every topic with replication factor 3, with two
# latency consumers, each in its own consumer group committing offsets (--consumers C to change,
# --no-commit to turn commits off). Arguments go to sluice-bench, e.g.
#   scripts/bench.sh --records-2k 500000 --rate 20000 --duration-s 30 --set log.segment.bytes=1073741824
#   scripts/bench.sh --nodes 3 --records-2k 200000 --records-100b 0 --rate 20000 --duration-s 20
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
    || TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
cargo build --release -p sluice-broker
cargo build --release -p sluice-integration-tests --bin sluice-bench
export SLUICE_BIN="$TARGET_DIR/release/sluice"
exec "$TARGET_DIR/release/sluice-bench" "$@"
