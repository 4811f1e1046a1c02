"""Kafka's own admin tools (kafka-tools 4.4 from Maven Central) for the APIs a new user tried
first and found missing: kafka-delete-records, kafka-log-dirs, and kafka-acls without an
authorizer (SECURITY_DISABLED, as Kafka answers, not a closed connection)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

from test_java_cli import JAVA_LIB, kafka_tool


def produce_lines(bootstrap: str, topic: str, count: int) -> None:
    lines = "".join(f"line-{i}\n" for i in range(count))
    kafka_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", topic,
               stdin=lines)


def earliest_offset(bootstrap: str, topic: str) -> int:
    out = kafka_tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", bootstrap,
                     "--topic", topic, "--time", "-2")
    # topic:partition:offset
    return int(out.strip().split(":")[-1])


def test_kafka_delete_records_moves_the_log_start(start_node):
    node = start_node()
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--create",
               "--topic", "trim-me", "--partitions", "1")
    produce_lines(node.bootstrap, "trim-me", 100)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"version": 1, "partitions": [{"topic": "trim-me", "partition": 0, "offset": 30}]}, f)
        offsets_file = f.name
    try:
        out = kafka_tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", node.bootstrap,
                         "--offset-json-file", offsets_file)
    finally:
        os.unlink(offsets_file)
    assert "partition: trim-me-0\tlow_watermark: 30" in out, out
    assert earliest_offset(node.bootstrap, "trim-me") == 30


def test_kafka_log_dirs_describes_the_data_dir_and_partition_sizes(start_node):
    node = start_node()
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", node.bootstrap, "--create",
               "--topic", "sized", "--partitions", "2")
    produce_lines(node.bootstrap, "sized", 50)
    out = kafka_tool("org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", node.bootstrap,
                     "--describe", "--topic-list", "sized")
    # The tool prints a header line, then one JSON document.
    doc = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    [broker] = doc["brokers"]
    assert broker["broker"] == 1
    [log_dir] = broker["logDirs"]
    assert log_dir["error"] is None
    assert os.path.samefile(log_dir["logDir"], node.data_dir)
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {"sized-0", "sized-1"}, sizes
    assert sum(sizes.values()) > 50 * len("line-00"), sizes


def test_kafka_acls_without_an_authorizer_reports_security_disabled(start_node):
    node = start_node()
    jars = sorted(JAVA_LIB.glob("*.jar"))
    done = subprocess.run(
        ["java", "-cp", os.pathsep.join(str(j) for j in jars), "org.apache.kafka.tools.AclCommand",
         "--bootstrap-server", node.bootstrap, "--list"],
        capture_output=True, text=True, timeout=90)
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"kafka-acls --list succeeded without an authorizer:\n{output}"
    assert "SecurityDisabledException" in output, output
