"""kafka-python (pure Python) in the compatibility matrix: KafkaProducer, KafkaConsumer and
KafkaAdminClient with default settings, except where the scenario names a setting. Its admin
client returns the broker's raw responses, so every per-topic/per-resource error code is checked
here."""

from __future__ import annotations

import logging
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from harness import Context, Record, check, compare_records, sample_records, wait_for  # noqa: E402

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic  # noqa: E402
from kafka.conn import BrokerConnection  # noqa: E402
from kafka.sasl.oauth import AbstractTokenProvider  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

TIMEOUT_S = 30


def servers(ctx: Context) -> list[str]:
    return ctx.bootstrap.split(",")


def admin(ctx: Context) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=servers(ctx))


def no_errors(response, what: str):
    """Fails naming the first non-zero error_code anywhere in a raw admin response."""
    def walk(node):
        if isinstance(node, dict):
            code = node.get("error_code")
            if code:
                raise harness.ScenarioFailed(f"{what}: error {code} {node.get('error_message') or ''} in {node}")
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for r in response if isinstance(response, list) else [response]:
        walk(r.to_object())
    return response


def create_topics(ctx: Context, names: list[str], partitions: int = 1) -> None:
    a = admin(ctx)
    try:
        no_errors(a.create_topics([NewTopic(n, partitions, ctx.replication) for n in names]), "create_topics")
        wait_for(lambda: leaders_known(a, names, partitions), TIMEOUT_S, "leaders of the created topics")
    finally:
        a.close()


def leaders_known(a: KafkaAdminClient, names: list[str], partitions: int) -> bool:
    listed = {t["topic"]: t for t in a.describe_topics(names)}  # one Metadata request for all
    return all(n in listed and listed[n]["error_code"] == 0 and len(listed[n]["partitions"]) == partitions
               and all(p["leader"] >= 0 for p in listed[n]["partitions"]) for n in names)


def create_topic(ctx: Context, name: str, partitions: int = 1) -> str:
    create_topics(ctx, [name], partitions)
    return name


def produce(ctx: Context, topic: str, records: list[Record], **conf) -> None:
    """Sends and waits for every record. acks defaults to all here (kafka-python's own default
    is 1): a scenario that then reads offsets needs its records committed, below the high
    watermark, which acks=1 does not wait for on a 3-node cluster (Kafka answers accordingly)."""
    conf.setdefault("acks", "all")
    p = KafkaProducer(bootstrap_servers=servers(ctx), **conf)
    try:
        futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp)
                   for r in records]
        p.flush(TIMEOUT_S)
        for i, f in enumerate(futures):
            try:
                f.get(timeout=TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - reported as the scenario's error
                raise harness.ScenarioFailed(f"record {i} not delivered: {e!r}") from e
    finally:
        p.close(timeout=TIMEOUT_S)


def acks0_unusable() -> None:
    raise harness.NotApplicable("kafka-python 2.3.3 never writes an acks=0 Produce request to the socket (seen on "
                                "the wire), so no record arrives at any broker; it fails the same against Kafka 4.1")


def consumer(ctx: Context, group: str | None, **conf) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=servers(ctx), group_id=ctx.name(group) if group else None, **conf)


def read(c: KafkaConsumer, count: int, timeout_s: float = TIMEOUT_S, poll_ms: int = 500) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        for batch in c.poll(timeout_ms=min(poll_ms, left_ms), max_records=count - len(got)).values():
            got.extend(batch)
    check(len(got) == count, f"read {len(got)} of {count} records in {timeout_s}s")
    return got


