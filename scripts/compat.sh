#!/usr/bin/env bash
# The client compatibility matrix (issue 11 §3, compat/README.md): installs every client of
# compat/clients*.json (cached), runs each one's scenarios against a fresh single node and then a
# fresh 3-node cluster of real `sluice` processes, writes docs/compatibility.md, and fails on any
# result compat/known-failures.txt does not expect. Run by scripts/test.sh; alone:
#   bash scripts/compat.sh                       # everything, rewrites docs/compatibility.md
#   bash scripts/compat.sh --clients kcat,kafka-python --clusters single
# SLUICE_BIN picks the broker binary; without it, the release build is built and used.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SLUICE_BIN:-}" ]; then
    cargo build --release -p sluice-broker
    TARGET_DIR=$(cargo metadata --no-deps --format-version 1 \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    export SLUICE_BIN="$TARGET_DIR/release/sluice"
fi
exec python3 compat/run.py "$@"
