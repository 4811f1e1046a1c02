"""kafka-python (pure-Python protocol implementation, its own version negotiation)."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import TopicAlreadyExistsError


def admin(node) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=node.bootstrap, client_id="pytest-admin",
                            request_timeout_ms=15000)


def wait_until(what: str, cond, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def consume_exactly(node, topic: str, partitions: list[int], expected: int, timeout: float = 60.0):
    """Manual assignment (no group), from the beginning; returns {partition: [records]}."""
    consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             client_id="pytest-consumer")
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list] = {p: [] for p in partitions}
        n = 0
        deadline = time.monotonic() + timeout
        while n < expected:
            assert time.monotonic() < deadline, f"consumed {n} of {expected} in {timeout}s"
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend(records)
                n += len(records)
        assert n == expected, f"consumed {n}, expected {expected}"
        return got
    finally:
        consumer.close()


def test_kafka_python_1000_keyed_records_acks_all_read_back_in_order(node):
    topic = "kp-roundtrip"
    a = admin(node)
    try:
        a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        a.close()

    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all", linger_ms=5,
                             enable_idempotence=False, client_id="pytest-producer")
    sent: dict[int, list[tuple[int, bytes, bytes]]] = {0: [], 1: []}
    try:
        futures = [(i, producer.send(topic, key=b"k%d" % i, value=b"value-%d-" % i + b"x" * (i % 50)))
                   for i in range(1000)]
        for i, f in futures:
            md = f.get(timeout=30)
            sent[md.partition].append((md.offset, b"k%d" % i, b"value-%d-" % i + b"x" * (i % 50)))
    finally:
        producer.close(timeout=10)
    assert sent[0] and sent[1], "keys should spread over both partitions"

    got = consume_exactly(node, topic, [0, 1], 1000)
    for p in (0, 1):
        expected = sorted(sent[p])
        assert [o for o, _, _ in expected] == list(range(len(expected))), f"partition {p} offsets"
        assert [(r.offset, r.key, r.value) for r in got[p]] == expected, f"partition {p} content/order"


def topic_names_seen_by_consumer(node) -> set[str]:
    c = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None, client_id="pytest-meta")
    try:
        return set(c.topics())
    finally:
        c.close()


def test_kafka_python_admin_create_describe_configs_delete_topics(node):
    a = admin(node)
    try:
        a.create_topics([NewTopic("kp-admin", num_partitions=3, replication_factor=1,
                                  topic_configs={"retention.ms": "3600000"})])
        assert "kp-admin" in topic_names_seen_by_consumer(node)
        try:
            a.create_topics([NewTopic("kp-admin", num_partitions=3, replication_factor=1)])
            raise AssertionError("creating an existing topic must fail")
        except TopicAlreadyExistsError:
            pass

        responses = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        entries = {}
        for resp in responses:
            for res in resp.resources:
                error_code, _msg, _rtype, name, configs = res[:5]
                assert error_code == 0 and name == "kp-admin", res
                for c in configs:
                    entries[c[0]] = c[1]
        assert entries.get("retention.ms") == "3600000", entries
        assert entries.get("cleanup.policy") == "delete", entries

        a.delete_topics(["kp-admin"], timeout_ms=10000)
        wait_until("kp-admin to disappear", lambda: "kp-admin" not in topic_names_seen_by_consumer(node))
    finally:
        a.close()


def test_kafka_python_admin_list_topics_and_describe_topics(node):
    """KafkaAdminClient asks for topic authorized operations (include_topic_authorized_operations)
    and decodes them as a bit set: the broker must fill in real operations when asked."""
    a = admin(node)
    try:
        a.create_topics([NewTopic("kp-listed", num_partitions=3, replication_factor=1)])
        assert "kp-listed" in a.list_topics()
        desc = a.describe_topics(["kp-listed"])
        assert len(desc) == 1 and desc[0]["topic"] == "kp-listed", desc
        assert sorted(p["partition"] for p in desc[0]["partitions"]) == [0, 1, 2], desc
        assert "READ" in desc[0]["authorized_operations"], desc
    finally:
        a.close()


def test_kafka_python_subscribes_right_after_an_idempotent_producer_auto_created_the_topic(cluster):
    """Issue 29's scenario: a consumer made with no topics subscribes to a topic an idempotent
    producer has just auto-created (`num.partitions=4`, 3 nodes) and written 100 records to,
    and must read them all, with a group and without one, on every try. Once seen reading
    nothing for 30 s in 3 tries of 12 (kafka-python 3.0.12); not reproduced since, in 48 tries
    of each variant on 2.3.3 and 3.0.12."""
    nodes = cluster({"num.partitions": "4"})
    bootstrap = ",".join(n.bootstrap for n in nodes)
    for attempt in range(3):
        for group in (None, f"kp-subscribe-group-{attempt}"):
            topic = f"kp-subscribe-{attempt}-{'group' if group else 'none'}"
            consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                     enable_auto_commit=False)
            producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
            try:
                for i in range(100):
                    producer.send(topic, f"v{i}".encode())
                producer.flush(30)
                consumer.subscribe([topic])
                got = []
                deadline = time.monotonic() + 30
                while len(got) < 100 and time.monotonic() < deadline:
                    for records in consumer.poll(timeout_ms=500).values():
                        got.extend(r.value for r in records)
                assert sorted(got) == sorted(f"v{i}".encode() for i in range(100)), (
                    f"try {attempt} (group {group}): read {len(got)} of 100 records in 30 s; "
                    f"assignment {sorted(tp.partition for tp in consumer.assignment())}")
            finally:
                producer.close(timeout=10)
                consumer.close()
