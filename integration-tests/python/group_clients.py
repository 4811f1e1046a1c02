"""Helpers for the consumer-group tests (test_groups.py, test_java_groups.py): topic creation,
a producer that reports where each record landed, and a confluent-kafka group member that
commits after processing, on its own thread."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# No test here is about group.initial.rebalance.delay.ms (Kafka's default 3000 delays the first
# rebalance of an empty group); 0 keeps the tests fast.
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


def wait_until(what: str, cond, timeout: float = 30.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, replication_factor)], request_timeout=30)[name].result(timeout=40)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int | None = None,
            **config) -> list[tuple[int, int, bytes]]:
    """Produces `values` (to partition i % partitions if given, else by the default partitioner)
    with librdkafka's defaults (acks=all) plus `config`; returns each record's
    (partition, offset, value), failing if any is not acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3, **config})
    acked: list[tuple[int, int, bytes]] = []
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for i, v in enumerate(values):
        kwargs = {} if partitions is None else {"partition": i % partitions}
        while True:
            try:
                p.produce(topic, value=v, on_delivery=on_delivery, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "records still queued after 60 s"
    assert not errors, errors[:5]
    assert len(acked) == len(values)
    return acked


def consume_n(consumer: Consumer, n: int, timeout: float = 60.0) -> list[tuple[int, int, bytes]]:
    """Polls until `n` records arrived; returns (partition, offset, value) in arrival order."""
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"received {len(got)} of {n} records in {timeout}s"
        m = consumer.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append((m.partition(), m.offset(), m.value()))
    return got


def assert_nothing_more(consumer: Consumer, seconds: float = 1.5) -> None:
    """No further record arrives within `seconds` (after the expected ones were all received)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = consumer.poll(0.2)
        assert m is None or (m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF), \
            f"unexpected extra record {m.partition()}-{m.offset()} {m.value()!r}"


class Member:
    """A confluent-kafka group member on its own thread: subscribes to `topic`, and after each
    batch it received (processed = recorded) commits synchronously, so with no faults its group
    sees every record exactly once. Records its assignment and everything it received."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str, **config):
        self.client_id = client_id
        self.errors: list[str] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "log_level": 3, "error_cb": self._on_error, **config})
        self.received: list[tuple[int, int, bytes]] = []
        self.assignment: list[int] = []
        # Every assignment received: (time.monotonic(), partitions).
        self.assignments: list[tuple[float, list[int]]] = []
        self.revocations: list[tuple[float, list[int]]] = []
        self.commit_errors: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        self.thread = threading.Thread(target=self._run, name=client_id, daemon=True)
        self.thread.start()

    def _on_error(self, err):
        self.errors.append(str(err))

    # Partitions come as the whole assignment (eager protocol) or as the increment (cooperative):
    # tracking a set handles both.
    def _on_assign(self, consumer, partitions):
        with self.lock:
            self.assignment = sorted(set(self.assignment) | {tp.partition for tp in partitions})
            self.assignments.append((time.monotonic(), sorted(tp.partition for tp in partitions)))

    def _on_revoke(self, consumer, partitions):
        with self.lock:
            self.assignment = sorted(set(self.assignment) - {tp.partition for tp in partitions})
            self.revocations.append((time.monotonic(), sorted(tp.partition for tp in partitions)))

    def _run(self):
        while not self._stop.is_set():
            batch = self.consumer.consume(num_messages=500, timeout=0.2)
            records = []
            for m in batch:
                if m.error() is not None:
                    self.errors.append(str(m.error()))
                    continue
                records.append((m.partition(), m.offset(), m.value()))
            if not records:
                continue
            with self.lock:
                self.received.extend(records)
            try:
                self.consumer.commit(asynchronous=False)
            except Exception as e:  # noqa: BLE001 - recorded; the test decides what it means
                self.commit_errors.append(repr(e))

    def snapshot(self) -> tuple[list[int], int]:
        with self.lock:
            return list(self.assignment), len(self.received)

    def stop(self) -> None:
        """Stops polling and closes the consumer (LeaveGroup)."""
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"member {self.client_id} did not stop"
        self.consumer.close()


def await_split(members: list[Member], partitions: int, timeout: float = 30.0) -> list[list[int]]:
    """Waits until every member holds partitions and together they hold each exactly once."""
    last = []

    def split():
        nonlocal last
        last = [m.snapshot()[0] for m in members]
        flat = sorted(p for a in last for p in a)
        return last if all(last) and flat == list(range(partitions)) else None

    try:
        return wait_until("a complete split", split, timeout)
    except AssertionError:
        raise AssertionError(f"members never split {partitions} partitions between them within {timeout}s: {last}; "
                             f"errors {[m.errors[-3:] for m in members]}") from None


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets via OffsetFetch from a client that does not join it
    (-1001, librdkafka's OFFSET_INVALID, where nothing is committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        for tp in tps:
            assert tp.error is None, tp.error
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


class PollingMember:
    """A librdkafka group member with auto commit, polling on its own thread: it keeps each
    record's value and when it arrived, and the size of its assignment as last seen. With
    `protocol` "consumer" it is a KIP-848 member; "classic" (with `assignment` its
    partition.assignment.strategy, librdkafka's default eager range,roundrobin if None) a classic
    one. Used where many members must run in one process (test_kip848_groups.py, the rebalance
    benchmark)."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, errors: list[str],
                 protocol: str = "consumer", assignment: str | None = None, poll_s: float = 0.05):
        self.name = name
        self.got: list[tuple[float, str]] = []
        self.assigned = 0
        self._poll_s = poll_s
        self._stop = threading.Event()
        config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol, "client.id": name,
                  "auto.offset.reset": "earliest", "log_level": 3, "auto.commit.interval.ms": 500,
                  "error_cb": lambda e: errors.append(f"{name}: {e}")}
        if assignment:
            config["partition.assignment.strategy"] = assignment
        self._consumer = Consumer(config)
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self._consumer.poll(self._poll_s)
            if m is not None and m.error() is None:
                self.got.append((time.monotonic(), m.value().decode()))
            self.assigned = len(self._consumer.assignment())
        # close() commits what was consumed and leaves the group.
        self._consumer.close()

    def leave(self) -> None:
        """Closes the consumer (once; again is a no-op)."""
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), f"{self.name} did not close within 60 s"

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time between two records (or the window's edges) within [start, end]."""
        times = [start] + [t for t, _ in self.got if start <= t <= end] + [end]
        return max(b - a for a, b in zip(times, times[1:]))
