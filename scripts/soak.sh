#!/usr/bin/env bash
# The soak (issue 15): runs N seeded random fault schedules one after another, each on a fresh
# 3-node cluster of release `sluice` brokers with the recorded acks=all idempotent workload and
# two consumer groups committing, and checks the invariants after each (docs/soak.md).
#   scripts/soak.sh --schedules N [--seed S] [--duration-s D] [--rate R] [--partitions] [--overlap] [--secure]
#                   [--transactions]
# Schedule i uses seed S+i (S defaults to the clock and is printed); a failed schedule prints
# itself and the command that replays it. The last line reads
#   soak: N schedules, A acknowledged, L lost, V invariant violations
# and the exit status is non-zero if L or V is. --secure runs the schedules on a SASL_SSL-only
# cluster (SCRAM users with ACLs, certificates from a test CA) and adds certificate rotations
# and SCRAM credential changes to the faults. --transactions adds transactional producers and a
# consume-transform-produce stage copying their topic in transactions, aims faults at their
# coordinators and leaders, and adds Jepsen's anomalies for both (lost writes, duplicates,
# aborted reads, torn transactions, non-monotonic sends and polls, G1c cycles) to each
# schedule's line and the last one; any of them makes the exit status non-zero.
# --partitions needs root and the packages iproute2 and nftables (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
# The install step shared by the scripts (issue 30): what the build needs, or a sentence naming
# the command to run, before any cargo command.
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
# sluice-soak has a --help of its own, but reaching it would build first.
if wants_help "$@"; then
    print_script_usage
    exit 0
fi
profiles=(build)
case " $* " in *" --partitions "*) profiles+=(netns) ;; esac
ensure_system_packages "${profiles[@]}" || exit 1
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
    || TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
cargo build --release -p sluice-broker
cargo build --release -p sluice-integration-tests --bin sluice-soak
export SLUICE_BIN="$TARGET_DIR/release/sluice"
exec "$TARGET_DIR/release/sluice-soak" "$@"
