"""`kafka-reassign-partitions` (ReassignPartitionsCommand from kafka-tools 4.4) on a 3-node
cluster: --generate proposes a plan, --execute with --throttle starts the moves (setting the
replication throttles), --verify waits for them to complete and clears the throttles, and every
record is still there, read from the partitions' new homes."""

from __future__ import annotations

import json
import os
import tempfile

from test_java_admin_tools import SETTINGS, partitions, wait_for
from test_java_cli import kafka_tool
from test_java_records_and_log_dirs import produce_lines

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"


def json_file(doc: dict) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
        return f.name


def test_kafka_reassign_partitions_generate_execute_verify(cluster):
    nodes = cluster(SETTINGS)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "java-move",
               "--replica-assignment", "1,2")
    wait_for("leaders", lambda: partitions(bootstrap, "java-move"),
             lambda now: len(now) == 2 and all(leader >= 0 for leader, _, _ in now.values()))
    produce_lines(bootstrap, "java-move", 300)

    topics_file = json_file({"version": 1, "topics": [{"topic": "java-move"}]})
    plan_file = json_file({"version": 1, "partitions": [
        {"topic": "java-move", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "java-move", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]},
    ]})
    try:
        out = kafka_tool(REASSIGN, "--bootstrap-server", bootstrap, "--generate",
                         "--topics-to-move-json-file", topics_file, "--broker-list", "1,2,3")
        assert "Current partition replica assignment" in out, out
        assert "Proposed partition reassignment configuration" in out, out

        out = kafka_tool(REASSIGN, "--bootstrap-server", bootstrap, "--execute",
                         "--reassignment-json-file", plan_file, "--throttle", "50000000")
        assert "Successfully started partition reassignments for java-move-0,java-move-1" in out, out
        # The throttle is a dynamic broker config while the moves run.
        described = kafka_tool(CONFIGS, "--bootstrap-server", bootstrap, "--describe",
                               "--entity-type", "brokers", "--entity-name", "2")
        assert "follower.replication.throttled.rate=50000000" in described, described

        def verify() -> str:
            return kafka_tool(REASSIGN, "--bootstrap-server", bootstrap, "--verify",
                              "--reassignment-json-file", plan_file)

        done = wait_for("both moves complete", verify,
                        lambda out: "java-move-0 is completed" in out and "java-move-1 is completed" in out,
                        timeout=60)
        assert "Clearing broker-level throttles" in done, done
    finally:
        os.unlink(topics_file)
        os.unlink(plan_file)

    now = wait_for("the new replica sets, in sync", lambda: partitions(bootstrap, "java-move"),
                   lambda now: now.get(0, (0, [], []))[1:] == ([2, 3], [2, 3])
                   and now.get(1, (0, [], []))[1:] == ([3, 1], [1, 3]))
    assert now[0][0] in (2, 3) and now[1][0] in (1, 3), now
    described = kafka_tool(CONFIGS, "--bootstrap-server", bootstrap, "--describe",
                           "--entity-type", "brokers", "--entity-name", "2")
    assert "throttled.rate" not in described, described
    out = kafka_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
                     "--topic", "java-move", "--from-beginning", "--max-messages", "300", "--timeout-ms", "30000")
    assert sorted(out.splitlines()) == sorted(f"line-{i}" for i in range(300))
