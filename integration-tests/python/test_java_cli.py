"""Apache Kafka's own Java client and CLI tools (kafka-tools 4.1 from Maven Central) against a
real sluice broker, with their default settings: the console producer is idempotent by default."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

JAVA_LIB = Path(os.environ.get("SLUICE_JAVA_LIB", Path(__file__).resolve().parents[2] / ".java-lib"))


def kafka_tool(main_class: str, *args: str, stdin: str | None = None, timeout: float = 90) -> str:
    """Runs one Kafka CLI tool class; fails the test with its output if it exits non-zero."""
    jars = sorted(JAVA_LIB.glob("*.jar"))
    assert jars, f"no Kafka jars in {JAVA_LIB}; scripts/test.sh fetches them with Maven"
    cmd = ["java", "-cp", os.pathsep.join(str(j) for j in jars), main_class, *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{main_class} {args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_console_producer_with_default_idempotence_and_console_consumer_round_trip(start_node):
    node = start_node()
    lines = [f"java-{i}" for i in range(1000)]
    kafka_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", node.bootstrap,
               "--topic", "java-console", stdin="\n".join(lines) + "\n")
    out = kafka_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", node.bootstrap,
                     "--topic", "java-console", "--partition", "0", "--offset", "earliest",
                     "--max-messages", "1000", "--timeout-ms", "20000")
    assert out.splitlines() == lines


def test_kafka_topics_and_kafka_configs_create_describe_and_alter(start_node):
    node = start_node()
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--create",
               "--topic", "java-admin", "--partitions", "3", "--config", "retention.ms=3600000")
    described = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap,
                           "--describe", "--topic", "java-admin")
    assert "PartitionCount: 3" in described
    assert described.count("Leader: 1") == 3
    kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", node.bootstrap, "--alter",
               "--entity-type", "topics", "--entity-name", "java-admin", "--add-config", "retention.ms=7200000")
    configs = kafka_tool("kafka.admin.ConfigCommand", "--bootstrap-server", node.bootstrap,
                         "--describe", "--entity-type", "topics", "--entity-name", "java-admin")
    assert "retention.ms=7200000" in configs
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--delete",
               "--topic", "java-admin")
    listed = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--list")
    assert "java-admin" not in listed.split()


def test_kafka_metadata_quorum_describe_status(start_node):
    node = start_node()
    status = kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server", node.bootstrap,
                        "describe", "--status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["LeaderId"].strip() == "1"
    assert int(fields["HighWatermark"].strip()) > 0
