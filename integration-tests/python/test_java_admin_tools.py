"""Kafka 4.4's own admin tools against sluice: on a 3-node cluster `kafka-leader-election`
(LeaderElectionCommand, ElectLeaders) preferred and unclean, and `kafka-topics --describe`
(TopicCommand, which pages with DescribeTopicPartitions when the broker advertises it); on one
node `kafka-transactions describe-producers` (TransactionsCommand, DescribeProducers)."""

from __future__ import annotations

import re
import time

from confluent_kafka.admin import AdminClient

from test_java_cli import kafka_tool

# Fencing within seconds, and no automatic preferred-leader election racing the tool's.
SETTINGS = {"broker.session.timeout.ms": "3000", "auto.leader.rebalance.enable": "false"}
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """Partition -> (leader, replicas, isr) as the cluster reports it now."""
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in meta.partitions.values()}


def wait_for(what: str, probe, accept=bool, timeout: float = 30.0):
    """Polls `probe` until `accept` takes its value, and returns that value; fails with `what`
    and the last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if accept(value):
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {value!r}"
        time.sleep(0.1)


def test_kafka_leader_election_moves_leadership_back_to_preferred_replicas(cluster):
    nodes = cluster(SETTINGS)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "java-elect",
               "--replica-assignment", "1:2:3,2:3:1,1:3:2")
    wait_for("full ISRs", lambda: all(isr == [1, 2, 3] for _, _, isr in partitions(bootstrap, "java-elect").values()))

    # A controlled restart of broker 1 leaves the partitions it prefers led by others.
    nodes[0].terminate()
    nodes[0].spawn()
    nodes[0].wait_ready()

    def rebalanced_away(now) -> bool:
        settled = all(isr == [1, 2, 3] for _, _, isr in now.values())
        return settled and now[0][0] != 1 and now[2][0] != 1

    before = wait_for("broker 1 back in every ISR, leading nothing", lambda: partitions(bootstrap, "java-elect"),
                      rebalanced_away)
    assert before[1][0] == 2, before

    out = kafka_tool(ELECTION, "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
                     "--all-topic-partitions")
    assert "Successfully completed leader election (PREFERRED) for partitions" in out, out
    elected = set(re.findall(r"java-elect-\d+", out))
    assert elected == {"java-elect-0", "java-elect-2"}, out
    after = wait_for("broker 1 leading its preferred partitions", lambda: partitions(bootstrap, "java-elect"),
                     lambda p: p[0][0] == 1 and p[2][0] == 1)
    assert after[1][0] == 2, after

    # Asked again for one partition: the preferred replica already leads.
    out = kafka_tool(ELECTION, "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
                     "--topic", "java-elect", "--partition", "0")
    assert "Valid replica already elected for partitions java-elect-0" in out, out


def test_kafka_leader_election_unclean_is_not_needed_while_the_leader_lives(cluster):
    nodes = cluster(SETTINGS)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "java-unclean",
               "--partitions", "1", "--replication-factor", "3")
    leader, _, _ = wait_for("a leader", lambda: partitions(bootstrap, "java-unclean")[0], lambda p: p[0] >= 0)
    out = kafka_tool(ELECTION, "--bootstrap-server", bootstrap, "--election-type", "UNCLEAN",
                     "--topic", "java-unclean", "--partition", "0")
    assert "Valid replica already elected for partitions java-unclean-0" in out, out
    assert partitions(bootstrap, "java-unclean")[0][0] == leader


def test_kafka_leader_election_unclean_elects_the_live_out_of_sync_replica(cluster):
    """Five voters, so the quorum outlives both replicas of the topic going down."""
    nodes = cluster(SETTINGS, size=5)
    bootstrap = ",".join(n.bootstrap for n in nodes[2:])
    kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "java-unclean-2",
               "--replica-assignment", "1:2")

    def state() -> tuple[int, list[int], list[int]]:
        return partitions(bootstrap, "java-unclean-2")[0]

    wait_for("a full ISR", state, lambda p: p[2] == [1, 2])
    nodes[1].kill()
    wait_for("broker 2 out of the ISR", state, lambda p: p[2] == [1])
    nodes[0].kill()
    wait_for("the partition offline", state, lambda p: p[0] == -1)

    unclean = (ELECTION, "--bootstrap-server", bootstrap, "--election-type", "UNCLEAN",
               "--topic", "java-unclean-2", "--partition", "0")
    out = kafka_tool(*unclean, exit_code=1)
    assert "Error completing leader election (UNCLEAN) for partition: java-unclean-2-0" in out, out
    assert "EligibleLeadersNotAvailableException" in out, out

    # Broker 2 comes back out of sync; nothing elects it until an admin asks.
    nodes[1].spawn()
    nodes[1].wait_ready()
    assert state()[0] == -1
    out = kafka_tool(*unclean)
    assert "Successfully completed leader election (UNCLEAN) for partitions java-unclean-2-0" in out, out
    leader, _, isr = wait_for("broker 2 leading", state, lambda p: p[0] == 2)
    assert (leader, isr) == (2, [2]), "the unclean leader is the whole ISR"


def test_kafka_topics_describe_pages_through_every_partition(cluster):
    nodes = cluster(SETTINGS)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "java-describe",
               "--partitions", "7", "--replication-factor", "3")
    kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "java-describe-b",
               "--partitions", "2", "--replication-factor", "2")
    expected = partitions(bootstrap, "java-describe")
    # Two partitions per DescribeTopicPartitions response: the tool follows the cursor.
    out = kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", "java-describe",
                     "--partition-size-limit-per-response", "2")
    header = [line for line in out.splitlines() if line.startswith("Topic: java-describe\t")]
    assert len(header) == 1 and "PartitionCount: 7" in header[0] and "ReplicationFactor: 3" in header[0], out
    rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)", out)
    assert sorted(int(p) for p, *_ in rows) == list(range(7)), out
    for p, leader, replicas, _ in rows:
        assert int(leader) == expected[int(p)][0], out
        assert [int(r) for r in replicas.split(",")] == expected[int(p)][1], out

    # Every topic, one partition per response.
    out = kafka_tool(TOPICS, "--bootstrap-server", bootstrap, "--describe",
                     "--partition-size-limit-per-response", "1")
    listed = re.findall(r"Topic: (java-describe(?:-b)?)\s+Partition: (\d+)", out)
    assert sorted(listed) == sorted([("java-describe", str(p)) for p in range(7)]
                                    + [("java-describe-b", str(p)) for p in range(2)]), out


def test_kafka_transactions_describe_producers_lists_the_console_producer(start_node):
    node = start_node()
    kafka_tool(TOPICS, "--bootstrap-server", node.bootstrap, "--create", "--topic", "java-producers",
               "--partitions", "1")
    # The console producer is idempotent by default: 40 records, sequences 0..39.
    kafka_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", node.bootstrap,
               "--topic", "java-producers", stdin="".join(f"r{i}\n" for i in range(40)))
    out = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", node.bootstrap,
                     "describe-producers", "--topic", "java-producers", "--partition", "0")
    header, *rows = [line.split() for line in out.splitlines() if line.strip()]
    assert header[:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"], out
    assert len(rows) == 1, out
    producer = dict(zip(header, rows[0]))
    assert int(producer["ProducerId"]) >= 0 and producer["ProducerEpoch"] == "0", out
    assert producer["LastSequence"] == "39", out
    assert int(producer["LastTimestamp"]) > 0, out
    assert (producer["LatestCoordinatorEpoch"], producer["CurrentTransactionStartOffset"]) == ("-1", "None"), out
