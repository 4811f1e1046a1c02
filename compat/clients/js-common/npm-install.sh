#!/usr/bin/env bash
# Installs an adapter's npm dependencies exactly as its package-lock.json pins them (`npm ci`),
# into a cache outside the repository keyed by the adapter, the Node version and the lock file's
# hash ($SLUICE_COMPAT_CACHE, default ~/.cache/sluice-compat/npm/), and links
# ADAPTER_DIR/node_modules to it. Every checkout on one machine (CI runs, worktrees) then shares
# one install: confluent-kafka-javascript's is a source build of librdkafka, minutes on two cores.
# A fresh machine installs once; an install cut short leaves no stamp and is redone; two runs at
# once install once (flock).
# Usage: npm-install.sh ADAPTER_DIR   (extra environment, e.g. CKJS_LINKING, passes through; it
# is fixed per adapter in compat/clients*.json, so it is not part of the key)
set -euo pipefail
cd "$1"
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
cache_root=${SLUICE_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-compat}
install_dir=$cache_root/npm/$(basename "$PWD")-node$(node --version)-${lock_hash:0:16}
stamp=$install_dir/node_modules/.compat-install-stamp
mkdir -p "$cache_root/npm"
exec 9>"$install_dir.lock"
flock 9
if [[ -f $stamp && $(cat "$stamp") == "$lock_hash" ]]; then
    echo "$1: reusing $install_dir (matches package-lock.json)"
else
    rm -rf "$install_dir"
    mkdir -p "$install_dir"
    cp package.json package-lock.json "$install_dir/"
    (cd "$install_dir" && npm ci --no-audit --no-fund)
    echo "$lock_hash" > "$stamp"
fi
# Native modules find their libraries through $ORIGIN, so the linked tree loads from anywhere.
if [[ $(readlink node_modules 2>/dev/null) != "$install_dir/node_modules" ]]; then
    rm -rf node_modules
    ln -s "$install_dir/node_modules" node_modules
fi
