"""Kafka transactions (KIP-98) with real clients: confluent-kafka (librdkafka), kafka-python,
Kafka's own Java tools (kafka-transactions, TransactionalMessageCopier, VerifiableConsumer).

Each test runs against a single node and against a 3-node cluster (the module's `brokers`
fixture, started once per cluster type). What is proven: committed records are delivered to
read_committed consumers and aborted ones are not; an open transaction holds read_committed
consumers at the last stable offset until it ends; consume-transform-produce commits its
consumed offsets atomically with its output; a second producer with the same transactional.id
fences the first; the coordinator refuses a timeout above transaction.max.timeout.ms; and the
admin tool lists, describes and aborts transactions.

Validated against Apache Kafka 4.1:
    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py .venv/bin/python -m pytest integration-tests/python/test_transactions.py
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import stop_nodes
from sluice_node import SluiceNode, start_cluster
from test_java_cli import kafka_tool

TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"


@dataclass
class Brokers:
    nodes: list[SluiceNode]
    admin: AdminClient

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def size(self) -> int:
        return len(self.nodes)


@pytest.fixture(scope="module", params=["single", "three"])
def brokers(request):
    """One node, then a 3-node cluster, each shared by every test of the module (topics and
    transactional ids are unique per test); on a failure their logs are kept."""
    failed_before = request.session.testsfailed
    nodes = [SluiceNode().start()] if request.param == "single" else start_cluster(3)
    # One AdminClient for the cluster's lifetime: a client collected mid-request fails its futures.
    admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in nodes), "log_level": 3})
    yield Brokers(nodes, admin)
    stop_nodes(request, nodes, failed=request.session.testsfailed > failed_before)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create_topic(b: Brokers, name: str, partitions: int = 1) -> str:
    b.admin.create_topics([NewTopic(name, partitions, b.size)], request_timeout=20)[name].result(timeout=30)
    return name


def tx_producer(b: Brokers, transactional_id: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": b.bootstrap, "transactional.id": transactional_id,
                     "log_level": 3, **extra})


def consumer(b: Brokers, isolation: str, group: str | None = None, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": b.bootstrap, "group.id": group or unique("tx-reader"),
                     "isolation.level": isolation, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "log_level": 3, **extra})


def high_watermarks(b: Brokers, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark (log end, markers included), as a read_uncommitted
    ListOffsets reports it."""
    c = consumer(b, "read_uncommitted")
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)}
    finally:
        c.close()


def await_high_watermark(b: Brokers, topic: str, expected: int, timeout: float = 30.0) -> None:
    """Waits until partition 0's high watermark is `expected`: the coordinator writes a
    transaction's markers after EndTxn has answered, so the last one lands a moment later."""
    deadline = time.monotonic() + timeout
    while (end := high_watermarks(b, topic, 1)[0]) != expected:
        assert end < expected, f"high watermark {end}, expected {expected}"
        assert time.monotonic() < deadline, f"high watermark {end} after {timeout}s, expected {expected}"
        time.sleep(0.1)


