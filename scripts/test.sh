#!/usr/bin/env bash
# Sluice's test command: unit tests, Rust integration tests with rdkafka, Python/kcat client tests,
# and the client compatibility matrix (scripts/compat.sh), all against a real release build of the
# broker on 127.0.0.1.
#
#   bash scripts/test.sh            (--help prints this text)
#
# Works on a fresh Debian bookworm machine with Rust, Python 3.11 and a C toolchain; installs
# what is missing with apt-get (as root, or via sudo) only when something is missing, through
# scripts/system-packages.sh (its profile `test`):
#   kcat                  CLI client tests (Debian's kcat uses librdkafka 2.0.2, on purpose)
#   cmake, g++, make      rdkafka's bundled librdkafka build (feature cmake-build)
#   pkg-config,zlib1g-dev gzip codec in that build
#   libcurl4-openssl-dev  header only: librdkafka 2.12's rdkafka_conf.c includes <curl/curl.h>
#                         under `#ifdef WITH_OAUTHBEARER_OIDC`, which its CMake config always
#                         defines (to 0) - curl itself stays disabled and unlinked
#   libssl-dev            rdkafka's `ssl` feature: librdkafka's TLS and SASL/SCRAM link the
#                         system's OpenSSL (integration-tests/tests/it/security.rs and the
#                         compatibility matrix's security rows)
#   python3-venv          only if `python3 -m venv` cannot bootstrap pip
#   chromium              headless browser for the console test (test_console.py)
#
# Environment: CARGO_TARGET_DIR is honoured; SLUICE_SKIP_APT=1 skips the package step;
# PYTEST_ARGS / CARGO_TEST_ARGS pass extra arguments through; RUST_TEST_THREADS (default 3)
# sets how many Rust tests run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# The install step shared with the other scripts (ensure_system_packages).
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
if wants_help "$@"; then
    print_script_usage
    exit 0
fi

declare -a SUMMARY=()
FAILED=0
START_ALL=$SECONDS

step() { # step <name> <command...>: runs it, records PASS/FAIL and duration, never exits
    local name=$1; shift
    local t0=$SECONDS
    echo
    echo "==> $name"
    if "$@"; then
        SUMMARY+=("PASS  $(printf '%-42s' "$name") $((SECONDS - t0))s")
    else
        local rc=$?
        SUMMARY+=("FAIL  $(printf '%-42s' "$name") $((SECONDS - t0))s (exit $rc)")
        FAILED=1
        return $rc
    fi
}

skip() { SUMMARY+=("SKIP  $(printf '%-42s' "$1") ($2)"); FAILED=1; }

summary() {
    echo
    echo "================ sluice test summary ================"
    printf '%s\n' "${SUMMARY[@]}"
    echo "total $((SECONDS - START_ALL))s"
    if [ "$FAILED" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
}
trap summary EXIT

wait_for_installs() { # the background compat installs: their output, and their exit status
    local rc=0
    wait "$INSTALL_PID" || rc=$?
    cat "$INSTALL_LOG"
    return $rc
}

export SLUICE_JAVA_LIB="$ROOT/.java-lib"

# Where cargo puts binaries (honours CARGO_TARGET_DIR and build.target-dir in cargo config).
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
    || TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# Short anyhow errors from failing tests (panics keep RUST_BACKTRACE behaviour).
export RUST_LIB_BACKTRACE=${RUST_LIB_BACKTRACE:-0}
export SLUICE_BIN="$TARGET_DIR/release/sluice"

# docker-compose.yml publishes fixed ports inside the kernel's ephemeral range, and
# test_compose_topology.py forwards them from loopback. A long-lived outgoing connection of
# another test (a node's quorum or replication link lives as long as its cluster) can hold one
# for longer than that test waits. Reserved, the kernel never picks them as a local port.
reserve_compose_ports() {
    local file=/proc/sys/net/ipv4/ip_local_reserved_ports ports current
    ports=$(grep -ohE '"[0-9]+:[0-9]+"' docker-compose.yml docker-compose.secure.yml \
        | tr -d '"' | cut -d: -f1 | sort -un | paste -sd, -)
    if ! [ -w "$file" ]; then
        echo "cannot write $file (not root?): ports $ports stay in the ephemeral range"
        return 0
    fi
    current=$(cat "$file")
    echo "${current:+$current,}$ports" > "$file"
    echo "reserved from the ephemeral range: $(cat "$file")"
}

step "module layers (no import circles)" python3 scripts/check-module-cycles.py broker/src raft-meta/src protocol/src || true
step "docker-compose ports kept out of the ephemeral range" reserve_compose_ports || true
step "integration-tests index up to date" python3 scripts/gen-test-index.py --check || true
step "system packages" ensure_system_packages test || true
step "python venv (.venv) + pinned deps" bash scripts/python-venv.sh || true
step "Kafka Java client + CLI tools (Maven)" bash scripts/java-lib.sh || true
step "Kafka Streams application (Maven, javac)" bash scripts/java-streams.sh || true
# sluice-demo: test_compose_topology.py runs docker-compose.secure.yml's `acls` service with it
# (cargo test builds it anyway, for the demo's own tests).
if step "cargo build --release sluice, sluice-bench, sluice-lazyfs, sluice-demo" cargo build --release -p sluice-broker -p sluice-integration-tests -p sluice-lazyfs -p sluice-demo --bin sluice --bin sluice-bench --bin sluice-lazyfs --bin sluice-demo; then
    echo "broker binary: $SLUICE_BIN"
    # The matrix's client installs (npm source builds, go build, javac: minutes on a fresh
    # machine, cached afterwards) run while the Rust tests run, which mostly wait on brokers.
    # rdkafka-rust is a cargo build and would only queue behind cargo test's lock.
    INSTALL_LOG=$(mktemp /tmp/sluice-compat-installs-XXXXXX.log)
    python3 compat/run.py --install-only --skip rdkafka-rust >"$INSTALL_LOG" 2>&1 &
    INSTALL_PID=$!
    # Three tests at a time: the integration tests spend most of their time waiting on brokers
    # (session timeouts, failovers), so two cores idle half the time at libtest's default of two.
    export RUST_TEST_THREADS=${RUST_TEST_THREADS:-3}
    # shellcheck disable=SC2086
    step "cargo test --workspace --release --no-fail-fast" cargo test --workspace --release --no-fail-fast ${CARGO_TEST_ARGS:-} || true
    step "compat client installs (ran during cargo test)" wait_for_installs || true
    if [ -x .venv/bin/python ]; then
        # shellcheck disable=SC2086
        step "pytest integration-tests/python" .venv/bin/python -m pytest -q integration-tests/python ${PYTEST_ARGS:-} || true
    else
        skip "pytest integration-tests/python" "no .venv"
    fi
    step "compatibility matrix (scripts/compat.sh)" bash scripts/compat.sh || true
else
    skip "cargo test --workspace --release" "broker build failed"
    skip "pytest integration-tests/python" "broker build failed"
    skip "compatibility matrix (scripts/compat.sh)" "broker build failed"
fi

[ "$FAILED" -eq 0 ]
