"""Group configs (KIP-848/KIP-932, config resource type GROUP) through Apache Kafka's own
`kafka-configs` (ConfigCommand, kafka-tools 4.4): set for a group id that has no group yet,
described as DYNAMIC_GROUP_CONFIG, a value Kafka would refuse refused with a readable error,
and removed again."""

from __future__ import annotations

import os
import subprocess

from test_java_cli import JAVA_LIB, kafka_tool

CONFIGS = "org.apache.kafka.tools.ConfigCommand"


def test_kafka_configs_sets_describes_refuses_and_deletes_a_group_config(start_node):
    node = start_node()
    group = ["--entity-type", "groups", "--entity-name", "g1"]

    def describe(*extra: str) -> str:
        return kafka_tool(CONFIGS, "--bootstrap-server", node.bootstrap, "--describe", *group, *extra)

    assert "share.auto.offset.reset" not in describe(), "nothing is set before the first --alter"

    kafka_tool(CONFIGS, "--bootstrap-server", node.bootstrap, "--alter", *group,
               "--add-config", "share.auto.offset.reset=earliest")
    described = describe()
    assert "Dynamic configs for group g1 are:" in described, described
    assert "share.auto.offset.reset=earliest" in described, described
    assert "DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest" in described, described
    every = describe("--all")
    assert "consumer.session.timeout.ms=45000" in every and "share.isolation.level=read_uncommitted" in every, every

    jars = os.pathsep.join(str(j) for j in sorted(JAVA_LIB.glob("*.jar")))
    refused = subprocess.run(
        ["java", "-cp", jars, CONFIGS, "--bootstrap-server", node.bootstrap, "--alter", *group,
         "--add-config", "share.auto.offset.reset=sometimes"],
        capture_output=True, text=True, timeout=90)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    assert "InvalidConfigurationException" in said and "share.auto.offset.reset" in said, said
    assert "use earliest, latest, or by_duration:" in said, said
    assert "share.auto.offset.reset=earliest" in describe(), "a refused change leaves the config as it was"

    kafka_tool(CONFIGS, "--bootstrap-server", node.bootstrap, "--alter", *group,
               "--delete-config", "share.auto.offset.reset")
    assert "share.auto.offset.reset" not in describe()
    assert "share.auto.offset.reset=latest" in describe("--all"), "back at Kafka's default"
