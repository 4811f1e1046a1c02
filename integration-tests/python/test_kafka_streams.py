"""A real Kafka Streams application (kafka-streams 4.4 from Maven Central) with
processing.guarantee=exactly_once_v2 on a 3-node cluster, while its brokers and its own
instances are killed with SIGKILL.

The application (integration-tests/java/streams/.../WordCount.java, built into .java-streams by
scripts/java-streams.sh) counts words: input lines are split, re-keyed through a repartition
topic, counted in a store backed by a changelog topic, and every count update goes to the output
topic. Its record cache is off, so each input word yields one update. Exactly once means a
read_committed reader of the output sees, for every word, the counts 1, 2, ..., N in order with
no gap and no repeat, N being the word's number in the input, and the application's group has
committed the input's end offsets. Two instances share the application id, and the input
arrives at a steady rate throughout, so kills land while transactions are open: instance a is SIGKILLed
and restarted with its state dir (same transactional id: fenced by InitProducerId), a broker is
down for a few seconds, instance b is SIGKILLed and restarted without its state dir (a new
transactional id: its open transaction ends by the coordinator's timeout), then the group's
coordinator is down for a few seconds. Two of three brokers stay up; restarted instances restore
their stores from the changelog (Streams wipes a store it finds without a checkpoint under EOS).

Validated against Apache Kafka 4.1 (passed, about 70 s against 50 s on sluice):
    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py .venv/bin/python -m pytest integration-tests/python/test_kafka_streams.py
The check has teeth: the same application built with processing.guarantee=at_least_once fails it
(words counted past N after the restarts).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice_node import SluiceNode

JAVA_STREAMS = Path(os.environ.get("SLUICE_JAVA_STREAMS",
                                   Path(__file__).resolve().parents[2] / ".java-streams"))
MAIN_CLASS = "io.sluice.streams.WordCount"
PARTITIONS = 6
WORDS = [f"w{i:02d}" for i in range(40)]
WORDS_PER_LINE = 3
LINES = 6000
LINES_PER_SECOND = 250


class StreamsInstance:
    """One JVM running the word count. Each start is a new incarnation with its own stdout file
    (the application's "STATE ..." lines) and slf4j log file; the state dir is kept across
    restarts unless `start(fresh_state=True)`."""

    def __init__(self, name: str, work_dir: Path, args: list[str]):
        self.name = name
        self.work_dir = work_dir
        self.state_dir = work_dir / f"{name}-state"
        self.args = args
        self.starts = 0
        self.proc: subprocess.Popen | None = None

    @property
    def out_path(self) -> Path:
        return self.work_dir / f"{self.name}-{self.starts}.out"

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"{self.name}-{self.starts}.log"

    def start(self, fresh_state: bool = False) -> None:
        """Starts an incarnation; `fresh_state` first deletes the state dir, as if the instance
        came back on another machine."""
        if fresh_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        self.starts += 1
        classpath = os.pathsep.join([str(JAVA_STREAMS / "classes"), str(JAVA_STREAMS / "lib" / "*")])
        cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dorg.slf4j.simpleLogger.logFile={self.log_path}",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
               "-cp", classpath, MAIN_CLASS, *self.args, str(self.state_dir)]
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except OSError:
            return ""

    def check_alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, (
            f"Streams instance {self.name} exited with {self.proc and self.proc.returncode}:\n"
            f"{self.output()[-3000:]}\n(log {self.log_path})")

    def wait_running(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while "STATE RUNNING" not in self.output():
            self.check_alive()
            assert time.monotonic() < deadline, (
                f"Streams instance {self.name} not RUNNING in {timeout}s:\n{self.output()[-3000:]}\n(log {self.log_path})")
            time.sleep(0.2)


@pytest.fixture
def streams_instances(request, tmp_path):
    """Factory for StreamsInstance; every instance is killed after the test. On a failure the
    stdout and slf4j logs of every incarnation are kept under tmp_path and their paths printed."""
    assert (JAVA_STREAMS / "classes" / ".built").is_file(), (
        f"no Streams application in {JAVA_STREAMS}; scripts/java-streams.sh builds it")
    made: list[StreamsInstance] = []

    def make(name: str, args: list[str]) -> StreamsInstance:
        instance = StreamsInstance(name, tmp_path, args)
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.kill()
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        print(f"\n[streams] kept the application's logs in {tmp_path}: "
              f"{sorted(p.name for p in tmp_path.glob('*.log'))}")
    else:
        for instance in made:
            shutil.rmtree(instance.state_dir, ignore_errors=True)


def eventually(what: str, check, timeout: float, poll: float = 0.2, alive=()):
    """Polls `check()` until it returns a truthy value (returned); fails after `timeout` s with
    `what`, or at once if an instance of `alive` has exited."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        for instance in alive:
            instance.check_alive()
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(poll)


def make_lines(seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(WORDS_PER_LINE)] for _ in range(LINES)]