def read_from_beginning(ctx: Context, topic: str, count: int) -> list:
    c = consumer(ctx, None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return read(c, count)
    finally:
        c.close()


def as_record(m) -> Record:
    check(m.timestamp_type == 0, f"offset {m.offset}: timestamp type {m.timestamp_type}, not CreateTime")
    return Record(m.key, m.value, tuple(m.headers or ()), m.timestamp)


def round_trip(ctx: Context, name: str, count: int = 100, **conf) -> None:
    topic = create_topic(ctx, ctx.name(name))
    sent = sample_records(count)
    produce(ctx, topic, sent, **conf)
    got = read_from_beginning(ctx, topic, count)
    check([m.offset for m in got] == list(range(count)), "offsets are not 0..n-1 in order")
    compare_records(sent, [as_record(m) for m in got])


def metadata(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("metadata"))
    a = admin(ctx)
    try:
        cluster = a.describe_cluster()
        brokers = sorted(f"{b['host']}:{b['port']}" for b in cluster["brokers"])
        check(brokers == sorted(servers(ctx)), f"brokers {brokers}, expected {ctx.bootstrap}")
        t = a.describe_topics([topic])[0]
        check(t["error_code"] == 0 and len(t["partitions"]) == 1, f"topic {topic} described as {t}")
    finally:
        a.close()


def admin_topics(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("admin"), 3)
    a = admin(ctx)
    try:
        def partitions() -> int:
            return len(a.describe_topics([topic])[0]["partitions"])

        # Another broker may not know the topic yet (as with Kafka): poll.
        wait_for(lambda: partitions() == 3, TIMEOUT_S, "describe_topics to show 3 partitions")
        no_errors(a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"retention.ms": "3600000"})]), "alter_configs")

        def retention_ms() -> str | None:
            described = no_errors(a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]),
                                  "describe_configs")
            return {e[0]: e[1] for e in described[0].resources[0][4]}.get("retention.ms")

        # Brokers apply a config change asynchronously (Kafka too): poll for the new value.
        wait_for(lambda: retention_ms() == "3600000", TIMEOUT_S, "describe_configs to show retention.ms=3600000")
        no_errors(a.create_partitions({topic: NewPartitions(5)}), "create_partitions")
        wait_for(lambda: partitions() == 5, TIMEOUT_S, "5 partitions after create_partitions")
        no_errors(a.delete_topics([topic]), "delete_topics")
        wait_for(lambda: topic not in a.list_topics(), TIMEOUT_S, f"{topic} to be gone")
    finally:
        a.close()


def group_resume(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("resume"))
    produce(ctx, topic, sample_records(100))
    conf = {"auto_offset_reset": "earliest", "enable_auto_commit": False}
    first = consumer(ctx, "resume", **conf)
    first.subscribe([topic])
    got = read(first, 50)
    check([m.offset for m in got] == list(range(50)), "first consumer did not read offsets 0..49")
    first.commit({TopicPartition(topic, 0): OffsetAndMetadata(50, "", -1)})
    first.close()
    second = consumer(ctx, "resume", **conf)
    second.subscribe([topic])
    try:
        offsets = [m.offset for m in read(second, 50)]
        check(offsets == list(range(50, 100)), f"second consumer read offsets {offsets[:3]}..., expected 50..99")
        extra = [m.offset for b in second.poll(timeout_ms=1000).values() for m in b]
        check(not extra, f"duplicates after 100: offsets {extra}")
    finally:
        second.close()


def two_groups(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("twogroups"))
    produce(ctx, topic, sample_records(100))

    def drain(group: str) -> list[int]:
        c = consumer(ctx, group, auto_offset_reset="earliest")
        try:
            c.subscribe([topic])
            return [m.offset for m in read(c, 100)]
        finally:
            c.close()

    harness.each_group_reads_all(("group-a", "group-b"), drain, 100)


def groups_describe_lag(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("lag"))
    produce(ctx, topic, sample_records(100))
    group = ctx.name("lag")
    c = consumer(ctx, "lag", auto_offset_reset="earliest", enable_auto_commit=False)
    a = admin(ctx)
    tp = TopicPartition(topic, 0)
    try:
        c.subscribe([topic])
        read(c, 60)
        c.commit({tp: OffsetAndMetadata(60, "", -1)})
        listed = [g[0] for g in a.list_consumer_groups()]
        check(group in listed, f"list_consumer_groups lacks {group}")
        desc = a.describe_consumer_groups([group])[0]
        check(desc.state == "Stable", f"group state {desc.state}, expected Stable")
        check(len(desc.members) == 1, f"{len(desc.members)} members, expected 1")
        assigned = desc.members[0].member_assignment.assignment
        check([(t, list(ps)) for t, ps in assigned] == [(topic, [0])], f"member assignment {assigned}")
        committed = a.list_consumer_group_offsets(group)
        check(committed.get(tp) is not None and committed[tp].offset == 60, f"committed offsets {committed}")
        lag = c.end_offsets([tp])[tp] - committed[tp].offset
        check(lag == 40, f"lag {lag}, expected 40")
    finally:
        c.close()
        a.close()


