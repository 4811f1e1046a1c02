"""confluent-kafka-python (librdkafka inside) in the compatibility matrix: every scenario through
the library's own Producer, Consumer and AdminClient with default settings, except where the
scenario names a setting."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from harness import Context, Record, check, compare_records, sample_records, wait_for  # noqa: E402

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, ConsumerGroupTopicPartitions, Consumer, KafkaError,
    KafkaException, Producer, ShareConsumer, TopicCollection, TopicPartition,
)
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic, OffsetSpec,
)

TIMEOUT_S = 30


def admin(ctx: Context) -> AdminClient:
    return AdminClient({"bootstrap.servers": ctx.bootstrap})


def result(futures: dict, what: str):
    """Waits for every future of an admin call; fails naming the first error."""
    out = {}
    for k, f in futures.items():
        try:
            out[k] = f.result(timeout=TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - reported as the scenario's error
            raise harness.ScenarioFailed(f"{what} {k}: {e}") from e
    return out


def create_topic(ctx: Context, name: str, partitions: int = 1) -> str:
    a = admin(ctx)
    result(a.create_topics([NewTopic(name, partitions, ctx.replication)]), "create_topics")
    wait_for(lambda: leaders_known(a, name, partitions), TIMEOUT_S, f"leaders of {name}")
    return name


def leaders_known(a: AdminClient, name: str, partitions: int) -> bool:
    t = a.list_topics(name, timeout=10).topics.get(name)
    return t is not None and t.error is None and len(t.partitions) == partitions and all(
        p.leader >= 0 for p in t.partitions.values())


def produce(ctx: Context, topic: str, records: list[Record], **conf) -> None:
    p = Producer({"bootstrap.servers": ctx.bootstrap, **conf})
    errors: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    for r in records:
        p.produce(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp,
                  on_delivery=delivered)
        p.poll(0)
    left = p.flush(TIMEOUT_S)
    check(left == 0, f"{left} records still undelivered after {TIMEOUT_S}s")
    check(not errors, f"{len(errors)} delivery errors, first: {errors[:1]}")


def consumer(ctx: Context, group: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": ctx.bootstrap, "group.id": ctx.name(group), **conf})


def read(c: Consumer, count: int, timeout_s: float = TIMEOUT_S) -> list:
    """Polls until `count` messages arrived; fails on an error message or at the deadline."""
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        check(m.error() is None, f"consumer error after {len(got)} records: {m.error()}")
        got.append(m)
    check(len(got) == count, f"read {len(got)} of {count} records in {timeout_s}s")
    return got


def read_from_beginning(ctx: Context, topic: str, count: int) -> list:
    c = consumer(ctx, "reader", **{"enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        return read(c, count)
    finally:
        c.close()


def as_record(m) -> Record:
    ts_type, ts = m.timestamp()
    check(ts_type == TIMESTAMP_CREATE_TIME, f"offset {m.offset()}: timestamp type {ts_type}, not CreateTime")
    return Record(m.key(), m.value(), tuple(m.headers() or ()), ts)


def round_trip(ctx: Context, name: str, count: int = 100, **conf) -> None:
    topic = create_topic(ctx, ctx.name(name))
    sent = sample_records(count)
    produce(ctx, topic, sent, **conf)
    got = read_from_beginning(ctx, topic, count)
    check([m.offset() for m in got] == list(range(count)), "offsets are not 0..n-1 in order")
    compare_records(sent, [as_record(m) for m in got])


def metadata(ctx: Context) -> str | None:
    topic = create_topic(ctx, ctx.name("metadata"))
    a = admin(ctx)
    requests = []

    def listed():  # brokers learn of a new topic one after another, as in Kafka: poll
        requests.append(1)
        md = a.list_topics(timeout=10)
        return md if topic in md.topics else None

    md = wait_for(listed, TIMEOUT_S, f"{topic} in an all-topics metadata request")
    brokers = sorted(f"{b.host}:{b.port}" for b in md.brokers.values())
    check(brokers == sorted(ctx.bootstrap.split(",")), f"brokers {brokers}, expected {ctx.bootstrap}")
    t = md.topics[topic]
    check(t.error is None and len(t.partitions) == 1, f"topic {topic} listed as {t}")
    return f"the topic appeared in metadata request {len(requests)}" if len(requests) > 1 else None


def admin_topics(ctx: Context) -> None:
    a = admin(ctx)
    topic = create_topic(ctx, ctx.name("admin"), 3)

    def partitions() -> int:
        d = result(a.describe_topics(TopicCollection([topic])), "describe_topics")[topic]
        return len(d.partitions)

    # Another broker may not know the topic yet (as with Kafka): poll.
    wait_for(lambda: partitions() == 3, TIMEOUT_S, "describe_topics to show 3 partitions")
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    result(a.incremental_alter_configs([res]), "incremental_alter_configs")

    def retention_ms() -> str:
        configs = result(a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]), "describe_configs")
        return next(iter(configs.values()))["retention.ms"].value

    # Brokers apply a config change asynchronously (Kafka too): poll for the new value.
    wait_for(lambda: retention_ms() == "3600000", TIMEOUT_S, "describe_configs to show retention.ms=3600000")
    result(a.create_partitions([NewPartitions(topic, 5)]), "create_partitions")
    wait_for(lambda: partitions() == 5, TIMEOUT_S, "5 partitions after create_partitions")
    result(a.delete_topics([topic]), "delete_topics")
    wait_for(lambda: topic not in a.list_topics(timeout=10).topics, TIMEOUT_S, f"{topic} to be gone")


def group_resume(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("resume"))
    produce(ctx, topic, sample_records(100))
    conf = {"auto.offset.reset": "earliest", "enable.auto.commit": False}
    first = consumer(ctx, "resume", **conf)
    first.subscribe([topic])
    got = read(first, 50)
    check([m.offset() for m in got] == list(range(50)), "first consumer did not read offsets 0..49")
    first.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    first.close()
    second = consumer(ctx, "resume", **conf)
    second.subscribe([topic])
    try:
        rest = read(second, 50)
        offsets = [m.offset() for m in rest]
        check(offsets == list(range(50, 100)), f"second consumer read offsets {offsets[:3]}..., expected 50..99")
        extra = second.poll(1.0)
        check(extra is None or extra.error() is not None, f"a duplicate after 100: offset {extra and extra.offset()}")
    finally:
        second.close()


def two_groups(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("twogroups"))
    produce(ctx, topic, sample_records(100))

    def drain(group: str) -> list[int]:
        c = consumer(ctx, group, **{"auto.offset.reset": "earliest"})
        try:
            c.subscribe([topic])
            return [m.offset() for m in read(c, 100)]
        finally:
            c.close()

    harness.each_group_reads_all(("group-a", "group-b"), drain, 100)


def groups_describe_lag(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("lag"))
    produce(ctx, topic, sample_records(100))
    group = ctx.name("lag")
    c = consumer(ctx, "lag", **{"auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        read(c, 60)
        c.commit(offsets=[TopicPartition(topic, 0, 60)], asynchronous=False)
        a = admin(ctx)
        listed = a.list_consumer_groups().result(timeout=TIMEOUT_S)
        check(group in [g.group_id for g in listed.valid], f"list_consumer_groups lacks {group}")
        desc = result(a.describe_consumer_groups([group]), "describe_consumer_groups")[group]
        check(desc.state.name == "STABLE", f"group state {desc.state}, expected STABLE")
        check(len(desc.members) == 1, f"{len(desc.members)} members, expected 1")
        assigned = [(tp.topic, tp.partition) for tp in desc.members[0].assignment.topic_partitions]
        check(assigned == [(topic, 0)], f"member assignment {assigned}")
        committed = result(a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]),
                           "list_consumer_group_offsets")[group].topic_partitions
        offsets = {(tp.topic, tp.partition): tp.offset for tp in committed}
        check(offsets.get((topic, 0)) == 60, f"committed offsets {offsets}")
        end = result(a.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}), "list_offsets")
        lag = next(iter(end.values())).offset - offsets[(topic, 0)]
        check(lag == 40, f"lag {lag}, expected 40")
    finally:
        c.close()


def offsets_for_times(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("times"))
    t0 = harness.now_ms() - 60_000
    produce(ctx, topic, [Record(b"k", b"v", (), t0 + i * 1000) for i in range(3)])
    c = consumer(ctx, "times")
    try:
        def lookup(ts: int) -> int:
            return c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset

        got = [lookup(t0 + 500), lookup(t0 + 2000), lookup(t0 + 3000)]
        check(got == [1, 2, -1], f"offsets for t0+500, t0+2000, t0+3000: {got}, expected [1, 2, -1]")
    finally:
        c.close()


def delete_records(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("delrec"))
    produce(ctx, topic, sample_records(100))
    a = admin(ctx)
    deleted = result(a.delete_records([TopicPartition(topic, 0, 30)]), "delete_records")
    low = next(iter(deleted.values())).low_watermark
    check(low == 30, f"delete_records answered low watermark {low}")
    earliest = result(a.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}), "list_offsets")
    check(next(iter(earliest.values())).offset == 30, "earliest offset is not 30 after delete_records")
    first = read_from_beginning(ctx, topic, 70)
    check(first[0].offset() == 30, f"consuming from the beginning starts at {first[0].offset()}")


def empty_topic(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("empty"))
    # enable.partition.eof makes "reached the end, nothing here" an observable event, so the test
    # knows the consumer from the end has its position before the record is produced.
    conf = {"enable.auto.commit": False, "enable.partition.eof": True}
    readers = {"beginning": consumer(ctx, "empty-b", **conf), "end": consumer(ctx, "empty-e", **conf)}
    try:
        readers["beginning"].assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        readers["end"].assign([TopicPartition(topic, 0, OFFSET_END)])
        for name, c in readers.items():
            m = c.poll(TIMEOUT_S)
            check(m is not None, f"the consumer from the {name} reached no end in {TIMEOUT_S}s")
            check(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF,
                  f"consumer from the {name} got {m.error() or m.offset()} from an empty topic, not the end")
        produce(ctx, topic, [Record(b"k", b"only", (), harness.now_ms())])
        for name, c in readers.items():
            m = wait_for(lambda c=c: record_or_none(c), TIMEOUT_S, f"the record at the consumer from the {name}")
            check(m.value() == b"only", f"consumer from the {name} read {m.value()!r}")
    finally:
        for c in readers.values():
            c.close()


def record_or_none(c: Consumer):
    """The next message, None for an end-of-partition event; fails on any other error."""
    m = c.poll(0.5)
    if m is None or (m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF):
        return None
    check(m.error() is None, f"consumer error: {m.error()}")
    return m


def many_topics(ctx: Context) -> None:
    a = admin(ctx)
    names = [ctx.name(f"many-{i:03d}") for i in range(200)]
    result(a.create_topics([NewTopic(n, 1, ctx.replication) for n in names]), "create_topics")

    def all_led() -> bool:
        topics = a.list_topics(timeout=10).topics  # one Metadata request for every topic
        return all(n in topics and topics[n].partitions and topics[n].partitions[0].leader >= 0 for n in names)

    wait_for(all_led, TIMEOUT_S, "all 200 topics listed with leaders")
    result(a.delete_topics(names), "delete_topics")


def regex_subscribe(ctx: Context) -> str | None:
    c = consumer(ctx, "regex", **{"auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000})
    topic = ctx.name("regex-late")
    pattern = f"^{ctx.prefix}regex-.*"
    notes = []
    try:
        c.subscribe([pattern])
        # librdkafka reports a pattern that matches nothing yet as "Subscribed topic not
        # available: <pattern>" (UNKNOWN_TOPIC_OR_PART), against Kafka too; any other event fails.
        early = c.poll(1.0)
        if early is not None and early.error() is not None and early.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            notes.append(f"before the topic existed: {early.error().str()}")
        else:
            check(early is None, f"before any matching topic exists the consumer got {early and (early.error() or early.topic())}")
        create_topic(ctx, topic)
        produce(ctx, topic, [Record(b"k", b"late", (), harness.now_ms())])
        m = wait_for(lambda: matching_record(c, pattern), TIMEOUT_S, f"a record from {topic}")
        check((m.topic(), m.value()) == (topic, b"late"), f"read {m.topic()} {m.value()!r}")
        return "; ".join(notes) or None
    finally:
        c.close()


def matching_record(c: Consumer, pattern: str):
    """The next message; None on nothing or on librdkafka's repeated no-match report for `pattern`."""
    m = c.poll(0.5)
    if m is None or (m.error() is not None and pattern in m.error().str()):
        return None
    check(m.error() is None, f"consumer error: {m.error()}")
    return m


