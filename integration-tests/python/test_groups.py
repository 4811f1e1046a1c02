"""Consumer groups (Kafka's classic protocol) with real clients: kcat's balanced consumer,
confluent-kafka and kafka-python consume, commit, and a restarted member of the same group
resumes at the committed offset while another group reads everything independently; two
members of one group split the partitions; and on a 3-node cluster two groups each receive
every record. Java's consumer and kafka-consumer-groups are in test_java_groups.py."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from group_clients import (GROUP_SETTINGS, Member, assert_nothing_more, await_split, committed, consume_n,
                           create_topic, produce, wait_until)

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def lines(prefix: str, start: int, end: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(start, end)]


# --- kcat (Debian, librdkafka 2.0.2), balanced consumer (-G) ---------------------------------

def kcat_group(node, group: str, topic: str, *extra: str) -> list[str]:
    """kcat as a balanced consumer, librdkafka defaults except where a new group starts
    (earliest), each record as 'partition offset value'. (`-o` would override the committed
    offset on every assignment, so it is not used.)"""
    return ["kcat", "-b", node.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", "-q",
            "-f", "%p %o %s\n", *extra, topic]


def test_kcat_balanced_consumer_resumes_at_the_committed_offset_after_exit_and_after_sigint(start_node):
    if KCAT is None:
        pytest.skip("kcat not installed (scripts/test.sh installs it)")
    node = start_node(GROUP_SETTINGS)
    topic = "kcat-group"
    create_topic(node.bootstrap, topic, 2)
    first = produce(node.bootstrap, topic, lines("a", 0, 200), partitions=2)

    # Run 1: -e exits once every assigned partition is at its end; closing commits (auto-commit).
    run = subprocess.run(kcat_group(node, "kcat-g", topic, "-e"), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    got = sorted(run.stdout.decode().splitlines())
    assert got == sorted(f"{p} {o} {v.decode()}" for p, o, v in first)

    # Run 2: only the new records; stopped with SIGINT once it printed them (kcat then closes
    # the consumer, committing its offsets). -u: unbuffered output, to see lines as they come.
    second = produce(node.bootstrap, topic, lines("b", 200, 300), partitions=2)
    proc = subprocess.Popen(kcat_group(node, "kcat-g", topic, "-u"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(l.decode().rstrip("\n") for l in proc.stdout), daemon=True)
    reader.start()
    try:
        wait_until("kcat to print the 100 new records", lambda: len(printed) >= 100 or proc.poll() is not None, 60)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    assert proc.returncode == 0, proc.stderr.read().decode(errors="replace")[-2000:]
    assert sorted(printed) == sorted(f"{p} {o} {v.decode()}" for p, o, v in second)

    # Run 3: the SIGINT close committed too, so only the records produced since arrive.
    third = produce(node.bootstrap, topic, lines("c", 300, 340), partitions=2)
    run = subprocess.run(kcat_group(node, "kcat-g", topic, "-e"), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    assert sorted(run.stdout.decode().splitlines()) == sorted(f"{p} {o} {v.decode()}" for p, o, v in third)
    assert committed(node.bootstrap, "kcat-g", topic, 2) == {0: 170, 1: 170}


def test_two_kcat_balanced_consumers_split_the_partitions_and_print_every_record_once(start_node):
    """Two kcat -G processes (librdkafka 2.0.2's older request versions) in one group."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if KCAT is None:
        pytest.skip("kcat not installed (scripts/test.sh installs it)")
    node = start_node(GROUP_SETTINGS)
    topic = "kcat-split"
    create_topic(node.bootstrap, topic, 2)
    procs = [subprocess.Popen(kcat_group(node, "kcat-split-g", topic, "-u"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    printed: list[list[str]] = [[], []]
    readers = [threading.Thread(target=lambda i=i: printed[i].extend(l.decode().rstrip("\n") for l in procs[i].stdout),
                                daemon=True) for i in range(2)]
    for r in readers:
        r.start()
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})

        def split():
            try:
                g = admin.describe_consumer_groups(["kcat-split-g"], request_timeout=10)["kcat-split-g"].result(timeout=15)
            except KafkaException:
                return None  # NOT_COORDINATOR while the coordinator loads: retried
            parts = sorted(sorted(tp.partition for tp in m.assignment.topic_partitions) for m in g.members)
            return parts if str(g.state).endswith("STABLE") and parts == [[0], [1]] else None

        wait_until("both kcat members to hold one partition each", split, timeout=60, interval=0.5)
        sent = produce(node.bootstrap, topic, lines("ks", 0, 300), partitions=2)
        wait_until("kcat to print every record", lambda: len(printed[0]) + len(printed[1]) >= len(sent), 60)
        time.sleep(0.5)  # a duplicate would show up here
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait(timeout=30)
        for r in readers:
            r.join(timeout=10)
    for p in procs:
        assert p.returncode == 0, p.stderr.read().decode(errors="replace")[-2000:]
    assert sorted(printed[0] + printed[1]) == sorted(f"{p} {o} {v.decode()}" for p, o, v in sent)
    per_kcat = sorted(tuple(sorted({line.split()[0] for line in out})) for out in printed)
    assert per_kcat == [("0",), ("1",)], f"partitions printed by each kcat: {per_kcat}"


# --- confluent-kafka -----------------------------------------------------------------------------

def test_confluent_consumer_commits_a_new_member_resumes_and_another_group_reads_everything(start_node):
    node = start_node(GROUP_SETTINGS)
    topic = "ck-group"
    create_topic(node.bootstrap, topic, 3)
    first = produce(node.bootstrap, topic, lines("one", 0, 300), partitions=3)

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "ck-g1", "auto.offset.reset": "earliest",
                  "log_level": 3})
    c.subscribe([topic])
    got = consume_n(c, 300)
    assert sorted(got) == sorted(first)
    c.commit(asynchronous=False)
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert {tp.partition: tp.offset for tp in c.committed(tps, timeout=20)} == {0: 100, 1: 100, 2: 100}
    c.close()

    second = produce(node.bootstrap, topic, lines("two", 300, 450), partitions=3)
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "ck-g1", "auto.offset.reset": "earliest",
                  "log_level": 3})
    c.subscribe([topic])
    got = consume_n(c, 150)
    assert sorted(got) == sorted(second), "the restarted member must start at the committed offsets"
    assert_nothing_more(c)
    c.commit(asynchronous=False)
    c.close()
    assert committed(node.bootstrap, "ck-g1", topic, 3) == {0: 150, 1: 150, 2: 150}

    # Another group has its own offsets: it reads everything from the beginning.
    other = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "ck-g2", "auto.offset.reset": "earliest",
                      "log_level": 3})
    other.subscribe([topic])
    got = consume_n(other, 450)
    assert sorted(got) == sorted(first + second)
    assert_nothing_more(other)
    other.close()


