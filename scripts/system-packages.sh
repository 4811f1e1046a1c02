#!/usr/bin/env bash
# The one install step for the Debian packages Sluice's scripts need (issue 30). Every script
# that builds sources this file and calls `ensure_system_packages <profile>...` before its first
# cargo build, so a fresh clone either gets what it lacks or stops at once with a sentence naming
# the command to run, instead of failing minutes later inside a crate's build script. Run
# directly, it installs what the profiles given need (default: test, which is everything):
#
#   bash scripts/system-packages.sh [profile...]
#
# Profiles, each what one kind of run needs:
#   broker   building the `sluice` binary alone: a C compiler (cc) for ring, zstd and lz4
#   build    building the whole workspace: rdkafka's bundled librdkafka (feature cmake-build)
#            in integration-tests and demo
#   fuzz     the cargo-fuzz targets: a C++ compiler for libFuzzer (they build no librdkafka)
#   netns    network-partition faults: `ip netns` and `nft`
#   lazyfs   power-loss faults: FUSE mounts for sluice-lazyfs
#   venv     the Python venv (.venv): pip bootstrapped by `python3 -m venv`
#   test     everything scripts/test.sh uses
#
# A package counts as present when what the scripts use of it is here (a command on PATH, a
# header), so a machine that has those from elsewhere installs nothing. A missing package is
# installed with apt-get, as root or via sudo, after one `apt-get update`. When apt-get cannot be
# used (no apt-get, not root and no sudo, or SLUICE_SKIP_APT=1 in the environment), nothing is
# installed: a sentence on stderr names the missing packages and the command to run, and the
# step fails (exit status 1; 2 for an unknown profile).

# The packages of each profile. `test` keeps the order scripts/test.sh installed them in.
_sluice_profile_packages() {
    case $1 in
        broker) echo gcc ;;
        build) echo cmake g++ make pkg-config zlib1g-dev libssl-dev libcurl4-openssl-dev ;;
        fuzz) echo g++ ;;
        netns) echo iproute2 nftables ;;
        lazyfs) echo fuse3 ;;
        venv) echo python3-venv ;;
        test)
            echo kcat openssl chromium cmake g++ make pkg-config iproute2 nftables fuse3 \
                zlib1g-dev libssl-dev libcurl4-openssl-dev python3-venv
            ;;
        *) return 1 ;;
    esac
}

# What a profile's packages are for, as the end of the sentence "<script> needs the system
# packages ... <purpose>".
_sluice_profile_purpose() {
    case $1 in
        broker) echo "to build the broker" ;;
        build) echo "to build" ;;
        fuzz) echo "to build the fuzz targets" ;;
        netns) echo "for its network-partition faults" ;;
        lazyfs) echo "for its power-loss faults" ;;
        venv) echo "for its Python venv" ;;
        test) echo "for the tests" ;;
    esac
}

# _sluice_package_present <package>: whether what Sluice uses of the Debian package is here.
_sluice_package_present() {
    case $1 in
        # The CLI client tests (Debian's kcat uses librdkafka 2.0.2, on purpose).
        kcat) command -v kcat ;;
        # The security tests' PKCS12 stores (openssl pkcs12 -export) and TLS checks (s_client).
        openssl) command -v openssl ;;
        # The headless browser of the console test (test_console.py).
        chromium) command -v chromium ;;
        # cmake, g++ and make build rdkafka's bundled librdkafka (feature cmake-build).
        cmake) command -v cmake ;;
        g++) command -v g++ ;;
        make) command -v make ;;
        # pkg-config and zlib1g-dev: the gzip codec in that build.
        pkg-config) command -v pkg-config ;;
        # The C compiler the cc crate calls for ring, zstd and lz4 (and rustc links with).
        gcc) command -v cc ;;
        # `ip netns` for the compose-topology test's network namespaces and the partition faults.
        iproute2) command -v ip ;;
        # `nft` for the partition tests' drop rules (integration-tests/tests/it/partitions.rs).
        nftables) command -v nft ;;
        # /dev/fuse mounts (fusermount3 for non-root) for the power-loss tests' sluice-lazyfs.
        fuse3) command -v fusermount3 ;;
        zlib1g-dev) [ -e /usr/include/zlib.h ] ;;
        # OpenSSL headers and libssl for rdkafka's `ssl` feature (TLS, SASL/SCRAM in the Rust tests).
        libssl-dev) [ -e /usr/include/openssl/ssl.h ] ;;
        # Header only: librdkafka 2.12's rdkafka_conf.c includes <curl/curl.h> under
        # `#ifdef WITH_OAUTHBEARER_OIDC`, which its CMake config always defines (to 0); curl
        # itself stays disabled and unlinked. Debian puts the header under the multiarch directory.
        libcurl4-openssl-dev)
            [ -e /usr/include/curl/curl.h ] \
                || [ -e "/usr/include/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)/curl/curl.h" ]
            ;;
        # Debian's own python3 needs python3-venv for ensurepip; pyenv/upstream builds have it.
        python3-venv) python3 -c 'import ensurepip, venv' ;;
        *) return 1 ;;
    esac >/dev/null 2>&1
}

# The script the sentences name: the one that sourced this file, as run from the repository root.
_sluice_caller() {
    case $0 in
        *.sh) echo "scripts/$(basename "$0")" ;;
        *) echo "this command" ;;
    esac
}