# --- the security rows ---------------------------------------------------------------------

def secured_conf(login: dict, **extra) -> dict:
    """librdkafka's settings for a --security login; OAUTHBEARER's signed token comes from the
    application's oauth_cb (librdkafka itself only makes unsigned ones)."""
    conf = {"bootstrap.servers": login["bootstrap"], "security.protocol": login["security_protocol"], **extra}
    if "ca" in login:
        conf["ssl.ca.location"] = login["ca"]
    if "client_cert" in login:
        conf["ssl.certificate.location"] = login["client_cert"]
        conf["ssl.key.location"] = login["client_key"]
    mechanism = login.get("sasl_mechanism")
    if mechanism:
        conf["sasl.mechanism"] = mechanism
    if mechanism == "OAUTHBEARER":
        token, expires, principal = login["token"], login["token_expires_ms"] / 1000, login["token_principal"]
        conf["oauth_cb"] = lambda _config: (token, expires, principal)
    elif mechanism:
        conf["sasl.username"] = login["username"]
        conf["sasl.password"] = login["password"]
    return conf


def secure_round_trip(ctx: Context, scenario: str) -> None:
    login = ctx.login(scenario)
    topic = ctx.name(scenario.replace("_", "-"))
    a = AdminClient(secured_conf(login))
    a.poll(0)  # serves oauth_cb: the admin client's first token
    result(a.create_topics([NewTopic(topic, 1, ctx.replication)]), "create_topics")
    wait_for(lambda: leaders_known(a, topic, 1), TIMEOUT_S, f"leaders of {topic}")
    values = harness.secure_values(topic)
    produce_values(secured_conf(login, acks="all"), topic, values)
    c = Consumer(secured_conf(login, **{"group.id": ctx.name(f"{scenario}-group"), "auto.offset.reset": "earliest",
                                       "enable.auto.commit": False}))
    try:
        c.subscribe([topic])
        got = read(c, len(values))
        harness.check_values(values, [m.value() for m in got])
        c.commit(asynchronous=False)
        [committed] = c.committed([TopicPartition(topic, 0)], timeout=10)
        check(committed.offset == len(values), f"committed offset {committed.offset}, expected {len(values)}")
    finally:
        c.close()


