"""The `sluice` client commands against Apache Kafka 4.4 and against Sluice, side by side: the
same commands on a Kafka node (scripts/kafka-as-sluice.py, the jars in .java-lib) and on a
sluice node must print the same results (topics and their settings, offsets, records, group lag)
and refuse the same bad settings with the same Kafka 4 messages."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from sluice_node import SluiceNode, sluice_binary

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "scripts" / "kafka-as-sluice.py"
JAVA_LIB = Path(os.environ.get("SLUICE_JAVA_LIB", ROOT / ".java-lib"))


def run(node: SluiceNode, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """One `sluice` client command against `node`."""
    return subprocess.run([str(sluice_binary()), *args, "--bootstrap", node.bootstrap, "--timeout-ms", "20000"],
                          input=stdin, capture_output=True, text=True, timeout=120)


def ok(node: SluiceNode, *args: str, stdin: str = "") -> str:
    done = run(node, *args, stdin=stdin)
    assert done.returncode == 0, f"{args} against {node.binary.name}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def kafka_and_sluice(request):
    """A single Apache Kafka node and a single sluice node, one partition per topic by default."""
    if not any(JAVA_LIB.glob("kafka_2.13-*.jar")):
        pytest.fail(f"no Kafka broker jar in {JAVA_LIB}: scripts/java-lib.sh fetches it")
    kafka = SluiceNode({"num.partitions": "1"}, ready_timeout=120)
    kafka.binary = KAFKA
    sluice = SluiceNode({"num.partitions": "1"})
    started = []
    try:
        for node in (kafka, sluice):
            node.start()
            started.append(node)
        yield kafka, sluice
    finally:
        for node in started:
            if request.session.testsfailed:
                print(f"--- {node.binary.name} log ---\n{node.log_tail(60)}")
            node.kill()


def both(pair, *args: str, stdin: str = "") -> tuple[str, str]:
    kafka, sluice = pair
    return ok(kafka, *args, stdin=stdin), ok(sluice, *args, stdin=stdin)


def test_topics_records_and_groups_read_the_same_from_kafka_and_sluice(kafka_and_sluice):
    both(kafka_and_sluice, "topic", "create", "orders", "-p", "3", "-r", "1", "-c", "retention.ms=3600000",
         "-c", "cleanup.policy=compact,delete")
    kafka_topic, sluice_topic = (json.loads(out) for out in both(kafka_and_sluice, "topic", "describe", "orders",
                                                                  "--format", "json"))
    for topic in (kafka_topic, sluice_topic):
        assert len(topic["partitions"]) == 3, topic
    assert kafka_topic["configs"] == sluice_topic["configs"], (kafka_topic["configs"], sluice_topic["configs"])

    lines = "".join(f"key-{i % 5}:value-{i}\n" for i in range(50))
    kafka_acks, sluice_acks = both(kafka_and_sluice, "produce", "orders", "-K", ":", "-v", "--format", "json",
                                   stdin=lines)
    # The same keys land on the same partitions at the same offsets (Kafka's murmur2 partitioner).
    assert [json.loads(l) for l in kafka_acks.splitlines()] == [json.loads(l) for l in sluice_acks.splitlines()]

    kafka_read, sluice_read = both(kafka_and_sluice, "consume", "orders", "-o", "beginning", "-e",
                                   "-G", "orders-readers", "--format", "%p %o %k=%s\n")
    assert sorted(kafka_read.splitlines()) == sorted(sluice_read.splitlines())
    assert len(sluice_read.splitlines()) == 50

    kafka_group, sluice_group = (json.loads(out) for out in both(kafka_and_sluice, "group", "describe",
                                                                  "orders-readers", "--format", "json"))

    def lag(group: dict) -> list:
        return sorted((p["topic"], p["partition"], p["current_offset"], p["log_end_offset"], p["lag"])
                      for p in group["offsets"])

    assert lag(kafka_group) == lag(sluice_group), (kafka_group, sluice_group)
    assert all(row[-1] == 0 for row in lag(sluice_group))


@pytest.mark.parametrize("args, message", [
    (["topic", "create", "tiny-segments", "-r", "1", "-c", "segment.bytes=200"],
     "Invalid value 200 for configuration segment.bytes: Value must be at least 1048576"),
    (["topic", "create", "bad-roll", "-r", "1", "-c", "segment.ms=0"],
     "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
    (["topic", "create", "bad-key", "-r", "1", "-c", "no.such.setting=1"],
     "Unknown topic config name: no.such.setting"),
])
def test_bad_settings_are_refused_with_the_same_kafka_4_message(kafka_and_sluice, args, message):
    for node in kafka_and_sluice:
        done = run(node, *args)
        assert done.returncode != 0 and message in done.stderr, (node.binary.name, done.stdout, done.stderr)


def test_dynamic_broker_settings_kafka_changes_at_runtime_sluice_takes_too(kafka_and_sluice):
    want = {"log.cleaner.backoff.ms": "100", "max.connections": "500"}
    for node in kafka_and_sluice:
        ok(node, "cluster", "config", "set", *(f"{k}={v}" for k, v in want.items()))
        # A broker applies a change once it reads it from the metadata log (Kafka a little later).
        deadline = time.monotonic() + 30
        while True:
            got = json.loads(ok(node, "cluster", "config", "get", *want, "--format", "json"))
            values = {row["name"]: row["value"] for row in got["configs"]}
            if values == want:
                break
            assert time.monotonic() < deadline, (node.binary.name, got)
            time.sleep(0.2)
        ok(node, "cluster", "config", "set", "--delete", "log.cleaner.backoff.ms", "--delete", "max.connections")