class InputFeed(threading.Thread):
    """Produces the input lines at a steady rate (idempotent, acks=all) on its own thread, so the
    application always has an open transaction when it or a broker is killed. `acked` counts the
    lines acknowledged so far; `join_and_check` fails on any delivery error."""

    def __init__(self, bootstrap: str, topic: str, lines: list[list[str]]):
        super().__init__(name="input-feed", daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "log_level": 3})
        self.topic = topic
        self.lines = lines
        self.acked = 0
        self.errors: list = []
        self.failure: BaseException | None = None

    def on_delivery(self, err, _msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors.append(err)

    def run(self) -> None:
        try:
            started = time.monotonic()
            for i, words in enumerate(self.lines):
                self.producer.produce(self.topic, key=f"line-{i}", value=" ".join(words),
                                      on_delivery=self.on_delivery)
                self.producer.poll(0)
                ahead = (i + 1) / LINES_PER_SECOND - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            self.producer.flush(60)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread by join_and_check
            self.failure = e

    def wait_acked(self, n: int, alive) -> None:
        eventually(f"{n} input lines acknowledged", lambda: self.acked >= n or self.errors or self.failure,
                   60, alive=alive)
        assert not self.errors and self.failure is None, (self.errors[:3], self.failure)

    def join_and_check(self) -> None:
        self.join(timeout=120)
        assert not self.is_alive(), "the input feed did not finish in 120 s"
        assert self.failure is None, self.failure
        assert not self.errors, self.errors[:3]
        assert self.acked == len(self.lines), f"{self.acked} of {len(self.lines)} input lines acknowledged"


def all_in_sync(admin: AdminClient, size: int) -> bool:
    """Every partition of every topic has its full replica set in sync."""
    md = admin.list_topics(timeout=10)
    return all(len(p.isrs) == len(p.replicas) == min(size, len(p.replicas)) and p.leader >= 0
               for t in md.topics.values() for p in t.partitions.values())


def restart_broker(node: SluiceNode) -> None:
    node.spawn()
    node.wait_ready()


def group_coordinator(admin: AdminClient, group: str) -> int:
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=30).coordinator.id


