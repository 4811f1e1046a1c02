#!/usr/bin/env bash
# A local 3-node Sluice cluster on one machine: every node is a broker and a metadata-quorum
# voter. Clients bootstrap from 127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292.
#
#   scripts/cluster.sh start     build (release) and start nodes 1-3 in the background
#   scripts/cluster.sh status    which nodes run, and the cluster as node 1 sees it (needs kcat)
#   scripts/cluster.sh stop      SIGTERM every node (controlled shutdown) and wait
#   scripts/cluster.sh kill N    SIGKILL node N (to try failover); `start` brings it back
#   scripts/cluster.sh --help    this text
#
# Data and logs live in ${SLUICE_CLUSTER_DIR:-./cluster-data}/node-N/. The nodes authenticate
# each other with the secret in $DIR/cluster-secret, made on the first start (keep it private).
set -euo pipefail
cd "$(dirname "$0")/.."
# The install step shared by the scripts (issue 30), for `start`'s build.
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
DIR=${SLUICE_CLUSTER_DIR:-$(pwd)/cluster-data}
VOTERS="1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293"

pid_of() { cat "$DIR/node-$1/sluice.pid" 2>/dev/null || true; }
running() { local pid; pid=$(pid_of "$1"); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

start() {
    ensure_system_packages broker || exit 1
    cargo build --release -p sluice-broker --bin sluice
    local bin secret="$DIR/cluster-secret"
    if [ ! -s "$secret" ]; then
        mkdir -p "$DIR"
        (umask 077 && head -c 32 /dev/urandom | base64 >"$secret")
        echo "created cluster secret $secret"
    fi
    bin="$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/sluice"
    for n in 1 2 3; do
        if running "$n"; then echo "node $n already running (pid $(pid_of "$n"))"; continue; fi
        mkdir -p "$DIR/node-$n"
        local port=$((9092 + (n - 1) * 100))
        "$bin" --node-id "$n" --data-dir "$DIR/node-$n/data" \
            --listen "127.0.0.1:$port" --controller-listen "127.0.0.1:$((port + 1))" --voters "$VOTERS" \
            --cluster-secret-file "$secret" >>"$DIR/node-$n/sluice.log" 2>&1 &
        echo $! >"$DIR/node-$n/sluice.pid"
        echo "node $n: pid $!, kafka 127.0.0.1:$port, controller 127.0.0.1:$((port + 1)), log $DIR/node-$n/sluice.log"
    done
}

stop() {
    for n in 1 2 3; do
        running "$n" && kill -TERM "$(pid_of "$n")"
    done
    for n in 1 2 3; do
        for _ in $(seq 1 100); do running "$n" || break; sleep 0.1; done
        if running "$n"; then echo "node $n did not stop within 10 s; killing it"; kill -KILL "$(pid_of "$n")"; fi
        rm -f "$DIR/node-$n/sluice.pid"
    done
    echo "stopped"
}

status() {
    for n in 1 2 3; do
        if running "$n"; then echo "node $n: running (pid $(pid_of "$n"))"; else echo "node $n: stopped"; fi
    done
    command -v kcat >/dev/null && kcat -b 127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292 -L -m 5 || true
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    -h | --help) print_script_usage ;;
    kill) running "${2:?node number}" && kill -KILL "$(pid_of "$2")" && echo "node $2 killed" ;;
    *) echo "usage: $0 start|status|stop|kill N" >&2; exit 2 ;;
esac