def produce_values(conf: dict, topic: str, values: list[bytes]) -> None:
    p = Producer(conf)
    errors: list[str] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _msg: err is not None and errors.append(str(err)))
    left = p.flush(TIMEOUT_S)
    check(left == 0, f"{left} records still undelivered after {TIMEOUT_S}s")
    check(not errors, f"{len(errors)} delivery errors, first: {errors[:1]}")


def sasl_wrong_password(ctx: Context) -> str:
    """The error callback reports librdkafka's SASL authentication error, and no metadata request
    succeeds."""
    errors: list[str] = []
    a = AdminClient(secured_conf(ctx.login("sasl_wrong_password"), error_cb=lambda e: errors.append(e.str())))
    # The client connects as it is created; poll() serves the error callback.
    wait_for(lambda: a.poll(0.1) is not None and errors, TIMEOUT_S, "the error callback")
    try:
        a.list_topics(timeout=1)
        raise harness.ScenarioFailed("a metadata request succeeded after logging in with a wrong password")
    except KafkaException as e:
        print(f"[sasl_wrong_password] list_topics: {e}", file=sys.stderr)
    return harness.refused_as_expected(errors[0])


# --- transactions ------------------------------------------------------------------------------

def tx_producer(ctx: Context, name: str) -> Producer:
    p = Producer({"bootstrap.servers": ctx.bootstrap, "transactional.id": ctx.name(name)})
    p.init_transactions(TIMEOUT_S)
    return p