def test_two_confluent_consumers_of_one_group_split_the_partitions_and_get_each_record_once(start_node):
    node = start_node(GROUP_SETTINGS)
    topic = "ck-split"
    create_topic(node.bootstrap, topic, 4)
    members = [Member(node.bootstrap, "ck-split-g", topic, f"ck-split-{i}") for i in range(2)]
    try:
        split = await_split(members, 4)
        sent = produce(node.bootstrap, topic, lines("s", 0, 4000), partitions=4)
        wait_until("every record received", lambda: sum(m.snapshot()[1] for m in members) >= len(sent), 60)
        time.sleep(1.0)  # a duplicate delivered late would show up here
    finally:
        for m in members:
            m.stop()
    for m, assigned in zip(members, split):
        assert {p for p, _, _ in m.received} <= set(assigned), f"{m.client_id} read outside its partitions {assigned}"
        assert not m.commit_errors, m.commit_errors[:3]
    received = [r for m in members for r in m.received]
    assert sorted(received) == sorted(sent), (
        f"{len(received)} received for {len(sent)} sent, {len(received) - len(set(received))} duplicates")


def test_with_the_default_initial_rebalance_delay_members_starting_together_share_one_generation(start_node):
    """Kafka's group.initial.rebalance.delay.ms (3000 by default) holds the first rebalance of
    an empty group so that members starting together join one generation: each is assigned
    once, after the delay, and never revoked."""
    node = start_node()  # broker defaults
    topic = "ck-delay"
    create_topic(node.bootstrap, topic, 6)
    subscribed = time.monotonic()
    members = [Member(node.bootstrap, "ck-delay-g", topic, f"ck-delay-{i}") for i in range(3)]
    try:
        split = await_split(members, 6, timeout=30)
        time.sleep(1.0)  # a second rebalance right after the first would show up here
    finally:
        for m in members:
            m.stop()
    history = {m.client_id: [(round(t - subscribed, 2), a) for t, a in m.assignments] for m in members}
    assert all(len(m.assignments) == 1 for m in members), f"assignments per member: {history}"
    first = min(t for m in members for t, _ in m.assignments) - subscribed
    assert first >= 2.5, f"the first assignment came {first:.2f}s after subscribing, before the 3 s initial delay: {history}"
    assert sorted(p for a in split for p in a) == list(range(6))


