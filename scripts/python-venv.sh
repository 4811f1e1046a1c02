#!/usr/bin/env bash
# Creates .venv (if it has no working pip) and installs the pinned Python client libraries and
# test runner of integration-tests/python/requirements.txt into it. Idempotent: a second run only
# checks the pins. Used by scripts/test.sh and by the Python adapters of the compatibility matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    python3 -m venv --clear .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r integration-tests/python/requirements.txt