# ensure_system_packages <profile>...: installs the profiles' missing packages with apt-get, or
# prints why it cannot and the command to run, and returns 1. Silent with no profiles.
ensure_system_packages() {
    local -a missing=() purposes=() short_profiles=()
    local -A seen=()
    local profile package list short
    for profile in "$@"; do
        if ! list=$(_sluice_profile_packages "$profile"); then
            echo "scripts/system-packages.sh: there is no profile '$profile'; use one of broker, build, fuzz, netns, lazyfs, venv, test." >&2
            return 2
        fi
        short=0
        for package in $list; do
            if [ -z "${seen[$package]:-}" ]; then
                seen[$package]=present
                _sluice_package_present "$package" || { seen[$package]=missing; missing+=("$package"); }
            fi
            [ "${seen[$package]}" = missing ] && short=1
        done
        if [ "$short" = 1 ]; then
            purposes+=("$(_sluice_profile_purpose "$profile")")
            short_profiles+=("$profile")
        fi
    done
    [ $# -gt 0 ] || return 0
    if [ ${#missing[@]} -eq 0 ]; then
        echo "all system packages present ($*)"
        return 0
    fi

    local who need rerun apt_cmd
    who=$(_sluice_caller)
    need="$who needs the system packages ${missing[*]} ${purposes[0]}"
    if [ ${#purposes[@]} -gt 1 ]; then need+=$(printf ' and %s' "${purposes[@]:1}"); fi
    rerun="bash scripts/system-packages.sh ${short_profiles[*]}"
    apt_cmd="apt-get install -y ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then apt_cmd="sudo $apt_cmd"; fi

    if [ "${SLUICE_SKIP_APT:-0}" = 1 ]; then
        echo "$need, but SLUICE_SKIP_APT=1 says not to install them: install them with: $apt_cmd (or run: $rerun without SLUICE_SKIP_APT=1)." >&2
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$need, and this machine has no apt-get: install them (or your distribution's packages holding the same commands and headers) with its package manager, then run $who again." >&2
        return 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "$need, and cannot install them without root (this is not root and sudo is not installed): as root, run: apt-get install -y ${missing[*]} (or, as root: $rerun)." >&2
            return 1
        fi
        sudo="sudo"
    fi
    echo "installing: ${missing[*]} (${short_profiles[*]})"
    # One update per run: a script asking twice (say for the build, then for its venv) must not
    # fetch the package lists twice. A failed update still tries the install with the lists there are.
    if [ "${_SLUICE_APT_UPDATED:-0}" != 1 ]; then
        $sudo apt-get update -qq || echo "apt-get update failed; trying the install with the package lists already here" >&2
        _SLUICE_APT_UPDATED=1
    fi
    # `env` sets DEBIAN_FRONTEND past sudo, whose env_reset would drop a plain assignment.
    if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
        echo "$who could not install the system packages ${missing[*]} (apt-get failed; its output is above): fix that, then run: $rerun" >&2
        return 1
    fi
}

# wants_help "$@": whether the arguments ask for the usage text (-h or --help anywhere), which a
# script prints before it installs or builds anything.
wants_help() {
    local arg
    for arg in "$@"; do
        case $arg in -h | --help) return 0 ;; esac
    done
    return 1
}

# print_script_usage: the running script's opening comment block (after the #! line) without
# its comment markers; that block is each script's usage text. Call it after the script's `cd`
# to the repository root.
print_script_usage() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "scripts/$(basename "$0")"
}

# prepare_python_bench "$@": what a benchmark run by a Python driver needs, and only that: the
# broker's release build (exported as $SLUICE_BIN) unless $SLUICE_BIN is given or the arguments
# say --against-kafka, Kafka's jars (scripts/java-lib.sh) when `java` is the first argument or
# it is Kafka's run, and the venv unless $PYTHON (default .venv/bin/python, exported) is already
# there. The arguments after the first are the benchmark's own.
prepare_python_bench() {
    local needs_java=$1 arg against_kafka=0 target_dir
    shift
    for arg in "$@"; do
        if [ "$arg" = --against-kafka ]; then against_kafka=1; fi
    done
    export PYTHON=${PYTHON:-.venv/bin/python}
    local profiles=()
    if [ -z "${SLUICE_BIN:-}" ] && [ "$against_kafka" = 0 ]; then profiles+=(broker); fi
    if [ ! -x "$PYTHON" ]; then profiles+=(venv); fi
    ensure_system_packages ${profiles[@]+"${profiles[@]}"} || return 1
    if [ "$needs_java" = java ] || [ "$against_kafka" = 1 ]; then bash scripts/java-lib.sh; fi
    if [ -z "${SLUICE_BIN:-}" ] && [ "$against_kafka" = 0 ]; then
        target_dir=$(cargo metadata --no-deps --format-version 1 2>/dev/null \
            | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
            || target_dir=${CARGO_TARGET_DIR:-$(pwd)/target}
        cargo build --release -p sluice-broker || return 1
        export SLUICE_BIN="$target_dir/release/sluice"
    fi
    if [ ! -x "$PYTHON" ]; then
        bash scripts/python-venv.sh || return 1
    fi
}

# Run directly (not sourced): install the profiles given, default everything.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    cd "$(dirname "$0")/.." || exit 1
    if wants_help "$@"; then
        print_script_usage
        exit 0
    fi
    if [ $# -eq 0 ]; then set -- test; fi
    ensure_system_packages "$@"
    exit $?
fi
