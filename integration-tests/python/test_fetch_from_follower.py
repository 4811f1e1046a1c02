"""Fetching from the nearest replica (KIP-392) with the Java consumer (Kafka's console consumer,
`client.rack`) and confluent-kafka: three nodes in racks rack-1..rack-3 with
`replica.selector.class=RackAwareReplicaSelector`. A consumer in a follower's rack reads every
record from that follower, none from the leader (each node's
kafka_server_brokertopicmetrics_messagesout on /metrics says who served them); a consumer in the
leader's rack reads from the leader. The rdkafka (Rust) case, with the follower killed under the
consumer, is integration-tests/tests/it/fetch_from_follower.rs."""

from __future__ import annotations

import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from prometheus_text import parse
from test_java_cli import kafka_tool

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RECORDS = 300
SERVED = "kafka_server_brokertopicmetrics_messagesout_total"


def served(nodes, topic: str) -> dict[int, float]:
    """Records each node has sent to consumers of `topic`."""
    out = {}
    for n in nodes:
        with urllib.request.urlopen(f"{n.metrics_url}/metrics", timeout=10) as r:
            out[n.node_id] = parse(r.read().decode()).total(SERVED, topic=topic)
    return out


def bytes_by_rack(nodes) -> dict[str, float]:
    """Record bytes all nodes sent to consumers in their own rack ("same"), in another ("other")
    or where either rack is unknown, from sluice_consumer_fetch_bytes_total."""
    out = {"same": 0.0, "other": 0.0, "unknown": 0.0}
    for n in nodes:
        with urllib.request.urlopen(f"{n.metrics_url}/metrics", timeout=10) as r:
            scraped = parse(r.read().decode())
        for rack in out:
            out[rack] += scraped.total("sluice_consumer_fetch_bytes_total", rack=rack)
    return out


def served_since(nodes, topic: str, before: dict[int, float]) -> dict[int, int]:
    now = served(nodes, topic)
    return {i: int(now[i] - before[i]) for i in now}


def replicated_topic(nodes, topic: str) -> tuple[int, int]:
    """Creates `topic` (one partition, RF 3), writes RECORDS records `v-<i>` with acks=all and
    waits until every replica is in sync; returns (leader, a follower)."""
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    assert sorted(partition.isrs) == [1, 2, 3], partition.isrs
    leader = partition.leader
    return leader, next(i for i in (1, 2, 3) if i != leader)


def read_with_java(nodes, topic: str, rack: str) -> list[str]:
    bootstrap = ",".join(n.bootstrap for n in nodes)
    out = kafka_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
                     "--topic", topic, "--partition", "0", "--offset", "earliest",
                     "--command-property", f"client.rack={rack}",
                     "--max-messages", str(RECORDS), "--timeout-ms", "30000")
    return out.splitlines()


def read_with_librdkafka(nodes, topic: str, rack: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": ",".join(n.bootstrap for n in nodes), "group.id": "unused",
                         "client.rack": rack, "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        while len(values) < RECORDS:
            m = consumer.poll(30)
            assert m is not None, f"no record after {len(values)} of {RECORDS}"
            assert m.error() is None, m.error()
            values.append(m.value().decode())
        return values
    finally:
        consumer.close()


def test_consumers_in_a_followers_rack_read_from_it_and_in_the_leaders_rack_from_the_leader(cluster):
    nodes = cluster({"replica.selector.class": RACK_AWARE}, metrics=True,
                    per_node=lambda i: {"broker.rack": f"rack-{i}"})
    topic = "nearby-reads"
    leader, follower = replicated_topic(nodes, topic)
    expected = [f"v-{i}" for i in range(RECORDS)]

    for client, read in [("java", read_with_java), ("librdkafka", read_with_librdkafka)]:
        before = served(nodes, topic)
        assert read(nodes, topic, f"rack-{follower}") == expected, client
        by_node = served_since(nodes, topic, before)
        assert by_node[follower] == RECORDS and by_node[leader] == 0, \
            f"{client} in rack-{follower} was served {by_node} (leader {leader})"

        before = served(nodes, topic)
        assert read(nodes, topic, f"rack-{leader}") == expected, client
        by_node = served_since(nodes, topic, before)
        assert by_node[leader] == RECORDS and sum(by_node.values()) == RECORDS, \
            f"{client} in rack-{leader} was served {by_node} (leader {leader})"

    # Every byte was read in the consumer's own rack.
    racks = bytes_by_rack(nodes)
    assert racks["other"] == 0 and racks["same"] >= 4 * RECORDS * len("v-0"), racks


def test_a_read_committed_consumer_reading_from_a_follower_never_sees_an_aborted_record(cluster):
    """The follower's last stable offset and aborted-transaction index come from the batches and
    markers it replicated: a read_committed consumer in its rack reads the committed
    transactions' records and none of the aborted one's, all served by the follower."""
    nodes = cluster({"replica.selector.class": RACK_AWARE}, metrics=True,
                    per_node=lambda i: {"broker.rack": f"rack-{i}"})
    topic = "nearby-committed"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "nearby-tx"})
    producer.init_transactions(30)
    for name, commit in [("first", True), ("aborted", False), ("second", True)]:
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, value=f"{name}-{i}".encode(), partition=0)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    leader = partition.leader
    follower = next(i for i in (1, 2, 3) if i != leader)

    before = served(nodes, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "client.rack": f"rack-{follower}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        while len(values) < 100:
            m = consumer.poll(30)
            assert m is not None, f"no record after {values[-3:]} ({len(values)} of 100)"
            assert m.error() is None, m.error()
            values.append(m.value().decode())
        # Nothing more: the aborted transaction's records are never delivered.
        extra = consumer.poll(2)
        assert extra is None or extra.error() is not None, extra.value()
    finally:
        consumer.close()
    assert values == [f"first-{i}" for i in range(50)] + [f"second-{i}" for i in range(50)], values
    by_node = served_since(nodes, topic, before)
    assert by_node[leader] == 0 and by_node[follower] >= 100, \
        f"a read_committed consumer in rack-{follower} was served {by_node} (leader {leader})"