def test_cooperative_sticky_members_joining_under_load_get_every_record_exactly_once(start_node):
    """librdkafka's cooperative-sticky assignor over the classic protocol (incremental
    rebalances: a member gives up only the partitions that move, in a second rebalance)."""
    node = start_node(GROUP_SETTINGS)
    topic = "ck-coop"
    create_topic(node.bootstrap, topic, 6)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [Member(node.bootstrap, "ck-coop-g", topic, "ck-coop-0", **coop)]
    sent: list[tuple[int, int, bytes]] = []
    try:
        # Records keep coming while the second and third member join.
        for i in range(3):
            sent += produce(node.bootstrap, topic, lines(f"coop{i}", i * 5000, (i + 1) * 5000), partitions=6)
            if i < 2:
                members.append(Member(node.bootstrap, "ck-coop-g", topic, f"ck-coop-{i + 1}", **coop))
                time.sleep(0.5)
        wait_until("every record received", lambda: len({(p, o) for m in members for p, o, _ in m.received}) >= len(sent), 60)
        split = await_split(members, 6, timeout=30)
        time.sleep(1.0)
    finally:
        for m in members:
            m.stop()
    received = [r for m in members for r in m.received]
    assert set(received) == set(sent), f"{len(set(sent) - set(received))} records never received"
    commit_errors = [e for m in members for e in m.commit_errors]
    assert len(received) == len(set(received)), (
        f"{len(received) - len(set(received))} records received twice; split {split}; commit errors {commit_errors[:3]}")
    # Incremental: the first member never gave up all of its partitions at once.
    first = members[0]
    assert all(set(r) != set(range(6)) for _, r in first.revocations), first.revocations


