#!/usr/bin/env python3
"""Client workloads for scripts/capture-corpus.sh: every request kind a Python client sends.

  capture-clients.py confluent BOOTSTRAP     confluent-kafka (librdkafka 2.16): producers per codec,
                                             idempotent or not; group consumers (eager and
                                             cooperative, static member) that commit; AdminClient
  capture-clients.py kafka-python BOOTSTRAP  kafka-python, negotiated and pinned to older protocol
                                             versions (api_version=(0, 11) ... (3, 0))
  capture-clients.py restart-consumer BOOTSTRAP SECONDS
                                             produces and consumes (a group, committing) for
                                             SECONDS while capture-corpus.sh restarts the broker:
                                             the new leader epoch makes librdkafka validate its
                                             position with OffsetForLeaderEpoch

Run with the repo's .venv (integration-tests/python/requirements.txt). Prints what it did; a
failed step is printed and skipped, since the point is the frames sent, not the answers.
"""

import sys
import time


def step(label, fn):
    try:
        result = fn()
        print(f"{label}: {result if result is not None else 'ok'}", flush=True)
    except Exception as e:  # noqa: BLE001 - a refused request still produced its frame
        print(f"{label}: FAILED {e!r}", flush=True)


def confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicCollection, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic, OffsetSpec, ResourceType)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic("ck-topic", 3, 1, config={"retention.ms": "3600000"}),
                                   NewTopic("ck-compact", 2, 1, config={"cleanup.policy": "compact"})])
    for topic, future in created.items():
        step(f"create {topic}", future.result)

    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        for idempotent in (False, True):
            producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                 "enable.idempotence": idempotent, "linger.ms": 20, "batch.num.messages": 40})
            for i in range(60):
                producer.produce("ck-topic", key=f"key-{i % 7}".encode(), partition=i % 3,
                                 value=(f"{codec}-{idempotent}-{i}-" + "x" * (i % 50)).encode(),
                                 headers=[("h", b"v"), ("n", None)] if i % 3 == 0 else None)
            producer.produce("ck-compact", key=b"k", value=None)  # a tombstone
            producer.produce("ck-compact", key=b"k2", value=b"v2", timestamp=1_600_000_000_000)
            step(f"produce {codec} idempotent={idempotent}", lambda: producer.flush(30))

    def consume(group: str, extra: dict, want: int) -> str:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 10000, **extra})
        consumer.subscribe(["ck-topic", "ck-compact"])
        seen, deadline = 0, time.time() + 30
        while seen < want and time.time() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            seen += 1
            if seen % 100 == 0:
                consumer.commit(message=message, asynchronous=False)
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("ck-topic", p) for p in range(3)], timeout=10)
        watermarks = consumer.get_watermark_offsets(TopicPartition("ck-topic", 0), timeout=10)
        by_time = consumer.offsets_for_times([TopicPartition("ck-topic", 0, 1_600_000_000_000)], timeout=10)
        consumer.close()
        return f"{seen} records, committed {[tp.offset for tp in committed]}, {watermarks}, {by_time[0].offset}"

    step("group eager", lambda: consume("ck-group", {"isolation.level": "read_committed"}, 620))
    step("group cooperative static", lambda: consume(
        "ck-coop", {"partition.assignment.strategy": "cooperative-sticky", "group.instance.id": "ck-static-1",
                    "isolation.level": "read_uncommitted"}, 300))

    def assigned() -> int:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-assign", "enable.auto.commit": True,
                             "auto.commit.interval.ms": 200})
        consumer.assign([TopicPartition("ck-topic", 1, 5)])
        seen, deadline = 0, time.time() + 15
        while seen < 20 and time.time() < deadline:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                seen += 1
        time.sleep(0.5)
        consumer.close()
        return seen

    step("assign + auto commit", assigned)
    step("list topics", lambda: sorted(admin.list_topics(timeout=10).topics))
    step("list groups", lambda: sorted(g.group_id for g in admin.list_consumer_groups().result().valid))
    for group, future in admin.describe_consumer_groups(["ck-group", "ck-assign"]).items():
        step(f"describe group {group}", lambda: future.result().state)
    for resource, future in admin.describe_configs([ConfigResource(ResourceType.TOPIC, "ck-topic"),
                                                    ConfigResource(ResourceType.BROKER, "1")]).items():
        step(f"describe configs {resource}", lambda: len(future.result()))
    alter = ConfigResource(ResourceType.TOPIC, "ck-topic", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    for resource, future in admin.incremental_alter_configs([alter]).items():
        step(f"alter configs {resource}", future.result)
    for topic, future in admin.create_partitions([NewPartitions("ck-topic", 5)]).items():
        step(f"create partitions {topic}", future.result)
    step("describe cluster", lambda: admin.describe_cluster().result().cluster_id)
    for topic, future in admin.describe_topics(TopicCollection(["ck-topic"])).items():
        step(f"describe topic {topic}", lambda: len(future.result().partitions))
    offsets = admin.list_offsets({TopicPartition("ck-topic", 0): OffsetSpec.latest(),
                                  TopicPartition("ck-topic", 1): OffsetSpec.earliest(),
                                  TopicPartition("ck-topic", 2): OffsetSpec.max_timestamp()})
    for tp, future in offsets.items():
        step(f"list offsets {tp.partition}", lambda: future.result().offset)
    for group, future in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("ck-group")]).items():
        step(f"group offsets {group}", lambda: len(future.result().topic_partitions))
    for group, future in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "ck-assign", [TopicPartition("ck-topic", 0, 3)])]).items():
        step(f"alter group offsets {group}", future.result)
    for group, future in admin.delete_consumer_groups(["ck-assign"]).items():
        step(f"delete group {group}", future.result)
    for topic, future in admin.delete_topics(["ck-compact"]).items():
        step(f"delete topic {topic}", future.result)


def kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

    # kafka-python has no snappy/lz4/zstd libraries in the venv: gzip and none only.
    for api in [None, (0, 11), (1, 0), (2, 0), (2, 1), (2, 4), (2, 6), (3, 0)]:
        tag = "auto" if api is None else "%d.%d" % api
        pinned = {} if api is None else {"api_version": api}
        for codec in ["gzip", None]:
            def produce():
                producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=10, **pinned)
                for i in range(30):
                    producer.send("kp-topic", key=b"k%d" % (i % 4), headers=[("h", b"1")] if i % 5 == 0 else None,
                                  value=f"kafka-python {tag} {codec} {i}".encode())
                producer.flush(20)
                producer.close(5)
            step(f"{tag} produce {codec}", produce)

        def consume():
            consumer = KafkaConsumer("kp-topic", bootstrap_servers=bootstrap, group_id="kp-group-" + tag,
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     consumer_timeout_ms=6000, **pinned)
            seen = 0
            for _ in consumer:
                seen += 1
                if seen % 50 == 0:
                    consumer.commit()
            consumer.commit()
            tp = TopicPartition("kp-topic", 0)
            result = (seen, consumer.committed(tp), consumer.end_offsets([tp]), consumer.offsets_for_times({tp: 0}))
            consumer.close()
            return result
        step(f"{tag} consume", consume)

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **pinned)
        topic = "kp-admin-" + tag.replace(".", "-")
        group = "kp-group-" + tag
        # One step each: a pinned client refuses locally what its version lacks, and DescribeConfigs
        # pinned to (0, 11) or (1, 0) is v0, which Kafka 4.1 and Sluice no longer serve (the broker
        # closes the connection; kafka-python reconnects for the next step).
        step(f"{tag} create topic", lambda: admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "100000"})]))
        step(f"{tag} list groups", lambda: len(admin.list_consumer_groups()))
        step(f"{tag} describe group", lambda: [g.state for g in admin.describe_consumer_groups([group])])
        step(f"{tag} group offsets", lambda: len(admin.list_consumer_group_offsets(group)))
        step(f"{tag} describe configs", lambda: len(admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])))
        step(f"{tag} create partitions", lambda: admin.create_partitions({topic: NewPartitions(3)}))
        step(f"{tag} delete group", lambda: admin.delete_consumer_groups([group]))
        step(f"{tag} delete topic", lambda: admin.delete_topics([topic]))
        admin.close()

def restart_consumer(bootstrap: str, seconds: str) -> None:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-restart", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe(["restart-topic"])
    seen, deadline, next_send = 0, time.time() + float(seconds), 0.0
    while time.time() < deadline:
        if time.time() >= next_send:
            producer.produce("restart-topic", value=b"across a restart", partition=0)
            producer.poll(0)
            next_send = time.time() + 0.5
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen += 1
            if seen % 5 == 0:
                consumer.commit(message=message, asynchronous=False)
    producer.flush(10)
    consumer.close()
    print(f"restart-consumer: {seen} records", flush=True)


if __name__ == "__main__":
    commands = {"confluent": (confluent, 3), "kafka-python": (kafka_python, 3), "restart-consumer": (restart_consumer, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