def read_counts(bootstrap: str, topic: str, expected: Counter, timeout: float, alive) -> dict[str, list[int]]:
    """Every count a read_committed reader of `topic` receives, per word, in offset order: read
    until every word's latest count reaches its expected total, then on to the read_committed
    end of each partition (so a duplicate behind the final count would be seen too)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"streams-check-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "log_level": 3})
    seen: dict[str, list[int]] = {}
    tps = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]

    def take(messages) -> None:
        for m in messages:
            assert m.error() is None, m.error()
            (count,) = struct.unpack(">q", m.value())
            seen.setdefault(m.key().decode(), []).append(count)

    def complete() -> bool:
        take(c.consume(1000, 0.5))
        return all(seen.get(w, [0])[-1] >= n for w, n in expected.items())

    try:
        c.assign(tps)
        eventually("every word's final count in the output", complete, timeout, alive=alive)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(PARTITIONS)}

        def at_end() -> bool:
            take(c.consume(1000, 0.2))
            return all(tp.offset >= ends[tp.partition] for tp in c.position(tps))

        eventually(f"the read_committed ends {ends}", at_end, 30)
        return seen
    finally:
        c.close()


def test_word_count_with_exactly_once_v2_counts_each_word_once_through_instance_and_broker_kills(
        cluster, streams_instances):
    nodes = cluster({"group.initial.rebalance.delay.ms": "0"})
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    suffix = uuid.uuid4().hex[:8]
    source, sink, app_id = f"lines-{suffix}", f"counts-{suffix}", f"wordcount-{suffix}"
    created = admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (source, sink)], request_timeout=20)
    for f in created.values():
        f.result(timeout=30)

    args = [bootstrap, app_id, source, sink]
    a, b = streams_instances("a", args), streams_instances("b", args)
    a.start()
    b.start()
    a.wait_running()
    b.wait_running()

    lines = make_lines(seed=7)
    expected = Counter(w for words in lines for w in words)
    feed = InputFeed(bootstrap, source, lines)
    feed.start()
    apps = (a, b)

    # Instance a dies mid-transaction and comes back with its state dir, so with its process id
    # and transactional id: its InitProducerId fences the old epoch and aborts what was open.
    feed.wait_acked(800, apps)
    a.kill()
    a.start()

    # Broker 2 is down for a while and comes back, catching up before anything else dies.
    feed.wait_acked(1800, apps)
    nodes[1].kill()
    feed.wait_acked(2800, apps)
    restart_broker(nodes[1])
    eventually("every replica back in sync after broker 2's restart", lambda: all_in_sync(admin, 3), 60,
               alive=apps)

    # Instance b dies mid-transaction and comes back without its state dir: a new process id,
    # so a new transactional id, and nothing fences the old one: the coordinator aborts its open
    # transaction at transaction.timeout.ms (Streams' 10 s), holding read_committed readers of
    # those partitions at the last stable offset until then.
    feed.wait_acked(3600, apps)
    b.kill()
    b.start(fresh_state=True)

    # The group's coordinator is down for a while.
    feed.wait_acked(4400, apps)
    victim = nodes[group_coordinator(admin, app_id) - 1]
    victim.kill()
    feed.wait_acked(5200, apps)
    restart_broker(victim)
    feed.join_and_check()

    seen = read_counts(bootstrap, sink, expected, timeout=150, alive=(a, b))
    wrong = {w: counts for w, counts in seen.items() if counts != list(range(1, expected[w] + 1))}
    assert not wrong, "counts per word must be exactly 1..N: " + "; ".join(
        f"{w} (N={expected[w]}): {describe_sequence(counts, expected[w])}" for w, counts in sorted(wrong.items())[:5])
    assert set(seen) == set(expected)
    # What the kills cost: records of aborted transactions stay in the log, skipped above.
    in_log = count_records(bootstrap, sink)
    print(f"\n[streams] {sum(expected.values())} counts committed; {in_log - sum(expected.values())} "
          f"records of aborted transactions in {sink}")

    # The group committed (in its transactions) every input record it counted.
    ends = partition_ends(bootstrap, source)
    eventually(f"group {app_id} committed the input's end offsets {ends}",
               lambda: committed_offsets(bootstrap, app_id, source) == ends, 30, alive=(a, b))
    a.check_alive()
    b.check_alive()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch). Asked through a consumer that never joins the
    group, not AdminClient.list_consumer_group_offsets: librdkafka 2.16's admin client crashes
    (a NULL consumer group handle in rd_kafka_handle_OffsetFetch) when OffsetFetch answers
    NOT_COORDINATOR, as any broker may while the coordinator moves."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "log_level": 3})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def count_records(bootstrap: str, topic: str) -> int:
    """How many records (committed or not) a read_uncommitted reader finds in `topic`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-count", "isolation.level": "read_uncommitted",
                  "enable.auto.commit": False, "log_level": 3})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(PARTITIONS)}
        c.assign(tps)
        total = 0

        def at_end() -> bool:
            nonlocal total
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                total += 1
            return all(tp.offset >= ends[tp.partition] for tp in c.position(tps))

        eventually(f"the ends {ends} of {topic}", at_end, 30)
        return total
    finally:
        c.close()


def partition_ends(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-ends", "log_level": 3})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


def describe_sequence(counts: list[int], n: int) -> str:
    """How a word's counts depart from 1, 2, ..., n: the first repeat or gap, or a total off n."""
    for i, count in enumerate(counts):
        if count != i + 1:
            return (f"{len(counts)} counts, first departure at position {i}: {counts[max(0, i - 3):i + 4]} "
                    f"(expected {i + 1}); last {counts[-1]}")
    return f"1..{len(counts)} in order, {'more' if len(counts) > n else 'fewer'} than N (counted twice or lost)"