def read_until(c: Consumer, topic: str, ends: dict[int, int], timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """Polls the assigned consumer until its position on every partition of `ends` has reached
    that offset; returns the (partition, offset, value) records it received on the way."""
    got = []
    tps = [TopicPartition(topic, p) for p in ends]
    deadline = time.monotonic() + timeout
    while True:
        positions = {tp.partition: tp.offset for tp in c.position(tps)}
        if all(positions[p] >= end for p, end in ends.items()):
            return got
        assert time.monotonic() < deadline, (
            f"positions {positions} did not reach {ends} in {timeout}s; received {len(got)} records")
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append((m.partition(), m.offset(), m.value()))


def read_all(b: Brokers, topic: str, isolation: str, partitions: int = 1) -> list[tuple[int, int, bytes]]:
    """Every record of `topic` an `isolation` consumer receives from the beginning up to the
    current high watermark (which it must reach: every transaction has ended)."""
    ends = high_watermarks(b, topic, partitions)
    c = consumer(b, isolation)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        return read_until(c, topic, ends)
    finally:
        c.close()


def values(records: list[tuple[int, int, bytes]]) -> list[bytes]:
    return [v for _, _, v in records]


def produce_values(p: Producer, topic: str, vals: list[bytes], partition: int | None = None) -> None:
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for v in vals:
        if partition is None:
            p.produce(topic, value=v, on_delivery=on_delivery)
        else:
            p.produce(topic, value=v, partition=partition, on_delivery=on_delivery)
    assert p.flush(30) == 0, "records still queued after 30 s"
    assert not errors, errors[:3]


# --- confluent-kafka (librdkafka) -------------------------------------------------------------

def test_read_committed_sees_committed_transactions_only_and_read_uncommitted_sees_both(brokers):
    topic = create_topic(brokers, unique("tx-commit-abort"))
    p = tx_producer(brokers, unique("tx-commit-abort"))
    p.init_transactions(60)
    committed_1 = [b"c1-%d" % i for i in range(10)]
    aborted = [b"a-%d" % i for i in range(10)]
    committed_2 = [b"c2-%d" % i for i in range(5)]
    for batch, commit in ((committed_1, True), (aborted, False), (committed_2, True)):
        p.begin_transaction()
        produce_values(p, topic, batch)  # in the log before the transaction ends
        p.commit_transaction(30) if commit else p.abort_transaction(30)

    # 25 records and three control records (a marker after each transaction).
    end = 28
    await_high_watermark(brokers, topic, end)

    committed = read_all(brokers, topic, "read_committed")
    assert values(committed) == committed_1 + committed_2
    assert [o for _, o, _ in committed] == list(range(0, 10)) + list(range(22, 27))

    uncommitted = read_all(brokers, topic, "read_uncommitted")
    assert values(uncommitted) == committed_1 + aborted + committed_2
    assert [o for _, o, _ in uncommitted] == list(range(0, 10)) + list(range(11, 21)) + list(range(22, 27))

    # Nothing is open: the read_committed end (the last stable offset) is the log end, and a
    # read_committed consumer's position moves past the final marker to it (lag 0).
    c = consumer(brokers, "read_committed")
    try:
        tp = TopicPartition(topic, 0)
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, end)
        c.assign([TopicPartition(topic, 0, 0)])
        assert len(read_until(c, topic, {0: end})) == 15
        assert c.position([tp])[0].offset == end
    finally:
        c.close()


def test_open_transaction_holds_read_committed_at_the_last_stable_offset_until_commit(brokers):
    topic = create_topic(brokers, unique("tx-lso"))
    p = tx_producer(brokers, unique("tx-lso"))
    p.init_transactions(60)
    p.begin_transaction()
    produce_values(p, topic, [b"before-%d" % i for i in range(3)])
    p.commit_transaction(30)  # offsets 0-2, marker 3
    p.begin_transaction()
    open_values = [b"open-%d" % i for i in range(4)]
    produce_values(p, topic, open_values)  # offsets 4-7, in the log, not yet committed

    tp = TopicPartition(topic, 0)
    # A read_uncommitted reader gets the open records: they are in the log and fetchable.
    assert values(read_all(brokers, topic, "read_uncommitted"))[3:] == open_values
    reader = consumer(brokers, "read_committed")
    try:
        # The read_committed end is the last stable offset: the open transaction's first offset.
        assert reader.get_watermark_offsets(tp, timeout=10, cached=False)[1] == 4
        reader.assign([TopicPartition(topic, 0, 0)])
        assert values(read_until(reader, topic, {0: 4})) == [b"before-%d" % i for i in range(3)]
        # Held at the LSO: while the transaction is open, no record of it is delivered, however
        # long the consumer fetches (a bounded look, since we assert an absence).
        look_until = time.monotonic() + 3
        while time.monotonic() < look_until:
            m = reader.poll(0.2)
            assert m is None or m.error() is not None, f"delivered {m.value()!r} at {m.offset()} before commit"
        assert reader.position([tp])[0].offset == 4

        p.commit_transaction(30)  # marker at 8
        assert values(read_until(reader, topic, {0: 9})) == open_values
        assert reader.get_watermark_offsets(tp, timeout=10, cached=False)[1] == 9
    finally:
        reader.close()


