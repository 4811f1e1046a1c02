"""Apache Kafka's own Java client and CLI tools (kafka-tools 4.4 from Maven Central) against real
sluice brokers, with their default settings: the console producer is idempotent by default, and
the producer keeps going through a leader failover on a 3-node cluster."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

JAVA_LIB = Path(os.environ.get("SLUICE_JAVA_LIB", Path(__file__).resolve().parents[2] / ".java-lib"))


def kafka_tool(main_class: str, *args: str, stdin: str | None = None, timeout: float = 90,
               exit_code: int = 0) -> str:
    """Runs one Kafka CLI tool class and returns its stdout; fails the test with its output if it
    exits with another code than `exit_code`."""
    jars = sorted(JAVA_LIB.glob("*.jar"))
    assert jars, f"no Kafka jars in {JAVA_LIB}; scripts/test.sh fetches them with Maven"
    cmd = ["java", "-cp", os.pathsep.join(str(j) for j in jars), main_class, *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == exit_code, f"{main_class} {args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
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
    kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", node.bootstrap, "--alter",
               "--entity-type", "topics", "--entity-name", "java-admin", "--add-config", "retention.ms=7200000")
    configs = kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", node.bootstrap,
                         "--describe", "--entity-type", "topics", "--entity-name", "java-admin")
    assert "retention.ms=7200000" in configs
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--delete",
               "--topic", "java-admin")
    listed = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--list")
    assert "java-admin" not in listed.split()


def test_kafka_configs_dynamic_broker_configs_are_topic_defaults_per_broker_and_cluster_wide(cluster):
    nodes = cluster()
    bootstrap = ",".join(n.bootstrap for n in nodes)
    configs = "org.apache.kafka.tools.ConfigCommand"

    def describe(*entity: str) -> str:
        return kafka_tool(configs, "--bootstrap-server", bootstrap, "--describe", *entity)

    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
               "--topic", "java-dynamic", "--partitions", "1")
    kafka_tool(configs, "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
               "--entity-default", "--add-config", "log.retention.ms=3600000")
    kafka_tool(configs, "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
               "--entity-name", "2", "--add-config", "log.retention.ms=1800000")
    assert "log.retention.ms=3600000" in describe("--entity-type", "brokers", "--entity-default")
    # Each broker reports the value that applies to it, with where it came from.
    broker_2 = describe("--entity-type", "brokers", "--entity-name", "2")
    assert "log.retention.ms=1800000" in broker_2, broker_2
    broker_3 = describe("--entity-type", "brokers", "--entity-name", "3", "--all")
    assert "log.retention.ms=3600000" in broker_3 and "DYNAMIC_DEFAULT_BROKER_CONFIG" in broker_3, broker_3
    topic = describe("--entity-type", "topics", "--entity-name", "java-dynamic", "--all")
    assert "retention.ms=3600000" in topic or "retention.ms=1800000" in topic, topic

    refused = subprocess.run(
        ["java", "-cp", os.pathsep.join(str(j) for j in sorted(JAVA_LIB.glob("*.jar"))), configs,
         "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", "1",
         "--add-config", "num.io.threads=2"], capture_output=True, text=True, timeout=90)
    assert refused.returncode != 0 and "not a dynamic broker config" in refused.stdout + refused.stderr, refused

    kafka_tool(configs, "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
               "--entity-default", "--delete-config", "log.retention.ms")
    assert "log.retention.ms" not in describe("--entity-type", "brokers", "--entity-default")
    broker_3 = describe("--entity-type", "brokers", "--entity-name", "3", "--all")
    assert "log.retention.ms=604800000" in broker_3, broker_3


def test_kafka_features_describe_upgrade_downgrade_and_disable_transaction_version(cluster):
    """UpdateFeatures through `kafka-features`: levels finalized in the quorum, seen by every
    broker's ApiVersions with a newer epoch; out-of-range levels, metadata.version and an
    upgrade that would lower the level are refused, and nothing changes."""
    nodes = cluster()
    bootstrap = ",".join(n.bootstrap for n in nodes)
    features = "org.apache.kafka.tools.FeatureCommand"

    def described(node) -> tuple[int, int]:
        """(finalized level, epoch) of transaction.version as `node` answers ApiVersions."""
        out = kafka_tool(features, "--bootstrap-server", node.bootstrap, "describe")
        line = next(l for l in out.splitlines() if l.startswith("Feature: transaction.version"))
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        assert fields["SupportedMinVersion"] == "0" and fields["SupportedMaxVersion"] == "2", line
        return int(fields["FinalizedVersionLevel"]), int(fields["Epoch"])

    def levels_everywhere(level: int, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while True:
            seen = [described(n) for n in nodes]
            if all(lvl == level for lvl, _ in seen):
                return max(epoch for _, epoch in seen)
            assert time.monotonic() < deadline, f"brokers report {seen}, not level {level}"
            time.sleep(0.2)

    start_epoch = levels_everywhere(2)  # the nodes' transaction.version setting
    out = kafka_tool(features, "--bootstrap-server", bootstrap, "downgrade", "--feature", "transaction.version=1")
    assert "downgraded to 1" in out, out
    downgraded_epoch = levels_everywhere(1)
    assert downgraded_epoch > start_epoch

    def refused(args: list[str], says: str) -> None:
        jars = os.pathsep.join(str(j) for j in sorted(JAVA_LIB.glob("*.jar")))
        done = subprocess.run(["java", "-cp", jars, features, "--bootstrap-server", bootstrap, *args],
                              capture_output=True, text=True, timeout=90)
        assert done.returncode != 0 and says in done.stdout + done.stderr, (args, done)

    refused(["upgrade", "--feature", "transaction.version=3"], "Sluice supports levels 0 to 2")
    refused(["upgrade", "--metadata", "4.0"], "versioned by the sluice build")
    refused(["upgrade", "--feature", "streams.version=1"], "does not support the feature streams.version")
    assert levels_everywhere(1) == downgraded_epoch, "a refused update changed the features"

    kafka_tool(features, "--bootstrap-server", bootstrap, "disable", "--feature", "transaction.version")
    levels_everywhere(0)
    kafka_tool(features, "--bootstrap-server", bootstrap, "upgrade", "--feature", "transaction.version=2")
    upgraded_epoch = levels_everywhere(2)
    # Lowering the level needs the downgrade command; the broker refuses it as an upgrade.
    refused(["upgrade", "--feature", "transaction.version=1"], "Can not downgrade transaction.version")
    assert levels_everywhere(2) == upgraded_epoch


def test_kafka_metadata_quorum_describe_status(start_node):
    node = start_node()
    status = kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server", node.bootstrap,
                        "describe", "--status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["LeaderId"].strip() == "1"
    assert int(fields["HighWatermark"].strip()) > 0


def test_java_producer_with_defaults_carries_on_through_a_leader_failover_losing_nothing(cluster):
    """Kafka's producer-perf-test (Java client defaults: acks=all, idempotence) against a 3-node
    cluster with replication factor 3, while the leader of partition 0 is SIGKILLed: every
    record is sent, and the cluster holds each exactly once."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    nodes = cluster({"broker.session.timeout.ms": "3000"})
    bootstrap = ",".join(n.bootstrap for n in nodes)
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
               "--topic", "java-failover", "--partitions", "3")
    described = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap,
                           "--describe", "--topic", "java-failover")
    assert "ReplicationFactor: 3" in described, described

    total = 40_000
    jars = sorted(JAVA_LIB.glob("*.jar"))
    perf = subprocess.Popen(
        ["java", "-cp", os.pathsep.join(str(j) for j in jars), "org.apache.kafka.tools.ProducerPerformance",
         "--topic", "java-failover", "--num-records", str(total), "--throughput", "5000", "--record-size", "512",
         "--bootstrap-server", bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Once records flow (the high watermark of partition 0 moves), kill that partition's leader.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "java-failover-probe"})
    deadline = time.monotonic() + 60
    while probe.get_watermark_offsets(TopicPartition("java-failover", 0), timeout=5)[1] < 1000:
        assert time.monotonic() < deadline and perf.poll() is None, "the Java producer made no progress"
        time.sleep(0.1)
    leader = admin.list_topics("java-failover", timeout=10).topics["java-failover"].partitions[0].leader
    nodes[leader - 1].kill()
    out, _ = perf.communicate(timeout=120)
    assert perf.returncode == 0, out
    summary = [line for line in out.splitlines() if f"{total} records sent" in line]
    assert summary, f"the producer did not report all {total} records sent:\n{out}"
    assert "Exception" not in out and "ERROR" not in out, out

    survivors = [n for n in nodes if n.is_running()]
    probe.close()
    probe = Consumer({"bootstrap.servers": ",".join(n.bootstrap for n in survivors),
                      "group.id": "java-failover-check"})
    stored = sum(probe.get_watermark_offsets(TopicPartition("java-failover", p), timeout=10)[1] for p in range(3))
    probe.close()
    assert stored == total, f"the cluster holds {stored} records of the {total} the Java producer sent"
