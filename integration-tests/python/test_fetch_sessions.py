"""Incremental fetch sessions (KIP-227) with a real client that uses them by default
(kafka-python): while a producer keeps writing to half the partitions of a topic and leaves the
others idle, the consumer, fetching in a session (the broker's FetchSessionCache metrics show
it), receives every record exactly once and in order per partition. What an incremental fetch
carries and is answered is checked on the wire in integration-tests/tests/it/fetch_sessions.rs."""

from __future__ import annotations

import threading
import time
import urllib.request

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from prometheus_text import parse

PARTITIONS = 6
BUSY = [0, 2, 4]
RECORDS_PER_BUSY_PARTITION = 400


def gauge(node, name: str) -> float:
    with urllib.request.urlopen(f"{node.metrics_url}/metrics", timeout=10) as r:
        return parse(r.read().decode()).total(name)


def test_a_kafka_python_consumer_in_a_fetch_session_gets_every_record_once(start_node):
    node = start_node(metrics=True)
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=15000)
    admin.create_topics([NewTopic("sessioned", PARTITIONS, 1)])
    admin.close()

    consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    tps = [TopicPartition("sessioned", p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)

    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all", linger_ms=2)
    failures: list[Exception] = []

    def produce():
        try:
            for i in range(RECORDS_PER_BUSY_PARTITION):
                for p in BUSY:
                    producer.send("sessioned", value=f"{p}:{i}".encode(), partition=p)
                if i % 50 == 0:
                    producer.flush()
            producer.flush()
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            failures.append(e)

    writer = threading.Thread(target=produce)
    writer.start()
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    sessions_seen = 0.0
    expected = RECORDS_PER_BUSY_PARTITION * len(BUSY)
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in got.values()) < expected:
            assert time.monotonic() < deadline, f"received {sum(len(v) for v in got.values())} of {expected}"
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend(r.value.decode() for r in records)
            sessions_seen = max(sessions_seen, gauge(node, "kafka_server_fetchsessioncache_numincrementalfetchsessions"))
    finally:
        writer.join(timeout=60)
        consumer.close()
        producer.close()
    assert failures == []
    for p in range(PARTITIONS):
        want = [f"{p}:{i}" for i in range(RECORDS_PER_BUSY_PARTITION)] if p in BUSY else []
        assert got[p] == want, f"partition {p}: {len(got[p])} records, first differences {got[p][:3]}"
    assert sessions_seen >= 1, "the consumer never held an incremental fetch session"
    assert gauge(node, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") >= PARTITIONS