def test_members_joining_and_leaving_under_load_lose_no_record_and_no_membership(start_node):
    """Members come and go every ~0.7 s while records arrive (eager rebalances back to back):
    the group still reads every record, no member is told it is unknown while the coordinator
    knows it, and with every commit acknowledged nothing is read twice."""
    import random

    node = start_node(GROUP_SETTINGS)
    topic = "ck-churn"
    create_topic(node.bootstrap, topic, 12)
    rng = random.Random(7)
    all_members = [Member(node.bootstrap, "ck-churn-g", topic, f"ck-churn-{i}") for i in range(3)]
    live = list(all_members)
    sent: list[tuple[int, int, bytes]] = []
    done = threading.Event()

    def producer():
        try:
            for i in range(12):
                sent.extend(produce(node.bootstrap, topic, lines(f"churn{i}", i * 2000, (i + 1) * 2000), partitions=12))
                time.sleep(0.3)
        finally:
            done.set()

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    try:
        for step in range(6):
            m = Member(node.bootstrap, "ck-churn-g", topic, f"ck-churn-{3 + step}")
            all_members.append(m)
            live.append(m)
            time.sleep(0.7)
            leaving = live.pop(rng.randrange(len(live) - 1))  # never the newest
            leaving.stop()
            time.sleep(0.7)
        assert done.wait(60), "the producer did not finish"
        t.join()
        wait_until("every record received",
                   lambda: len({(p, o) for m in all_members for p, o, _ in m.received}) >= len(sent), 60)
        split = await_split(live, 12, timeout=30)
    finally:
        for m in live:
            m.stop()
    received = [r for m in all_members for r in m.received]
    assert set(received) == set(sent), f"{len(set(sent) - set(received))} of {len(sent)} records never received"
    unknown = [(m.client_id, e) for m in all_members for e in m.errors + m.commit_errors
               if "UNKNOWN_MEMBER_ID" in e.upper() or "UNKNOWN MEMBER" in e.upper()]
    assert not unknown, unknown[:5]
    commit_errors = [(m.client_id, e) for m in all_members for e in m.commit_errors]
    duplicates = len(received) - len(set(received))
    assert duplicates == 0 or commit_errors, (
        f"{duplicates} records read twice although every commit was acknowledged; final split {split}")


def test_twenty_members_joining_at_once_settle_with_each_partition_assigned_once(start_node):
    """A join storm (no initial delay): twenty members, twelve partitions. The group settles with
    every partition held by exactly one member, nobody is told it is unknown, and every record
    produced afterwards is read once."""
    node = start_node(GROUP_SETTINGS)
    topic = "ck-storm"
    create_topic(node.bootstrap, topic, 12)
    members = [Member(node.bootstrap, "ck-storm-g", topic, f"ck-storm-{i}") for i in range(20)]
    try:
        def settled():
            held = [m.snapshot()[0] for m in members]
            return sorted(p for a in held for p in a) == list(range(12)) and sum(1 for a in held if a) == 12

        wait_until("the group to settle", settled, 90, 0.2)
        sent = produce(node.bootstrap, topic, lines("storm", 0, 6000), partitions=12)
        wait_until("every record received",
                   lambda: len({(p, o) for m in members for p, o, _ in m.received}) >= len(sent), 60)
        time.sleep(1.0)
    finally:
        for m in members:
            m.stop()
    errors = [(m.client_id, e) for m in members for e in m.errors + m.commit_errors]
    assert not [e for e in errors if "UNKNOWN_MEMBER" in e[1].upper() or "UNKNOWN MEMBER" in e[1].upper()], errors[:5]
    received = [r for m in members for r in m.received]
    assert sorted(received) == sorted(sent), f"{len(received)} received for {len(sent)} sent; errors {errors[:5]}"


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(start_node):
    """KIP-345: a static member (group.instance.id) that closes and comes back within its
    session timeout gets the same partitions, and the other members are not rebalanced."""
    node = start_node(GROUP_SETTINGS)
    topic = "ck-static"
    create_topic(node.bootstrap, topic, 4)

    def member(name: str) -> Member:
        return Member(node.bootstrap, "ck-static-g", topic, name, **{"group.instance.id": name,
                                                                     "session.timeout.ms": 30000})

    a, b = member("static-a"), member("static-b")
    try:
        split = await_split([a, b], 4)
        a_assignments, a_revocations = len(a.assignments), len(a.revocations)
        b.stop()  # a static member leaves no LeaveGroup behind: its partitions wait for it
        b = member("static-b")
        wait_until("the static member to be assigned again", lambda: b.snapshot()[0], 30)
        assert b.snapshot()[0] == split[1], f"static-b had {split[1]} and got {b.snapshot()[0]} after its restart"
        sent = produce(node.bootstrap, topic, lines("st", 0, 400), partitions=4)
        wait_until("every record received", lambda: a.snapshot()[1] + b.snapshot()[1] >= len(sent), 30)
        assert (a.snapshot()[0], len(a.assignments), len(a.revocations)) == (split[0], a_assignments, a_revocations), (
            f"static-a was rebalanced when static-b restarted: assignments {a.assignments}, revocations {a.revocations}")
    finally:
        a.stop()
        b.stop()
    assert sorted(a.received + b.received) == sorted(sent)