def tx_send(p: Producer, topic: str, values: list[bytes]) -> None:
    """Sends `values` in the open transaction and waits for every acknowledgement (an abort would
    purge records still queued, and the rows need the aborted ones in the log)."""
    errors: list[str] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _msg: err is not None and errors.append(str(err)))
    left = p.flush(TIMEOUT_S)
    check(left == 0, f"{left} transactional records still undelivered after {TIMEOUT_S}s")
    check(not errors, f"{len(errors)} delivery errors, first: {errors[:1]}")


def isolated_reader(ctx: Context, topic: str, isolation: str) -> Consumer:
    c = consumer(ctx, f"{isolation}-reader", **{"enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return c


def read_isolated(ctx: Context, topic: str, isolation: str, count: int) -> list[bytes]:
    """The values an `isolation` consumer reads from the beginning: exactly `count`, then nothing
    more until its position reaches the log end (past the transaction markers)."""
    c = isolated_reader(ctx, topic, isolation)
    try:
        got = [m.value() for m in read(c, count)]
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        deadline = time.monotonic() + TIMEOUT_S
        while c.position([TopicPartition(topic, 0)])[0].offset < end:
            check(time.monotonic() < deadline, f"{isolation}: position did not reach the end offset {end}")
            m = c.poll(0.2)
            check(m is None or m.error() is not None, f"{isolation}: an extra record at offset {m and m.offset()}")
        return got
    finally:
        c.close()


def transactions_commit_abort(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("tx-commit-abort"))
    p = tx_producer(ctx, "tx-commit-abort")
    first, aborted, second = (harness.tx_values("c1", harness.TX_COMMITTED_1), harness.tx_values("a", harness.TX_ABORTED),
                              harness.tx_values("c2", harness.TX_COMMITTED_2))
    for values, commit in ((first, True), (aborted, False), (second, True)):
        p.begin_transaction()
        tx_send(p, topic, values)
        p.commit_transaction(TIMEOUT_S) if commit else p.abort_transaction(TIMEOUT_S)
    harness.check_values(first + second, read_isolated(ctx, topic, "read_committed", len(first + second)))
    harness.check_values(first + aborted + second,
                         read_isolated(ctx, topic, "read_uncommitted", len(first + aborted + second)))


def read_committed(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("read-committed"))
    p = tx_producer(ctx, "read-committed")
    before, open_tx = harness.tx_values("before", 5), harness.tx_values("open", 5)
    p.begin_transaction()
    tx_send(p, topic, before)
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    tx_send(p, topic, open_tx)
    c = isolated_reader(ctx, topic, "read_committed")
    try:
        harness.check_values(before, [m.value() for m in read(c, len(before))])
        lso = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        check(lso == len(before) + 1, f"read_committed end offset {lso} with a transaction open, expected "
                                      f"{len(before) + 1} (the last stable offset)")
        watch_until = time.monotonic() + harness.OPEN_TX_WATCH_S
        while time.monotonic() < watch_until:
            m = c.poll(0.2)
            check(m is None or m.error() is not None, f"delivered {m and m.value()!r} of the open transaction")
        p.commit_transaction(TIMEOUT_S)
        harness.check_values(open_tx, [m.value() for m in read(c, len(open_tx))])
    finally:
        c.close()


def consume_transform_produce(ctx: Context) -> None:
    source = create_topic(ctx, ctx.name("ctp-in"))
    sink = create_topic(ctx, ctx.name("ctp-out"))
    inputs = harness.tx_values("in", harness.CTP_INPUTS + harness.CTP_ABORTED)
    produce_values({"bootstrap.servers": ctx.bootstrap}, source, inputs[:harness.CTP_INPUTS])
    c = consumer(ctx, "ctp", **{"auto.offset.reset": "earliest", "enable.auto.commit": False,
                                "isolation.level": "read_committed"})
    p = tx_producer(ctx, "ctp")

    def transaction(count: int, commit: bool) -> None:
        got = read(c, count)
        p.begin_transaction()
        tx_send(p, sink, [b"out-" + m.value() for m in got])
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S) if commit else p.abort_transaction(TIMEOUT_S)

    # A read_committed librdkafka consumer asks OffsetFetch with require_stable: pending
    # transactional commits are resolved before it answers.
    def committed() -> int:
        return c.committed([TopicPartition(source, 0)], timeout=10)[0].offset

    try:
        c.subscribe([source])
        for _ in range(harness.CTP_INPUTS // harness.CTP_TX_SIZE):
            transaction(harness.CTP_TX_SIZE, commit=True)
        check(committed() == harness.CTP_INPUTS, f"committed offset {committed()}, expected {harness.CTP_INPUTS}")
        produce_values({"bootstrap.servers": ctx.bootstrap}, source, inputs[harness.CTP_INPUTS:])
        transaction(harness.CTP_ABORTED, commit=False)
        check(committed() == harness.CTP_INPUTS, f"committed offset {committed()} after an aborted transaction, "
                                                 f"expected {harness.CTP_INPUTS}")
    finally:
        c.close()
    harness.check_values([b"out-" + v for v in inputs[:harness.CTP_INPUTS]],
                         read_isolated(ctx, sink, "read_committed", harness.CTP_INPUTS))


# --- group_kip848, group_migration, share_group, fetch_from_follower ---------------------------

def produce_spread(ctx: Context, topic: str, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": ctx.bootstrap, "acks": "all"})
    for i in range(per_partition):
        for part in range(harness.SPREAD_PARTITIONS):
            p.produce(topic, value=f"{topic}-{part}-{i}".encode(), partition=part)
    check(p.flush(TIMEOUT_S) == 0, f"records still undelivered after {TIMEOUT_S}s")


def group_member(ctx: Context, group: str, protocol: str) -> Consumer:
    return consumer(ctx, group, **{"auto.offset.reset": "earliest", "enable.auto.commit": False,
                                   "group.protocol": protocol})


def drain(members: list[Consumer], count: int) -> harness.Reads:
    """Polls every member in turn, each committing what it read after each poll, until `count`
    records arrived, then once more to see nothing else comes."""
    reads = harness.Reads()
    deadline = time.monotonic() + TIMEOUT_S
    last = False
    while True:
        for i, c in enumerate(members):
            msgs = c.consume(100, 0.5 if last else 0.1)
            for m in msgs:
                check(m.error() is None, f"consumer error: {m.error()}")
                reads.add(i, m.partition(), m.offset())
            if msgs:
                c.commit(asynchronous=False)
        if last:
            return reads
        last = reads.total >= count
        check(last or time.monotonic() < deadline, f"read {reads.total} of {count} records in {TIMEOUT_S}s")


def expect_committed(ctx: Context, group: str, topic: str, offset: int) -> None:
    a = admin(ctx)  # held until its futures are done
    listed = result(a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(ctx.name(group))]),
                    "list_consumer_group_offsets")
    got = {tp.partition: tp.offset for r in listed.values() for tp in r.topic_partitions if tp.topic == topic}
    want = {p: offset for p in range(harness.SPREAD_PARTITIONS)}
    check(got == want, f"committed offsets {got}, expected {offset} on each partition")


def group_type(ctx: Context, group: str) -> str:
    a = admin(ctx)  # held until its futures are done
    d = result(a.describe_consumer_groups([ctx.name(group)]), "describe_consumer_groups")[ctx.name(group)]
    return d.type.name


def group_kip848(ctx: Context) -> str:
    """Two KIP-848 members split a 3-partition topic, read 20 records of each partition between
    them, each once, committing; both close; a new member resumes at the commits."""
    topic = create_topic(ctx, ctx.name("kip848"), harness.SPREAD_PARTITIONS)
    members = [group_member(ctx, "kip848", "consumer") for _ in range(2)]
    try:
        for c in members:
            c.subscribe([topic])

        def split() -> bool:  # the topic is empty: polls only heartbeat
            for c in members:
                c.poll(0.1)
            owned = [{tp.partition for tp in c.assignment()} for c in members]
            return all(owned) and len(owned[0] | owned[1]) == len(owned[0]) + len(owned[1]) == harness.SPREAD_PARTITIONS

        wait_for(split, TIMEOUT_S, "the coordinator to split the 3 partitions between the two members")
        note = f"two members: {'+'.join(str(len(c.assignment())) for c in members)} partitions"
        produce_spread(ctx, topic, 20)
        reads = drain(members, 20 * harness.SPREAD_PARTITIONS)
        reads.expect(0, 20)
        check(len(reads.per_member) == 2, f"one member read everything: {reads.per_member}")
    finally:
        for c in members:
            c.close()
    expect_committed(ctx, "kip848", topic, 20)
    produce_spread(ctx, topic, 10)
    again = group_member(ctx, "kip848", "consumer")
    try:
        again.subscribe([topic])
        drain([again], 10 * harness.SPREAD_PARTITIONS).expect(20, 30)
        kind = group_type(ctx, "kip848")
        check(kind == "CONSUMER", f"described as a {kind} group, expected CONSUMER")
    finally:
        again.close()
    expect_committed(ctx, "kip848", topic, 30)
    return f"{note}, records read {list(reads.per_member.values())}"


def group_migration(ctx: Context) -> str:
    """Members of one group in turn, classic, consumer, classic: each joins the group the last
    one left empty (converting it), and resumes at its commits."""
    topic = create_topic(ctx, ctx.name("migration"), harness.SPREAD_PARTITIONS)
    kinds = []
    for n, protocol in enumerate(("classic", "consumer", "classic")):
        produce_spread(ctx, topic, 10)
        c = group_member(ctx, "migration", protocol)
        try:
            c.subscribe([topic])
            drain([c], 10 * harness.SPREAD_PARTITIONS).expect(10 * n, 10 * n + 10)
            kind = group_type(ctx, "migration")
            check(kind == protocol.upper(), f"with a {protocol} member the group is described as {kind}")
            kinds.append(kind)
        finally:
            c.close()
        expect_committed(ctx, "migration", topic, 10 * n + 10)
    return "group type " + " -> ".join(kinds)


def share_group(ctx: Context) -> str:
    """Two ShareConsumers of one share group (share.auto.offset.reset=earliest set on the group)
    together receive the topic's records, each once, acknowledging each poll's (commit_sync)."""
    a = admin(ctx)
    topic, group = create_topic(ctx, ctx.name("share")), ctx.name("share")
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    result(a.incremental_alter_configs([res]), "incremental_alter_configs")

    def earliest() -> bool:
        configs = result(a.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)]), "describe_configs")
        entry = next(iter(configs.values())).get("share.auto.offset.reset")
        return entry is not None and entry.value == "earliest"

    # Brokers apply a config change asynchronously (Kafka too): poll for the new value.
    wait_for(earliest, TIMEOUT_S, "describe_configs to show the group's share.auto.offset.reset=earliest")
    produce(ctx, topic, sample_records(harness.SHARE_RECORDS))
    members = [ShareConsumer({"bootstrap.servers": ctx.bootstrap, "group.id": group}) for _ in range(2)]
    by_offset: dict[int, int] = {}
    per_member = [0, 0]
    try:
        for c in members:
            c.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(by_offset) < harness.SHARE_RECORDS:
            check(time.monotonic() < deadline, f"received {len(by_offset)} of {harness.SHARE_RECORDS} records in {TIMEOUT_S}s")
            for i, c in enumerate(members):
                msgs = c.poll(0.1)
                for m in msgs:
                    check(m.error() is None, f"share consumer error: {m.error()}")
                    check(m.offset() not in by_offset,
                          f"offset {m.offset()} delivered twice (members {by_offset.get(m.offset())} and {i})")
                    by_offset[m.offset()] = i
                    per_member[i] += 1
                if len(msgs):
                    c.commit_sync(TIMEOUT_S)
        check(sorted(by_offset) == list(range(harness.SHARE_RECORDS)), "received offsets other than 0..99")
    finally:
        for c in members:
            c.close()
    return f"records received per member: {per_member[0]} + {per_member[1]}"


