#!/usr/bin/env bash
# Share groups (KIP-932) on one node: --members KafkaShareConsumer processes (default 10) of one
# share group drain --records records (default 100,000 of 1 KB, each value its index) from a
# topic of --partitions partitions, on a release sluice node or, with --against-kafka, on Apache
# Kafka 4.4 (scripts/kafka-as-sluice.py). Prints the time and throughput, records per member,
# indices delivered twice or never, and with --crash-after N the records redelivered after one
# member is SIGKILLed; writes a JSON result (default bench-results/share-<UTC>.json). Asserts
# nothing about speed. Arguments go to integration-tests/python/share_bench.py, e.g.
#   scripts/share-bench.sh --partitions 1                       # 10 members share one partition
#   scripts/share-bench.sh --partitions 3 --crash-after 5000    # one member crashes, its records come back
#   scripts/share-bench.sh --partitions 3 --crash-after 5000 --against-kafka
# Measured runs on a shared machine: flock /work/bench.lock scripts/share-bench.sh ...
# The broker binary is $SLUICE_BIN if set, else target/release/sluice built here first; the
# members and the admin tools are Kafka 4.4's Java client (.java-lib, scripts/java-lib.sh).
# share_bench.py's own options: .venv/bin/python integration-tests/python/share_bench.py --help
set -euo pipefail
cd "$(dirname "$0")/.."
# The install step shared by the scripts (issue 30).
# shellcheck source=scripts/system-packages.sh
source scripts/system-packages.sh
if wants_help "$@"; then
    print_script_usage
    exit 0
fi
# Only what this run will do (the build, Kafka's jars, the venv): see prepare_python_bench.
prepare_python_bench java "$@" || exit 1
exec "$PYTHON" integration-tests/python/share_bench.py "$@"
