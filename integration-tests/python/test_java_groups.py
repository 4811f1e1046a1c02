"""Consumer groups with Apache Kafka's own Java tools (kafka-tools 4.4, see test_java_cli.py):
kafka-console-consumer in a group (default group.protocol=classic) resumes at its committed
offset, and kafka-consumer-groups lists, describes (offsets and lag, members, state), resets and
deletes groups."""

from __future__ import annotations

import os
import subprocess

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from group_clients import GROUP_SETTINGS, committed, consume_n, create_topic, produce, wait_until
from test_java_cli import JAVA_LIB, kafka_tool

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def lines(prefix: str, start: int, end: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(start, end)]


def test_console_consumer_in_a_group_resumes_at_its_committed_offset(start_node):
    node = start_node(GROUP_SETTINGS)
    topic = "java-group"
    create_topic(node.bootstrap, topic, 1)
    first = lines("j", 0, 100)
    produce(node.bootstrap, topic, first, partitions=1)

    def console_consumer(n: int) -> list[str]:
        out = kafka_tool(CONSOLE_CONSUMER, "--bootstrap-server", node.bootstrap, "--topic", topic,
                         "--group", "java-g", "--from-beginning", "--max-messages", str(n), "--timeout-ms", "30000")
        return out.splitlines()

    assert console_consumer(100) == [v.decode() for v in first]
    # Closing after --max-messages commits (enable.auto.commit defaults to true): a rerun of the
    # same group gets only what was produced since, --from-beginning notwithstanding.
    second = lines("j", 100, 150)
    produce(node.bootstrap, topic, second, partitions=1)
    assert console_consumer(50) == [v.decode() for v in second]
    third = lines("j", 150, 160)
    produce(node.bootstrap, topic, third, partitions=1)
    assert console_consumer(10) == [v.decode() for v in third]


