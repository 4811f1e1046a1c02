"""confluent-kafka-python (bundles a current librdkafka): produce/consume and
IncrementalAlterConfigs, which the Rust rdkafka crate does not expose."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewTopic, ResourceType)


def admin(node) -> AdminClient:
    """One AdminClient per node, kept alive on the node: a client garbage-collected while a
    request is in flight fails its futures with _DESTROY."""
    if getattr(node, "_ck_admin", None) is None:
        node._ck_admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})
    return node._ck_admin


def create_topic(node, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    fs = admin(node).create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                   request_timeout=15)
    fs[name].result(timeout=20)


def describe(node, topic: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin(node).describe_configs([res], request_timeout=15)[res].result(timeout=20)


def alter(node, topic: str, *entries: ConfigEntry) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    admin(node).incremental_alter_configs([res], request_timeout=15)[res].result(timeout=20)


def source(entry: ConfigEntry) -> int:
    """The entry's config source as Kafka's integer code (the binding may give an enum or int)."""
    return getattr(entry.source, "value", entry.source)


def op(name: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=kind)


def test_confluent_kafka_produce_consume_roundtrip_with_headers(node):
    create_topic(node, "ck-roundtrip", 2)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "enable.idempotence": False,
                  "linger.ms": 5, "log_level": 3})
    delivered: dict[int, list[tuple[int, bytes, bytes]]] = {0: [], 1: []}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.partition()].append((msg.offset(), msg.key(), msg.value()))

    for i in range(2000):
        p.produce("ck-roundtrip", key=b"key-%d" % i, value=b"v" * (i % 300),
                  headers=[("i", str(i).encode())], on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0, "messages still queued after 30 s"
    assert not errors, errors[:3]

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "unused-manual-assignment",
                  "enable.auto.commit": False, "auto.offset.reset": "error", "log_level": 3})
    try:
        c.assign([TopicPartition("ck-roundtrip", p_, 0) for p_ in (0, 1)])
        got: dict[int, list[tuple[int, bytes, bytes]]] = {0: [], 1: []}
        n = 0
        deadline = time.monotonic() + 60
        while n < 2000:
            assert time.monotonic() < deadline, f"consumed {n} of 2000"
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got[m.partition()].append((m.offset(), m.key(), m.value()))
            i = int(dict(m.headers())["i"])
            assert m.key() == b"key-%d" % i
            n += 1
    finally:
        c.close()
    for part in (0, 1):
        assert got[part] == sorted(delivered[part]), f"partition {part}"
        assert [o for o, _, _ in got[part]] == list(range(len(got[part])))


def test_incremental_alter_configs_set_delete_append_subtract(node):
    create_topic(node, "ck-configs", 1)
    before = describe(node, "ck-configs")
    default_retention = before["retention.ms"].value
    assert before["retention.ms"].is_default, before["retention.ms"]

    alter(node, "ck-configs", op("retention.ms", "7200000", AlterConfigOpType.SET))
    e = describe(node, "ck-configs")["retention.ms"]
    assert (e.value, source(e), e.is_default) == (
        "7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False), vars(e)

    alter(node, "ck-configs", op("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert describe(node, "ck-configs")["cleanup.policy"].value == "delete,compact"
    alter(node, "ck-configs", op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert describe(node, "ck-configs")["cleanup.policy"].value == "compact"

    alter(node, "ck-configs", op("retention.ms", None, AlterConfigOpType.DELETE))
    e = describe(node, "ck-configs")["retention.ms"]
    assert (e.value, e.is_default, source(e)) == (
        default_retention, True, ConfigSource.DEFAULT_CONFIG.value), vars(e)
    # The other override is untouched by deleting retention.ms (incremental, not replace-all).
    assert describe(node, "ck-configs")["cleanup.policy"].value == "compact"


@pytest.mark.parametrize("entry", [
    op("retention.ms", "not-a-number", AlterConfigOpType.SET),
    op("no.such.config", "1", AlterConfigOpType.SET),
    op("retention.ms", "5", AlterConfigOpType.APPEND),  # APPEND is only for list configs
], ids=["bad-value", "unknown-name", "append-to-non-list"])
def test_incremental_alter_configs_invalid_request_fails_invalid_config_and_broker_survives(node, entry):
    create_topic(node, "ck-invalid", 1)
    with pytest.raises(KafkaException) as exc:
        alter(node, "ck-invalid", entry)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG, exc.value
    assert node.is_running()
    assert describe(node, "ck-invalid")["retention.ms"].is_default