def test_consume_transform_produce_commits_output_and_offsets_together_and_abort_changes_neither(brokers):
    source = create_topic(brokers, unique("ctp-in"), partitions=2)
    sink = create_topic(brokers, unique("ctp-out"))
    group = unique("ctp-group")
    plain = Producer({"bootstrap.servers": brokers.bootstrap, "log_level": 3})
    produce_values(plain, source, [b"%d" % i for i in range(20)], partition=0)
    produce_values(plain, source, [b"%d" % i for i in range(20, 40)], partition=1)

    c = consumer(brokers, "read_committed", group=group)
    p = tx_producer(brokers, unique("ctp-tx"))
    p.init_transactions(60)
    inputs = [TopicPartition(source, part) for part in (0, 1)]

    def transform_round(expected: int, commit: bool) -> None:
        """Consumes `expected` records, produces each transformed to the sink and sends the
        consumed offsets, all in one transaction, then commits or aborts it."""
        got = []
        deadline = time.monotonic() + 60
        while len(got) < expected:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {expected}"
            for m in c.consume(expected - len(got), 0.5):
                assert m.error() is None, m.error()
                got.append(m)
        p.begin_transaction()
        for m in got:
            p.produce(sink, value=b"out-" + m.value())
        # In the log before the transaction ends (an abort would purge records still queued).
        assert p.flush(30) == 0
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)

    def committed() -> dict[int, int]:
        return {tp.partition: tp.offset for tp in c.committed(inputs, timeout=15)}

    try:
        c.subscribe([source])
        for _ in range(4):
            transform_round(10, commit=True)
        assert committed() == {0: 20, 1: 20}
        out = values(read_all(brokers, sink, "read_committed"))
        assert sorted(out) == sorted(b"out-%d" % i for i in range(40)), "each input exactly once"

        produce_values(plain, source, [b"%d" % i for i in range(40, 45)], partition=0)
        produce_values(plain, source, [b"%d" % i for i in range(45, 50)], partition=1)
        transform_round(10, commit=False)
        assert committed() == {0: 20, 1: 20}, "an aborted transaction's offsets must not be committed"
        assert sorted(values(read_all(brokers, sink, "read_committed"))) == sorted(out)

        # Retry from the committed offsets, as a restarted application would.
        for tp in inputs:
            c.seek(TopicPartition(source, tp.partition, 20))
        transform_round(10, commit=True)
        assert committed() == {0: 25, 1: 25}
        assert committed() == high_watermarks(brokers, source, 2)
        final = values(read_all(brokers, sink, "read_committed"))
        assert sorted(final) == sorted(b"out-%d" % i for i in range(50)), "each input exactly once"
        assert len(values(read_all(brokers, sink, "read_uncommitted"))) == 60, "the aborted 10 are in the log"
    finally:
        c.close()


def test_second_producer_with_the_same_transactional_id_fences_the_first(brokers):
    topic = create_topic(brokers, unique("tx-fence"))
    tid = unique("tx-fence")
    first = tx_producer(brokers, tid)
    first.init_transactions(60)
    first.begin_transaction()
    produce_values(first, topic, [b"first-open"])

    second = tx_producer(brokers, tid)
    second.init_transactions(60)  # bumps the epoch and aborts the first's open transaction

    with pytest.raises(KafkaException) as fenced:
        first.produce(topic, value=b"first-late")
        first.commit_transaction(30)
    err = fenced.value.args[0]
    # Kafka 4.1 answers the stale epoch's Produce with INVALID_PRODUCER_EPOCH (PRODUCER_FENCED
    # from the coordinator would do the same): librdkafka raises its fatal _FENCED, "This
    # instance has been fenced by a newer instance".
    assert err.code() == KafkaError._FENCED and err.fatal(), err

    second.begin_transaction()
    produce_values(second, topic, [b"second"])
    second.commit_transaction(30)
    assert values(read_all(brokers, topic, "read_committed")) == [b"second"]