def test_two_java_console_consumers_of_one_group_split_the_partitions(start_node):
    """Two Java consumers (classic protocol, Kafka's own client) in one group: each gets one of
    the two partitions, as confluent-kafka's admin DescribeConsumerGroups reports, and together
    they print every record once."""
    node = start_node(GROUP_SETTINGS)
    topic = "java-split"
    create_topic(node.bootstrap, topic, 2)
    jars = os.pathsep.join(str(j) for j in sorted(JAVA_LIB.glob("*.jar")))
    consumers = [subprocess.Popen(
        ["java", "-cp", jars, CONSOLE_CONSUMER, "--bootstrap-server", node.bootstrap, "--topic", topic,
         "--group", "java-split-g", "--from-beginning", "--timeout-ms", "8000",
         "--formatter-property", "print.partition=true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})

        def split():
            try:
                g = admin.describe_consumer_groups(["java-split-g"], request_timeout=10)["java-split-g"].result(timeout=15)
            except KafkaException as e:  # NOT_COORDINATOR while the coordinator loads; retried
                print(f"DescribeConsumerGroups: {e}")
                return None
            parts = [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in g.members]
            return parts if str(g.state).endswith("STABLE") and sorted(parts) == [[0], [1]] else None

        wait_until("both Java consumers to hold one partition each", split, timeout=60, interval=0.5)
        sent = produce(node.bootstrap, topic, lines("js", 0, 200), partitions=2)
        outs = [c.communicate(timeout=90) for c in consumers]
    finally:
        for c in consumers:
            if c.poll() is None:
                c.kill()
    for c, (out, err) in zip(consumers, outs):
        assert c.returncode == 0, err[-2000:]
    printed = [line.split("\t", 1) for out, _ in outs for line in out.splitlines()]
    got = sorted((int(p.removeprefix("Partition:")), v) for p, v in printed)
    assert got == sorted((p, v.decode()) for p, _, v in sent)
    per_consumer = [{line.split("\t", 1)[0] for line in out.splitlines()} for out, _ in outs]
    assert sorted(per_consumer, key=sorted) == [{"Partition:0"}, {"Partition:1"}], per_consumer


def groups_tool(node, *args: str) -> str:
    return kafka_tool(GROUPS_TOOL, "--bootstrap-server", node.bootstrap, *args)


def table(out: str, first: str = "GROUP") -> list[dict[str, str]]:
    """Rows of the tool's table (the first line starting with `first` is the header), as dicts."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in out.splitlines():
        fields = line.split()
        if not fields:
            continue
        if header is None:
            if fields[0] == first:
                header = fields
            continue
        assert len(fields) == len(header), f"row {line!r} does not match header {header}:\n{out}"
        rows.append(dict(zip(header, fields)))
    assert header is not None, f"no table in:\n{out}"
    return rows


def describe_offsets(node, group: str) -> dict[int, tuple[str, str, str, str]]:
    """--describe: per partition (CURRENT-OFFSET, LOG-END-OFFSET, LAG, CLIENT-ID)."""
    rows = table(groups_tool(node, "--describe", "--group", group))
    return {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CLIENT-ID"]) for r in rows}


def listed(node) -> set[str]:
    return set(groups_tool(node, "--list").split())


def test_kafka_consumer_groups_lists_describes_lag_and_members_resets_and_deletes(start_node):
    node = start_node(GROUP_SETTINGS)
    topic = "cg-topic"
    create_topic(node.bootstrap, topic, 2)
    produce(node.bootstrap, topic, lines("cg", 0, 200), partitions=2)

    # A second group that consumed everything and left.
    other = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "cg-other", "auto.offset.reset": "earliest",
                      "log_level": 3})
    other.subscribe([topic])
    consume_n(other, 200)
    other.commit(asynchronous=False)
    other.close()

    # The group under test: an active member that consumed everything but committed partition 0
    # fully and partition 1 only up to offset 40.
    member = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "cg-lag", "client.id": "cg-member",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3})
    member.subscribe([topic])
    try:
        consume_n(member, 200)
        member.commit(offsets=[TopicPartition(topic, 0, 100), TopicPartition(topic, 1, 40)], asynchronous=False)

        assert {"cg-lag", "cg-other"} <= listed(node)
        members = table(groups_tool(node, "--describe", "--group", "cg-lag", "--members"))
        assert [(r["GROUP"], r["CLIENT-ID"], r["#PARTITIONS"]) for r in members] == [("cg-lag", "cg-member", "2")], members
        assert members[0]["CONSUMER-ID"].startswith("cg-member-"), members
        state = table(groups_tool(node, "--describe", "--group", "cg-lag", "--state"))
        assert [(r["STATE"], r["#MEMBERS"], r["ASSIGNMENT-STRATEGY"]) for r in state] == [("Stable", "1", "range")], state
        assert describe_offsets(node, "cg-lag") == {0: ("100", "100", "0", "cg-member"),
                                                    1: ("40", "100", "60", "cg-member")}
    finally:
        member.close()  # auto-commit is off: closing leaves the offsets at 100 / 40

    # Inactive: the committed offsets and lag remain, with no member.
    assert describe_offsets(node, "cg-lag") == {0: ("100", "100", "0", "-"), 1: ("40", "100", "60", "-")}
    produce(node.bootstrap, topic, lines("cg", 200, 210), partitions=2)  # the log end moves, lag grows
    assert describe_offsets(node, "cg-lag") == {0: ("100", "105", "5", "-"), 1: ("40", "105", "65", "-")}

    reset = table(groups_tool(node, "--reset-offsets", "--group", "cg-lag", "--topic", topic, "--to-earliest",
                              "--execute"))
    assert sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in reset) == [("0", "0"), ("1", "0")], reset
    assert describe_offsets(node, "cg-lag") == {0: ("0", "105", "105", "-"), 1: ("0", "105", "105", "-")}
    again = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "cg-lag", "log_level": 3})
    again.subscribe([topic])
    got = consume_n(again, 210)
    again.close()
    assert sorted((p, o) for p, o, _ in got) == [(p, o) for p in range(2) for o in range(105)]
    # Closing committed 105 / 105 (auto-commit); shift partition 1 back by 5.
    shifted = table(groups_tool(node, "--reset-offsets", "--group", "cg-lag", "--topic", f"{topic}:1",
                                "--shift-by", "-5", "--execute"))
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in shifted] == [("1", "100")], shifted
    assert describe_offsets(node, "cg-lag") == {0: ("105", "105", "0", "-"), 1: ("100", "105", "5", "-")}
    # --delete-offsets (OffsetDelete) of the whole topic.
    out = groups_tool(node, "--delete-offsets", "--group", "cg-lag", "--topic", topic)
    assert "Request succeeded for deleting offsets from group cg-lag." in out, out
    deleted = table(out, first="TOPIC")
    assert sorted((r["PARTITION"], r["STATUS"]) for r in deleted) == [("0", "Successful"), ("1", "Successful")], out
    assert committed(node.bootstrap, "cg-lag", topic, 2) == {0: -1001, 1: -1001}  # nothing committed
    # As on Kafka 4.1, the group itself stays (Empty) until deleted.
    state = table(groups_tool(node, "--describe", "--group", "cg-lag", "--state"))
    assert [(r["STATE"], r["#MEMBERS"]) for r in state] == [("Empty", "0")], state

    out = groups_tool(node, "--delete", "--group", "cg-other")
    assert "Deletion of requested consumer groups ('cg-other') was successful." in out, out
    groups = listed(node)
    assert "cg-other" not in groups and "cg-lag" in groups, groups
    # The deleted group's offsets are gone: a new member of that name starts from scratch.
    fresh = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "cg-other", "log_level": 3})
    try:
        fresh_offsets = fresh.committed([TopicPartition(topic, p) for p in range(2)], timeout=20)
        assert [tp.offset for tp in fresh_offsets] == [-1001, -1001], fresh_offsets
    finally:
        fresh.close()
