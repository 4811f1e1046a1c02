"""Client quotas through Kafka's own `kafka-configs` (org.apache.kafka.tools.ConfigCommand, Kafka 4.4)
against a single sluice node: alter, describe and delete quotas of client ids, the default
client id and user + client-id entities, kept across a restart; invalid values, and the quota
keys Sluice does not enforce (request_percentage, controller_mutation_rate), are refused with
the broker's message."""

from __future__ import annotations

import os
import subprocess

from test_java_cli import JAVA_LIB, kafka_tool

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"


def configs(node, *args: str) -> str:
    return kafka_tool(CONFIG_COMMAND, "--bootstrap-server", node.bootstrap, *args)


def describe_clients(node) -> list[str]:
    return [line for line in configs(node, "--describe", "--entity-type", "clients").splitlines()
            if line.startswith("Quota configs")]


def test_kafka_configs_alters_describes_and_deletes_client_quotas(start_node):
    node = start_node()
    out = configs(node, "--alter", "--entity-type", "clients", "--entity-name", "C",
                  "--add-config", "producer_byte_rate=1024")
    assert "Completed updating config for client C." in out
    configs(node, "--alter", "--entity-type", "clients", "--entity-default",
            "--add-config", "consumer_byte_rate=2048,producer_byte_rate=512")
    assert describe_clients(node) == [
        "Quota configs for client-id 'C' are producer_byte_rate=1024.0",
        "Quota configs for the default client-id are consumer_byte_rate=2048.0, producer_byte_rate=512.0",
    ]
    described = configs(node, "--describe", "--entity-type", "clients", "--entity-name", "C")
    assert "Quota configs for client-id 'C' are producer_byte_rate=1024.0" in described

    configs(node, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "C", "--add-config", "producer_byte_rate=4096")
    both = configs(node, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-name", "C")
    assert "Quota configs for user-principal 'alice', client-id 'C' are producer_byte_rate=4096.0" in both

    configs(node, "--alter", "--entity-type", "clients", "--entity-name", "C",
            "--delete-config", "producer_byte_rate")
    assert describe_clients(node) == [
        "Quota configs for the default client-id are consumer_byte_rate=2048.0, producer_byte_rate=512.0",
    ]


def test_kafka_configs_describes_user_quotas_of_the_anonymous_and_default_user(start_node):
    node = start_node()
    configs(node, "--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=4096")
    configs(node, "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", "consumer_byte_rate=1000")
    users = [line for line in configs(node, "--describe", "--entity-type", "users").splitlines()
             if line.startswith("Quota configs")]
    assert users == [
        "Quota configs for the default user-principal are producer_byte_rate=4096.0",
        "Quota configs for user-principal 'ANONYMOUS' are consumer_byte_rate=1000.0",
    ]


def test_client_quotas_survive_a_restart(start_node):
    node = start_node()
    configs(node, "--alter", "--entity-type", "clients", "--entity-name", "kept",
            "--add-config", "consumer_byte_rate=100000")
    node.terminate()
    node.spawn()
    node.wait_ready()
    assert describe_clients(node) == ["Quota configs for client-id 'kept' are consumer_byte_rate=100000.0"]


def refused_alter(node, config: str) -> str:
    """Runs kafka-configs adding `config` to client C, which must fail; its output."""
    jars = sorted(JAVA_LIB.glob("*.jar"))
    done = subprocess.run(
        ["java", "-cp", os.pathsep.join(str(j) for j in jars), CONFIG_COMMAND, "--bootstrap-server",
         node.bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "C",
         "--add-config", config],
        capture_output=True, text=True, timeout=90)
    assert done.returncode != 0, done.stdout
    return done.stderr + done.stdout


def test_a_negative_quota_is_refused_with_the_brokers_reason(start_node):
    node = start_node()
    out = refused_alter(node, "producer_byte_rate=-5")
    assert "InvalidRequestException" in out
    assert "producer_byte_rate must be a finite, non-negative number" in out
    assert describe_clients(node) == []


def test_quotas_sluice_does_not_enforce_are_refused_not_stored(start_node):
    node = start_node()
    for key in ("request_percentage", "controller_mutation_rate"):
        out = refused_alter(node, f"{key}=50")
        assert "InvalidRequestException" in out
        assert f"Sluice does not enforce {key}" in out, out[-2000:]
    assert describe_clients(node) == []