def offsets_for_times(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("times"))
    t0 = harness.now_ms() - 60_000
    produce(ctx, topic, [Record(b"k", b"v", (), t0 + i * 1000) for i in range(3)])
    c = consumer(ctx, None)
    tp = TopicPartition(topic, 0)
    try:
        def lookup(ts: int):
            found = c.offsets_for_times({tp: ts})[tp]
            return None if found is None else found.offset

        got = [lookup(t0 + 500), lookup(t0 + 2000), lookup(t0 + 3000)]
        check(got == [1, 2, None], f"offsets for t0+500, t0+2000, t0+3000: {got}, expected [1, 2, None]")
    finally:
        c.close()


def delete_records(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("delrec"))
    produce(ctx, topic, sample_records(100))
    tp = TopicPartition(topic, 0)
    a = admin(ctx)
    try:
        deleted = a.delete_records({tp: 30})
        low = deleted[tp]["low_watermark"]
        check(low == 30, f"delete_records answered low watermark {low}")
    finally:
        a.close()
    c = consumer(ctx, None)
    try:
        earliest = c.beginning_offsets([tp])[tp]
        check(earliest == 30, f"earliest offset {earliest} after delete_records, expected 30")
    finally:
        c.close()
    first = read_from_beginning(ctx, topic, 70)
    check(first[0].offset == 30, f"consuming from the beginning starts at {first[0].offset}")


def empty_topic(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("empty"))
    tp = TopicPartition(topic, 0)
    readers = {"beginning": consumer(ctx, None), "end": consumer(ctx, None)}
    try:
        for name, c in readers.items():
            c.assign([tp])
            (c.seek_to_beginning if name == "beginning" else c.seek_to_end)(tp)
            got = [m.offset for b in c.poll(timeout_ms=1000).values() for m in b]
            check(not got, f"consumer from the {name} got offsets {got} from an empty topic")
            # position() resolves the pending reset with ListOffsets: the consumer now sits at 0.
            check(c.position(tp, timeout_ms=TIMEOUT_S * 1000) == 0, f"consumer from the {name} not at 0")
        produce(ctx, topic, [Record(b"k", b"only", (), harness.now_ms())])
        for name, c in readers.items():
            got = read(c, 1)
            check(got[0].value == b"only", f"consumer from the {name} read {got[0].value!r}")
    finally:
        for c in readers.values():
            c.close()


def many_topics(ctx: Context) -> None:
    names = [ctx.name(f"many-{i:03d}") for i in range(200)]
    create_topics(ctx, names)  # one CreateTopics request, then one Metadata request for all 200
    a = admin(ctx)
    try:
        no_errors(a.delete_topics(names), "delete_topics")
    finally:
        a.close()


def regex_subscribe(ctx: Context) -> None:
    c = consumer(ctx, "regex", auto_offset_reset="earliest", metadata_max_age_ms=2000)
    topic = ctx.name("regex-late")
    try:
        c.subscribe(pattern=f"^{ctx.prefix}regex-.*")
        early = [m.offset for b in c.poll(timeout_ms=1000).values() for m in b]
        check(not early, f"records {early} before any matching topic exists")
        create_topic(ctx, topic)
        produce(ctx, topic, [Record(b"k", b"late", (), harness.now_ms())])
        # One long poll, not read()'s half-second ones: kafka-python 2.3.3 drops a rebalance
        # whose JoinGroup goes out as a poll's time runs out. Its ConsumerCoordinator.need_rejoin
        # turns false once the request carries the new subscription, so the SyncGroup answer is
        # never applied and the consumer sits with no partitions (seen in its debug log: the
        # answer arrives, "Updated partition assignment" never follows).
        got = read(c, 1, poll_ms=TIMEOUT_S * 1000)
        check((got[0].topic, got[0].value) == (topic, b"late"), f"read {got[0].topic} {got[0].value!r}")
    finally:
        c.close()


