#!/usr/bin/env bash
# Benchmarks one release sluice node with rdkafka clients on 127.0.0.1 (not part of the tests):
# produce throughput with acks=all (2 KB and 100 B records), produce-to-consume latency at a
# fixed rate, and broker CPU seconds / peak RSS per phase. Arguments go to sluice-bench, e.g.
#   scripts/bench.sh --records-2k 500000 --rate 20000 --duration-s 30 --set log.segment.bytes=1073741824
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
    || TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
cargo build --release -p sluice-broker
cargo build --release -p sluice-integration-tests --bin sluice-bench
export SLUICE_BIN="$TARGET_DIR/release/sluice"
exec "$TARGET_DIR/release/sluice-bench" "$@"