def test_transaction_timeout_above_the_broker_maximum_fails_init_transactions(brokers):
    # transaction.max.timeout.ms defaults to 900000 (15 minutes).
    p = tx_producer(brokers, unique("tx-too-long"), **{"transaction.timeout.ms": 900_001})
    with pytest.raises(KafkaException) as refused:
        p.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, refused.value


# --- kafka-python -------------------------------------------------------------------------------

def test_kafka_python_transactional_producer_commit_and_abort_with_read_committed_consumer(brokers):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpPartition

    topic = create_topic(brokers, unique("kp-tx"))
    p = KafkaProducer(bootstrap_servers=brokers.bootstrap, transactional_id=unique("kp-tx"))
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send(topic, value=b"kept-%d" % i)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(5):
            p.send(topic, value=b"dropped-%d" % i)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)

    end = 12  # 10 records and 2 markers
    await_high_watermark(brokers, topic, end)
    for isolation, expected in (("read_committed", [b"kept-%d" % i for i in range(5)]),
                                ("read_uncommitted", [b"kept-%d" % i for i in range(5)]
                                 + [b"dropped-%d" % i for i in range(5)])):
        c = KafkaConsumer(bootstrap_servers=brokers.bootstrap, group_id=None, isolation_level=isolation,
                          auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            tp = KpPartition(topic, 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            got = []
            deadline = time.monotonic() + 30
            while c.position(tp) < end:
                assert time.monotonic() < deadline, f"{isolation}: position {c.position(tp)} of {end}, got {got}"
                for records in c.poll(timeout_ms=200).values():
                    got += [r.value for r in records]
            assert got == expected, isolation
            if isolation == "read_committed":
                assert c.end_offsets([tp])[tp] == end, "the last stable offset is the log end"
        finally:
            c.close()


# --- Kafka's Java tools ---------------------------------------------------------------------

def tool_rows(out: str) -> list[dict[str, str]]:
    """The tool's whitespace-separated table (a header line, then rows) as dicts."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines, "no output"
    header = lines[0]
    return [dict(zip(header, row)) for row in lines[1:]]


def test_kafka_transactions_tool_lists_describes_finds_and_aborts_an_open_transaction(brokers):
    topic = create_topic(brokers, unique("tool-tx"))
    tid = unique("tool-tx")
    p = tx_producer(brokers, tid, **{"transaction.timeout.ms": 120_000})
    p.init_transactions(60)
    p.begin_transaction()
    produce_values(p, topic, [b"open-%d" % i for i in range(3)])  # offsets 0-2, open
    tool = ("--bootstrap-server", brokers.bootstrap)

    listed = {r["TransactionalId"]: r for r in tool_rows(kafka_tool(TRANSACTIONS_TOOL, *tool, "list"))}
    assert tid in listed and listed[tid]["TransactionState"] == "Ongoing", listed

    described = tool_rows(kafka_tool(TRANSACTIONS_TOOL, *tool, "describe", "--transactional-id", tid))
    assert len(described) == 1, described
    assert described[0]["TransactionState"] == "Ongoing", described
    assert described[0]["TopicPartitions"] == f"{topic}-0", described
    producer_id = described[0]["ProducerId"]

    producers = tool_rows(kafka_tool(TRANSACTIONS_TOOL, *tool, "describe-producers", "--topic", topic,
                                     "--partition", "0"))
    mine = [r for r in producers if r["ProducerId"] == producer_id]
    assert len(mine) == 1 and mine[0]["CurrentTransactionStartOffset"] == "0", producers

    # Leader of the partition: find-hanging looks at the partitions a broker hosts.
    leader = brokers.admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    hanging = kafka_tool(TRANSACTIONS_TOOL, *tool, "find-hanging", "--broker-id", str(leader))
    assert "Topic" in hanging.splitlines()[0], hanging
    # Open for seconds, well under the 15-minute maximum timeout: not hanging.
    assert not [r for r in tool_rows(hanging) if r.get("Topic") == topic], hanging

    kafka_tool(TRANSACTIONS_TOOL, *tool, "abort", "--topic", topic, "--partition", "0",
               "--producer-id", producer_id, "--producer-epoch", mine[0]["ProducerEpoch"],
               "--coordinator-epoch", mine[0]["LatestCoordinatorEpoch"])
    # The abort marker ends the transaction at the partition: a read_committed reader passes it
    # to the log end and receives none of its records.
    await_high_watermark(brokers, topic, 4)  # three records and the abort marker
    assert read_all(brokers, topic, "read_committed") == []
    producers = tool_rows(kafka_tool(TRANSACTIONS_TOOL, *tool, "describe-producers", "--topic", topic,
                                     "--partition", "0"))
    assert all(r["CurrentTransactionStartOffset"] == "None" for r in producers), producers


def test_java_transactional_message_copier_copies_exactly_n_with_random_aborts(brokers, tmp_path):
    """Kafka's TransactionalMessageCopier (the Java producer and consumer, in a consumer group,
    transactions of 10 with random aborts) copies N records; a read_committed VerifiableConsumer
    (Java) and librdkafka both find exactly the N inputs in the output, each once."""
    n = 200
    source = create_topic(brokers, unique("java-copy-in"))
    sink = create_topic(brokers, unique("java-copy-out"))
    plain = Producer({"bootstrap.servers": brokers.bootstrap, "log_level": 3})
    produce_values(plain, source, [b"%d" % i for i in range(n)])

    out = kafka_tool("org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", brokers.bootstrap,
                     "--transactional-id", unique("java-copier"), "--consumer-group", unique("java-copy-g"),
                     "--input-topic", source, "--input-partition", "0", "--output-topic", sink,
                     "--max-messages", str(n), "--transaction-size", "10", "--enable-random-aborts",
                     "--use-group-metadata", timeout=120)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    last = events[-1] if events else {}
    assert (last.get("stage"), last.get("totalProcessed"), last.get("remaining")) == ("ShutdownComplete", n, 0), out

    config = tmp_path / "consumer.properties"
    config.write_text("isolation.level=read_committed\n")
    out = kafka_tool("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", brokers.bootstrap,
                     "--topic", sink, "--group-id", unique("java-verify-g"), "--max-messages", str(n),
                     "--reset-policy", "earliest", "--verbose", "--command-config", str(config), timeout=120)
    consumed = [e for e in map(json.loads, filter(lambda l: l.startswith("{"), out.splitlines()))
                if e["name"] == "record_data"]
    assert sorted(int(e["value"]) for e in consumed) == list(range(n)), "the Java read_committed consumer"

    committed = values(read_all(brokers, sink, "read_committed"))
    assert sorted(int(v) for v in committed) == list(range(n)), "exactly the N inputs, each once"
    # The log holds the randomly aborted transactions' records too (their number is random).
    assert len(read_all(brokers, sink, "read_uncommitted")) >= n


def test_java_producer_perf_in_100ms_transactions_pipelines_over_many_partitions(brokers):
    """Kafka's ProducerPerformance with a transactional id: the Java producer pipelines up to
    five requests per connection across six partitions and starts a transaction every 100 ms,
    so each new transaction's first requests wait for the leaders to verify them with the
    coordinator (KIP-890) while later requests on the same connection write to partitions
    already in the transaction. Every batch must still be appended in the order sent (no
    OUT_OF_ORDER_SEQUENCE_NUMBER), and read_committed sees every record once."""
    n, partitions = 30_000, 6
    topic = create_topic(brokers, unique("java-perf-tx"), partitions)
    out = kafka_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                     "--num-records", str(n), "--record-size", "2048", "--throughput", "-1",
                     "--transactional-id", unique("java-perf"), "--transaction-duration-ms", "100",
                     "--bootstrap-server", brokers.bootstrap, "--command-property", "acks=all", timeout=120)
    assert f"{n} records sent" in out.splitlines()[-1], out
    committed = read_all(brokers, topic, "read_committed", partitions)
    assert len(committed) == n, f"{len(committed)} committed records read, {n} sent"