# --- kafka-python --------------------------------------------------------------------------------

def test_kafka_python_group_consumer_commits_and_resumes_with_committed_and_end_offsets(start_node):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    node = start_node(GROUP_SETTINGS)
    topic = "kp-group"
    create_topic(node.bootstrap, topic, 2)
    first = produce(node.bootstrap, topic, lines("kp", 0, 200), partitions=2)
    tps = [KpTopicPartition(topic, p) for p in range(2)]

    def consume(n: int) -> tuple[KafkaConsumer, list[tuple[int, int, bytes]]]:
        c = KafkaConsumer(topic, bootstrap_servers=node.bootstrap, group_id="kp-g", auto_offset_reset="earliest",
                          client_id="pytest-kp-group")
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < n:
            assert time.monotonic() < deadline, f"kafka-python received {len(got)} of {n}"
            for tp, records in c.poll(timeout_ms=500).items():
                got.extend((tp.partition, r.offset, r.value) for r in records)
        return c, got

    c, got = consume(200)
    assert sorted(got) == sorted(first)
    c.commit()
    assert {tp.partition: c.committed(tp) for tp in tps} == {0: 100, 1: 100}
    assert {tp.partition: o for tp, o in c.end_offsets(tps).items()} == {0: 100, 1: 100}
    c.close()

    second = produce(node.bootstrap, topic, lines("kp", 200, 260), partitions=2)
    c, got = consume(60)
    try:
        assert sorted(got) == sorted(second), "the restarted consumer must resume at the committed offsets"
        assert min(o for p, o, _ in got if p == 0) == 100 and min(o for p, o, _ in got if p == 1) == 100
        c.commit()
        assert {tp.partition: c.committed(tp) for tp in tps} == {0: 130, 1: 130}
        assert {tp.partition: o for tp, o in c.end_offsets(tps).items()} == {0: 130, 1: 130}
    finally:
        c.close()


# --- two groups on a 3-node cluster ----------------------------------------------------------

def test_two_groups_on_a_three_node_cluster_each_receive_every_record(cluster):
    nodes = cluster(GROUP_SETTINGS)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    topic = "orders"
    create_topic(bootstrap, topic, 6, replication_factor=3)
    members = {g: [Member(bootstrap, g, topic, f"{g}-{i}") for i in range(2)] for g in ("orders-sink", "analytics")}
    try:
        # Records flow while the members join and rebalance.
        sent = produce(bootstrap, topic, lines("order", 0, 20_000), partitions=6, **{"enable.idempotence": True})
        for g, ms in members.items():
            wait_until(f"group {g} to receive every record",
                       lambda ms=ms: len({(p, o) for m in ms for p, o, _ in m.received}) >= len(sent), 90)
        for g, ms in members.items():
            await_split(ms, 6, timeout=10)
    finally:
        for ms in members.values():
            for m in ms:
                m.stop()
    for g, ms in members.items():
        received = [r for m in ms for r in m.received]
        assert set(received) == set(sent), f"group {g} missed {len(set(sent) - set(received))} records"
        commit_errors = [e for m in ms for e in m.commit_errors]
        assert len(received) == len(set(received)), (
            f"group {g}: {len(received) - len(set(received))} records delivered twice; commit errors {commit_errors[:3]}")
        assert committed(bootstrap, g, topic, 6) == {p: sum(1 for s in sent if s[0] == p) for p in range(6)}