# --- the security rows ---------------------------------------------------------------------

def secured_kwargs(login: dict, **extra) -> dict:
    """kafka-python's keyword arguments for a --security login."""
    kw = {"bootstrap_servers": login["bootstrap"].split(","), "security_protocol": login["security_protocol"]}
    if "ca" in login:
        kw["ssl_cafile"] = login["ca"]
    if "client_cert" in login:
        kw["ssl_certfile"] = login["client_cert"]
        kw["ssl_keyfile"] = login["client_key"]
    mechanism = login.get("sasl_mechanism")
    if mechanism:
        kw["sasl_mechanism"] = mechanism
    if mechanism == "OAUTHBEARER":
        kw["sasl_oauth_token_provider"] = StaticToken(login["token"])
    elif mechanism:
        kw["sasl_plain_username"] = login["username"]
        kw["sasl_plain_password"] = login["password"]
    return {**kw, **extra}


class StaticToken(AbstractTokenProvider):
    """The signed JWT of the --security file, as kafka-python's OAUTHBEARER token provider."""

    def __init__(self, token: str):
        super().__init__()
        self._token = token

    def token(self) -> str:
        return self._token


def secure_round_trip(ctx: Context, scenario: str) -> None:
    login = ctx.login(scenario)
    topic = ctx.name(scenario.replace("_", "-"))
    a = KafkaAdminClient(**secured_kwargs(login))
    try:
        no_errors(a.create_topics([NewTopic(topic, 1, ctx.replication)]), "create_topics")
        wait_for(lambda: leaders_known(a, [topic], 1), TIMEOUT_S, f"leaders of {topic}")
    finally:
        a.close()
    values = harness.secure_values(topic)
    p = KafkaProducer(**secured_kwargs(login, acks="all"))
    try:
        futures = [p.send(topic, value=v) for v in values]
        p.flush(TIMEOUT_S)
        for i, f in enumerate(futures):
            try:
                f.get(timeout=TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - reported as the scenario's error
                raise harness.ScenarioFailed(f"record {i} not delivered: {e!r}") from e
    finally:
        p.close(timeout=TIMEOUT_S)
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(**secured_kwargs(login, group_id=ctx.name(f"{scenario}-group"), auto_offset_reset="earliest",
                                       enable_auto_commit=False))
    try:
        c.subscribe([topic])
        got = read(c, len(values))
        harness.check_values(values, [m.value for m in got])
        c.commit()
        committed = c.committed(tp)
        check(committed == len(values), f"committed offset {committed}, expected {len(values)}")
    finally:
        c.close()


class ClosedWith(logging.Handler):
    """kafka-python reports why it closed a connection only in its log (`<conn>: Closing
    connection. <error>`, at ERROR when there is an error): the errors it closed `conn` with."""

    def __init__(self, conn: BrokerConnection):
        super().__init__(logging.ERROR)
        self.conn = conn
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "Closing connection" in record.msg and record.args and record.args[0] is self.conn:
            self.errors.append(str(record.args[1]))


def sasl_wrong_password(ctx: Context) -> str:
    """A connection to the bootstrap broker with the --security file's SCRAM-SHA-512 login and a
    wrong password: kafka-python must close it with SaslAuthenticationFailedError, and not log in."""
    login = ctx.login("sasl_wrong_password")
    host, port = login["bootstrap"].split(",")[0].rsplit(":", 1)
    kwargs = secured_kwargs(login)
    del kwargs["bootstrap_servers"]
    conn = BrokerConnection(host, int(port), socket.AF_INET, **kwargs)
    closed = ClosedWith(conn)
    log = logging.getLogger("kafka.conn")
    log.addHandler(closed)
    try:
        check(not conn.connect_blocking(timeout=TIMEOUT_S), "logged in with a wrong password")
        check(closed.errors, "the connection failed without an error")
        return harness.refused_as_expected(closed.errors[0])
    finally:
        log.removeHandler(closed)
        conn.close()


# --- transactions ------------------------------------------------------------------------------

def tx_producer(ctx: Context, name: str) -> KafkaProducer:
    p = KafkaProducer(bootstrap_servers=servers(ctx), transactional_id=ctx.name(name))
    p.init_transactions()
    return p


def tx_send(p: KafkaProducer, topic: str, values: list[bytes]) -> None:
    """Sends `values` in the open transaction and waits for every acknowledgement (the rows need
    an aborted transaction's records in the log)."""
    futures = [p.send(topic, value=v) for v in values]
    p.flush(TIMEOUT_S)
    for i, f in enumerate(futures):
        try:
            f.get(timeout=TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - reported as the scenario's error
            raise harness.ScenarioFailed(f"transactional record {i} not delivered: {e!r}") from e


def isolated_reader(ctx: Context, topic: str, isolation: str) -> KafkaConsumer:
    c = consumer(ctx, None, enable_auto_commit=False, isolation_level=isolation)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    return c


def read_isolated(ctx: Context, topic: str, isolation: str, count: int) -> list[bytes]:
    """The values an `isolation` consumer reads from the beginning: exactly `count`, then nothing
    more until its position reaches its end offset (past the transaction markers)."""
    c = isolated_reader(ctx, topic, isolation)
    tp = TopicPartition(topic, 0)
    try:
        got = [m.value for m in read(c, count)]
        end = c.end_offsets([tp])[tp]
        deadline = time.monotonic() + TIMEOUT_S
        while c.position(tp) < end:
            check(time.monotonic() < deadline, f"{isolation}: position {c.position(tp)} did not reach {end}")
            extra = [m.offset for batch in c.poll(timeout_ms=200).values() for m in batch]
            check(not extra, f"{isolation}: extra records at offsets {extra}")
        return got
    finally:
        c.close()


def transactions_commit_abort(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("tx-commit-abort"))
    p = tx_producer(ctx, "tx-commit-abort")
    first, aborted, second = (harness.tx_values("c1", harness.TX_COMMITTED_1), harness.tx_values("a", harness.TX_ABORTED),
                              harness.tx_values("c2", harness.TX_COMMITTED_2))
    try:
        for values, commit in ((first, True), (aborted, False), (second, True)):
            p.begin_transaction()
            tx_send(p, topic, values)
            p.commit_transaction() if commit else p.abort_transaction()
    finally:
        p.close(timeout=TIMEOUT_S)
    harness.check_values(first + second, read_isolated(ctx, topic, "read_committed", len(first + second)))
    harness.check_values(first + aborted + second,
                         read_isolated(ctx, topic, "read_uncommitted", len(first + aborted + second)))


def read_committed(ctx: Context) -> None:
    topic = create_topic(ctx, ctx.name("read-committed"))
    p = tx_producer(ctx, "read-committed")
    before, open_tx = harness.tx_values("before", 5), harness.tx_values("open", 5)
    tp = TopicPartition(topic, 0)
    c = None
    try:
        p.begin_transaction()
        tx_send(p, topic, before)
        p.commit_transaction()
        p.begin_transaction()
        tx_send(p, topic, open_tx)
        c = isolated_reader(ctx, topic, "read_committed")
        harness.check_values(before, [m.value for m in read(c, len(before))])
        lso = c.end_offsets([tp])[tp]
        check(lso == len(before) + 1, f"read_committed end offset {lso} with a transaction open, expected "
                                      f"{len(before) + 1} (the last stable offset)")
        watch_until = time.monotonic() + harness.OPEN_TX_WATCH_S
        while time.monotonic() < watch_until:
            early = [m.value for batch in c.poll(timeout_ms=200).values() for m in batch]
            check(not early, f"delivered {early} of the open transaction")
        p.commit_transaction()
        harness.check_values(open_tx, [m.value for m in read(c, len(open_tx))])
    finally:
        if c is not None:
            c.close()
        p.close(timeout=TIMEOUT_S)


def consume_transform_produce(ctx: Context) -> None:
    source = create_topic(ctx, ctx.name("ctp-in"))
    sink = create_topic(ctx, ctx.name("ctp-out"))
    group = ctx.name("ctp")
    inputs = harness.tx_values("in", harness.CTP_INPUTS + harness.CTP_ABORTED)
    plain = [Record(None, v, (), harness.now_ms()) for v in inputs]
    produce(ctx, source, plain[:harness.CTP_INPUTS])
    c = consumer(ctx, "ctp", auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed")
    p = tx_producer(ctx, "ctp")
    tp = TopicPartition(source, 0)

    def transaction(count: int, commit: bool) -> None:
        got = read(c, count)
        p.begin_transaction()
        tx_send(p, sink, [b"out-" + m.value for m in got])
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(c.position(tp), "", -1)}, group)
        p.commit_transaction() if commit else p.abort_transaction()

    def committed() -> int | None:
        return c.committed(tp)

    try:
        c.subscribe([source])
        for _ in range(harness.CTP_INPUTS // harness.CTP_TX_SIZE):
            transaction(harness.CTP_TX_SIZE, commit=True)
        # kafka-python's OffsetFetch has no require_stable: a transactional commit shows once
        # the coordinator has written the transaction's markers, after commit_transaction returns.
        wait_for(lambda: committed() == harness.CTP_INPUTS, TIMEOUT_S,
                 f"the committed offset to reach {harness.CTP_INPUTS}")
        produce(ctx, source, plain[harness.CTP_INPUTS:])
        transaction(harness.CTP_ABORTED, commit=False)
        # Once a read_committed reader passes the abort marker in the output, the abort is
        # written: the aborted offsets must not have become the group's.
        harness.check_values([b"out-" + v for v in inputs[:harness.CTP_INPUTS]],
                             read_isolated(ctx, sink, "read_committed", harness.CTP_INPUTS))
        check(committed() == harness.CTP_INPUTS, f"committed offset {committed()} after an aborted transaction, "
                                                 f"expected {harness.CTP_INPUTS}")
    finally:
        c.close()
        p.close(timeout=TIMEOUT_S)


SCENARIOS = {
    "metadata": metadata,
    "admin_topics": admin_topics,
    "produce_acks0": lambda ctx: acks0_unusable(),
    "produce_acks1": lambda ctx: round_trip(ctx, "acks1", acks=1),
    "produce_acksall": lambda ctx: round_trip(ctx, "acksall", acks="all"),
    "compression_gzip": lambda ctx: round_trip(ctx, "gzip", acks="all", compression_type="gzip"),
    "compression_snappy": lambda ctx: round_trip(ctx, "snappy", acks="all", compression_type="snappy"),
    "compression_lz4": lambda ctx: round_trip(ctx, "lz4", acks="all", compression_type="lz4"),
    "compression_zstd": lambda ctx: round_trip(ctx, "zstd", acks="all", compression_type="zstd"),
    "idempotent_produce": lambda ctx: round_trip(ctx, "idempotent", 1000, acks="all", enable_idempotence=True),
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
    **{s: (lambda ctx, s=s: secure_round_trip(ctx, s)) for s in harness.SECURE_ROUND_TRIPS},
    "sasl_wrong_password": sasl_wrong_password,
}
NOT_APPLICABLE: dict[str, str] = {
    **{s: "kafka-python 2.3.3 has only the classic group protocol (JoinGroup/SyncGroup): no group.protocol=consumer, "
          "no ConsumerGroupHeartbeat (KIP-848)" for s in ("group_kip848", "group_migration")},
    "share_group": "kafka-python 2.3.3 has no share consumer (KIP-932)",
    "fetch_from_follower": "kafka-python 2.3.3 has no client.rack setting: it sends Fetch at most v8, without the "
                           "rack_id of v11 (KIP-392), so a consumer always reads from the leader",
}

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIOS, NOT_APPLICABLE))
