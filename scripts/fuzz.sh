#!/usr/bin/env bash
# The fuzzing campaign (docs/fuzzing.md): runs each cargo-fuzz target for N inputs, one job, from a
# scratch copy of its committed corpus (fuzz/corpus/<target> plus fuzz/corpus/regressions/<target>),
# with libFuzzer's memory limits so an oversized allocation is a crash, not a slow machine.
#
#   scripts/fuzz.sh [--runs N] [--target T]...     N defaults to 10,000,000; T to every target
#
# Prints one line per target, `fuzz: <target>: <N> inputs, <C> crashes (...)`, then a total.
# libFuzzer's output goes to fuzz/artifacts/logs/<target>.log. Exits non-zero if any target
# crashed; its inputs are kept in fuzz/artifacts/<target>/
# (reproduce: cargo +nightly fuzz run <target> <file>; minimize: cargo +nightly fuzz tmin).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# The install step shared by the scripts (issue 30).
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh

RUNS=10000000
TARGETS=()
while [ $# -gt 0 ]; do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --target) TARGETS+=("$2"); shift 2 ;;
        -h|--help) print_script_usage; exit 0 ;;
        *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

# libFuzzer's C++ sources and the crates' C code, before cargo-fuzz is installed or run.
ensure_system_packages fuzz || exit 1
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || exit 1
fi
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(cargo +nightly fuzz list)
fi

# libFuzzer limits: RSS over 2 GiB or one malloc over 512 MiB is an `oom-*` crash; an input taking
# over 10 s is a `timeout-*` crash.
LIMITS=(-rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1)

SCRATCH=$(mktemp -d /tmp/sluice-fuzz.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
TOTAL_RUNS=0
TOTAL_CRASHES=0
for target in "${TARGETS[@]}"; do
    dir=$SCRATCH/$target
    mkdir -p "$dir/corpus" "$dir/artifacts"
    for seeds in "fuzz/corpus/$target" "fuzz/corpus/regressions/$target"; do
        if [ -d "$seeds" ]; then cp -r "$seeds/." "$dir/corpus/"; fi
    done
    seeds=$(ls "$dir/corpus" | wc -l)
    log=$ROOT/fuzz/artifacts/logs/$target.log
    mkdir -p "$(dirname "$log")"
    echo "fuzz: $target: $RUNS inputs from $seeds seeds, log $log"
    start=$SECONDS
    cargo +nightly fuzz run "$target" "$dir/corpus" -- \
        -runs="$RUNS" "${LIMITS[@]}" -artifact_prefix="$dir/artifacts/" >"$log" 2>&1
    rc=$?
    elapsed=$((SECONDS - start))

    # "Done 10000000 runs in 412 second(s)" ends a clean run; after a crash, take the last "#N".
    runs=$(grep -o '^Done [0-9]* runs' "$log" | tail -n 1 | cut -d' ' -f2)
    [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    runs=${runs:-0}
    exec_s=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
    if [ "${exec_s:-0}" -eq 0 ] && [ "$elapsed" -gt 0 ]; then exec_s=$((runs / elapsed)); fi
    crashes=$(find "$dir/artifacts" -maxdepth 1 -type f \
        \( -name 'crash-*' -o -name 'oom-*' -o -name 'leak-*' -o -name 'timeout-*' \) | wc -l)
    if [ "$crashes" -eq 0 ] && [ "$rc" -ne 0 ]; then
        crashes=1 # died without writing an input (a build failure, or libFuzzer itself)
        echo "fuzz: $target: exited $rc without an artifact; last lines of $log:"
        tail -n 20 "$log"
    fi
    if [ "$crashes" -gt 0 ]; then
        mkdir -p "fuzz/artifacts/$target"
        cp "$dir/artifacts/"* "fuzz/artifacts/$target/" 2>/dev/null
        cp "$log" "fuzz/artifacts/$target/libfuzzer-$(date +%Y%m%dT%H%M%S).log"
        grep -m 1 -A 40 '^==[0-9]*==ERROR\|panicked at' "$log"
        echo "fuzz: $target: inputs and log kept in $ROOT/fuzz/artifacts/$target/"
    fi
    echo "fuzz: $target: $runs inputs, $crashes crashes (${exec_s:-?} exec/s, ${elapsed}s)"
    TOTAL_RUNS=$((TOTAL_RUNS + runs))
    TOTAL_CRASHES=$((TOTAL_CRASHES + crashes))
done

echo "fuzz: total: ${#TARGETS[@]} targets, $TOTAL_RUNS inputs, $TOTAL_CRASHES crashes"
[ "$TOTAL_CRASHES" -eq 0 ]
