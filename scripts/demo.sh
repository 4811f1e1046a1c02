#!/usr/bin/env bash
# The seed workload on a local 3-node cluster: builds the broker and the demo (release), then
# runs `sluice-demo run` with the arguments given, e.g.
#
#   scripts/demo.sh                          20,000 orders/s of 2 KB until Ctrl-C
#   scripts/demo.sh --scale 0.05             the same at 5% of the rate (small machines)
#   scripts/demo.sh --duration-s 60          stop by itself after a minute
#   scripts/demo.sh --secure                 SASL_SSL, SCRAM-SHA-512 and ACLs, each program as its own user
#
# Data, the sink database and every program's log live in ./demo-data (--data-dir).
# `sluice-demo run`'s own options, after a build: target/release/sluice-demo run --help
set -euo pipefail
cd "$(dirname "$0")/.."
# The install step shared by the scripts (issue 30).
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
if wants_help "$@"; then
    print_script_usage
    exit 0
fi
ensure_system_packages build || exit 1
cargo build --release -p sluice-broker -p sluice-demo
target_dir="$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
exec "$target_dir/release/sluice-demo" run "$@"
