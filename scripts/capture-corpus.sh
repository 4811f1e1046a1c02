#!/usr/bin/env bash
# Rebuilds the fuzz seed corpora from real clients (docs/fuzzing.md): starts a single-node release
# sluice advertising a recording proxy (scripts/capture-frames.py), drives kcat, confluent-kafka,
# kafka-python and Apache Kafka's Java CLI tools through it, and adds the recorded request frames to
# fuzz/corpus/decode_request/ and the records of the recorded Produce requests to
# fuzz/corpus/validate_batch/. Identical frames collapse into one file. Existing seeds are kept;
# with --replace the two corpora are emptied first (fuzz/corpus/regressions/ is never touched).
#
#   scripts/capture-corpus.sh [--replace]
#
# Needs what scripts/test.sh installs: a release build of sluice ($SLUICE_BIN, default
# $CARGO_TARGET_DIR/release/sluice or target/release/sluice), kcat, .venv with
# integration-tests/python/requirements.txt, and .java-lib with the Kafka 4.4 jars.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REPLACE=0
case ${1:-} in
    --replace) REPLACE=1 ;;
    "") ;;
    *) echo "usage: scripts/capture-corpus.sh [--replace]" >&2; exit 2 ;;
esac
SLUICE_BIN=${SLUICE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice}
PYTHON=$ROOT/.venv/bin/python
for need in "$SLUICE_BIN" "$PYTHON" "$ROOT/.java-lib/.complete"; do
    [ -e "$need" ] || { echo "capture-corpus: missing $need (see scripts/test.sh)" >&2; exit 1; }
done
command -v kcat >/dev/null || { echo "capture-corpus: kcat not installed" >&2; exit 1; }

WORK=$(mktemp -d /tmp/sluice-capture.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
BROKER_PORT=$(free_port)
PROXY_PORT=$(free_port)
B=127.0.0.1:$PROXY_PORT
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

start_sluice() {
    "$SLUICE_BIN" --node-id 1 --data-dir "$WORK/data" --listen "127.0.0.1:$BROKER_PORT" --advertise "$B" \
        --set num.partitions=3 >>"$WORK/sluice.log" 2>&1 &
    SLUICE_PID=$!
    PIDS+=($SLUICE_PID)
}
start_sluice
python3 scripts/capture-frames.py proxy --listen "$B" --upstream "127.0.0.1:$BROKER_PORT" \
    --out "$WORK/frames" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    grep -q "serving clients" "$WORK/sluice.log" && grep -q "^proxy" "$WORK/proxy.log" && break
    sleep 0.2
done
echo "capture-corpus: sluice on $BROKER_PORT, proxy on $PROXY_PORT, scratch $WORK"

echo "== kcat (librdkafka $(kcat -V 2>&1 | grep -o 'librdkafka [0-9.]*' | cut -d' ' -f2))"
kcat -b "$B" -L >/dev/null
for codec in none gzip snappy lz4 zstd; do
    seq 1 50 | sed "s/.*/key-&:kcat-$codec-&/" | kcat -b "$B" -P -t "kcat-$codec" -z "$codec" -K:
done
seq 1 20 | kcat -b "$B" -P -t kcat-idempotent -X enable.idempotence=true -p 1
kcat -b "$B" -C -t kcat-gzip -o beginning -e -q >/dev/null
kcat -b "$B" -C -t kcat-zstd -p 0 -o -5 -e -q -f '%k %s %T %o\n' >/dev/null
kcat -b "$B" -L -t kcat-none >/dev/null
kcat -b "$B" -Q -t kcat-none:0:-1 >/dev/null
timeout 25 kcat -b "$B" -G kcat-group kcat-none kcat-lz4 -o beginning -e -q \
    -X enable.auto.commit=true -X auto.commit.interval.ms=500 >/dev/null || true

echo "== confluent-kafka"
"$PYTHON" scripts/capture-clients.py confluent "$B"
echo "== a broker restart under a consumer (OffsetForLeaderEpoch)"
"$PYTHON" scripts/capture-clients.py restart-consumer "$B" 30 2>/dev/null &
CONSUMER=$!
sleep 10
kill "$SLUICE_PID"
wait "$SLUICE_PID" || true
start_sluice
wait "$CONSUMER"
echo "== kafka-python"
"$PYTHON" scripts/capture-clients.py kafka-python "$B"

echo "== Kafka Java tools"
CP=$(ls "$ROOT"/.java-lib/*.jar | tr '\n' ':')
java_tool() { timeout 120 java -cp "$CP" "$@" 2>&1 | tail -n 1 || true; }
for codec in none gzip snappy lz4 zstd; do
    seq 1 30 | sed "s/^/java-$codec-/" | java_tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" \
        --topic "java-$codec" --command-property "compression.type=$codec"
done
seq 1 20 | sed 's/^/k:/' | java_tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" \
    --topic java-keyed --reader-property parse.key=true --reader-property key.separator=: \
    --command-property enable.idempotence=true --command-property acks=all
java_tool org.apache.kafka.tools.ProducerPerformance --topic java-perf --num-records 300 --throughput -1 \
    --record-size 50 --bootstrap-server "$B" --command-property compression.type=lz4 linger.ms=5
java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic java-gzip \
    --group java-group --from-beginning --max-messages 30 --timeout-ms 20000
java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic java-zstd \
    --partition 0 --offset earliest --max-messages 5 --timeout-ms 10000 --formatter-property print.key=true
topics() { java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" "$@"; }
topics --create --topic java-admin --partitions 3 --config retention.ms=3600000
topics --describe --topic java-admin
topics --alter --topic java-admin --partitions 4
configs() { java_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$B" "$@"; }
configs --alter --entity-type topics --entity-name java-admin --add-config retention.ms=7200000,cleanup.policy=compact
configs --alter --entity-type topics --entity-name java-admin --delete-config retention.ms
configs --describe --entity-type topics --entity-name java-admin
configs --describe --entity-type brokers --entity-name 1
groups() { java_tool org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$B" "$@"; }
groups --list
groups --describe --group java-group
groups --describe --group java-group --members --verbose
groups --describe --group java-group --state
groups --reset-offsets --group java-group --topic java-gzip --to-earliest --execute
groups --reset-offsets --group java-group --topic java-gzip:0 --shift-by 2 --execute
groups --delete-offsets --group java-group --topic java-gzip
groups --delete --group java-group
java_tool org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$B" describe --status
java_tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$B" --topic java-none
java_tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$B" --topic java-none --time -3
topics --delete --topic java-admin
topics --list

cleanup
trap - EXIT
python3 scripts/capture-frames.py extract-records "$WORK/frames" "$WORK/records"
if [ "$REPLACE" = 1 ]; then rm -rf fuzz/corpus/decode_request fuzz/corpus/validate_batch; fi
mkdir -p fuzz/corpus/decode_request fuzz/corpus/validate_batch
cp -n "$WORK"/frames/* fuzz/corpus/decode_request/
cp -n "$WORK"/records/* fuzz/corpus/validate_batch/
echo "capture-corpus: $(ls "$WORK/frames" | wc -l) frames, $(ls "$WORK/records" | wc -l) records blobs captured;" \
    "corpus now $(ls fuzz/corpus/decode_request | wc -l) + $(ls fuzz/corpus/validate_batch | wc -l) files"
echo "capture-corpus: frames per API and version:"
ls "$WORK/frames" | cut -d- -f1-3 | sort | uniq -c | awk '{printf "  %s x%s\n", $2, $1}' | column -c 120
rm -rf "$WORK"
