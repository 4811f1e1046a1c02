#!/usr/bin/env bash
# Debian's kcat (1.7.1 with librdkafka 2.0.2 on bookworm), from apt when missing; prints its version.
set -euo pipefail
if ! command -v kcat >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends kcat
fi
kcat -V | grep -i version