def fetch_from_follower(ctx: Context) -> str:
    entry = harness.follower_entry(ctx)
    topic = create_topic(ctx, ctx.name("follower"))
    produce(ctx, topic, sample_records(harness.FOLLOWER_RECORDS), acks="all")
    a = admin(ctx)
    p = a.list_topics(topic, timeout=10).topics[topic].partitions[0]
    follower = next(r for r in p.replicas if r != p.leader)
    c = consumer(ctx, "follower", **{"client.rack": entry["racks"][str(follower)], "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = [m.offset() for m in read(c, harness.FOLLOWER_RECORDS)]
    finally:
        c.close()
    check(got == list(range(harness.FOLLOWER_RECORDS)), f"offsets read {got[:3]}..., expected 0..99")
    return harness.served_by_follower(entry, topic, p.leader, follower)


SCENARIOS = {
    "metadata": metadata,
    "admin_topics": admin_topics,
    "produce_acks0": lambda ctx: round_trip(ctx, "acks0", acks=0),
    "produce_acks1": lambda ctx: round_trip(ctx, "acks1", acks=1),
    "produce_acksall": lambda ctx: round_trip(ctx, "acksall", acks="all"),
    "compression_gzip": lambda ctx: round_trip(ctx, "gzip", acks="all", **{"compression.type": "gzip"}),
    "compression_snappy": lambda ctx: round_trip(ctx, "snappy", acks="all", **{"compression.type": "snappy"}),
    "compression_lz4": lambda ctx: round_trip(ctx, "lz4", acks="all", **{"compression.type": "lz4"}),
    "compression_zstd": lambda ctx: round_trip(ctx, "zstd", acks="all", **{"compression.type": "zstd"}),
    "idempotent_produce": lambda ctx: round_trip(ctx, "idempotent", 1000, acks="all", **{"enable.idempotence": True}),
    "group_resume": group_resume,
    "two_groups": two_groups,
    "groups_describe_lag": groups_describe_lag,
    "offsets_for_times": offsets_for_times,
    "delete_records": delete_records,
    "empty_topic": empty_topic,
    "many_topics": many_topics,
    "regex_subscribe": regex_subscribe,
    "transactions_commit_abort": transactions_commit_abort,
    "read_committed": read_committed,
    "consume_transform_produce": consume_transform_produce,
    "group_kip848": group_kip848,
    "group_migration": group_migration,
    "share_group": share_group,
    "fetch_from_follower": fetch_from_follower,
    **{s: (lambda ctx, s=s: secure_round_trip(ctx, s)) for s in harness.SECURE_ROUND_TRIPS},
    "sasl_wrong_password": sasl_wrong_password,
}

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIOS))
