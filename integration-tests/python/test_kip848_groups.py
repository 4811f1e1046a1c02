"""KIP-848 consumer groups (group.protocol=consumer: ConsumerGroupHeartbeat, ConsumerGroupDescribe)
with real clients: two Java console consumers of one group split a 4-partition topic, as
kafka-consumer-groups describes (members with equal current and target epochs, the uniform
assignor, Stable) and lists it by type, and print every record once; a Java consumer resumes
at the offsets it committed on closing; two librdkafka consumers split the partitions, and a
later member of their group gets only newer records; a node offering only the range assignor
serves a client asking for it and refuses sticky and uniform (UnsupportedAssignorException);
with the authorizer on, a member needs READ on its group (GroupAuthorizationException); and
on 3 nodes a group outlives its coordinator, rebuilt from its __consumer_offsets records;
fifty librdkafka members joining and leaving a 100-partition group under load get every record
exactly once between them; and a classic group (librdkafka or Java console consumers) converts
online to a consumer group when a KIP-848 member joins and back when it leaves, losing no record.

Kafka's console consumer swallows a consumer error (it logs it through slf4j, which the tools'
classpath discards with slf4j-nop) and exits 0 having printed nothing; the exception itself is
seen through a few lines of Java on Kafka's KafkaConsumer (`java_member`). The classic protocol
is in test_groups.py and test_java_groups.py."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType

from group_clients import PollingMember, assert_nothing_more, committed, consume_n, create_topic, produce, wait_until
from security_clients import log_lines, wait_for_log
from test_java_cli import JAVA_LIB
from test_java_groups import CONSOLE_CONSUMER, GROUPS_TOOL, lines, table
from test_security_acls import AUTHORIZER, MECHANISM, binding, create_topics, grant, login
from test_security_acls import produce as produce_as

# The node's settings are Kafka's defaults throughout: group.initial.rebalance.delay.ms (the
# GROUP_SETTINGS of the classic tests) applies to classic groups only, and the consumer
# heartbeat interval (5 s) is what clients meet on a default broker.

CONSUMER_PROTOCOL = ("--command-property", "group.protocol=consumer")

# A group member on Kafka's own KafkaConsumer: subscribes to <topic>, prints each record value
# until <count> arrived or <timeout ms> passed; a consumer error is printed as "ERROR <exception
# class>: <message>" (exit 2). Further arguments are client properties, key=value, or @file.
JAVA_MEMBER = """\
import java.io.FileReader;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;

public class GroupMember {
    public static void main(String[] args) throws Exception {
        String topic = args[0];
        int want = Integer.parseInt(args[1]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[2]);
        Properties props = new Properties();
        props.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        for (int i = 3; i < args.length; i++) {
            if (args[i].startsWith("@")) {
                try (FileReader file = new FileReader(args[i].substring(1))) {
                    props.load(file);
                }
            } else {
                String[] kv = args[i].split("=", 2);
                props.put(kv[0], kv[1]);
            }
        }
        int got = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (got < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(r.value());
                    got++;
                }
            }
        } catch (Exception e) {
            System.out.println("ERROR " + e.getClass().getName() + ": " + e.getMessage());
            System.exit(2);
        }
    }
}
"""


def jars() -> str:
    found = sorted(JAVA_LIB.glob("*.jar"))
    assert found, f"no Kafka jars in {JAVA_LIB}; scripts/test.sh fetches them with Maven"
    return os.pathsep.join(str(j) for j in found)


def java_member(tmp_path: Path, bootstrap: str, topic: str, group: str, count: int, *props: str,
                timeout_ms: int = 20000) -> subprocess.CompletedProcess:
    """Runs JAVA_MEMBER (Java's single-file source launch) with group.protocol=consumer."""
    source = tmp_path / "GroupMember.java"
    source.write_text(JAVA_MEMBER)
    return subprocess.run(
        ["java", "-cp", jars(), str(source), topic, str(count), str(timeout_ms), f"bootstrap.servers={bootstrap}",
         f"group.id={group}", "group.protocol=consumer", "auto.offset.reset=earliest", *props],
        capture_output=True, text=True, timeout=timeout_ms / 1000 + 60)


def console_consumer(bootstrap: str, topic: str, group: str, *args: str, timeout: float = 90
                     ) -> subprocess.CompletedProcess:
    """One run of kafka-console-consumer in `group` with group.protocol=consumer; the caller checks."""
    return subprocess.run(["java", "-cp", jars(), CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                           "--group", group, "--from-beginning", *CONSUMER_PROTOCOL, *args],
                          capture_output=True, text=True, timeout=timeout)


def console_consumer_process(bootstrap: str, topic: str, group: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["java", "-cp", jars(), CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic",
                             topic, "--group", group, "--from-beginning", *CONSUMER_PROTOCOL, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def groups_tool(node, *args: str) -> str | None:
    """kafka-consumer-groups' stdout, or None (printed) when it fails, e.g. while the group does
    not exist yet (`Error: ... GroupIdNotFoundException`, exit code 0): the callers wait for an
    outcome."""
    done = subprocess.run(["java", "-cp", jars(), GROUPS_TOOL, "--bootstrap-server", node.bootstrap, *args],
                          capture_output=True, text=True, timeout=90)
    if done.returncode != 0 or "Error: " in done.stdout:
        print(f"kafka-consumer-groups {args} exited {done.returncode}: {done.stdout}{done.stderr}")
        return None
    return done.stdout


def group_state(node, group: str) -> tuple[str, str, str] | None:
    """(ASSIGNMENT-STRATEGY, STATE, #MEMBERS) from `--describe --state`."""
    out = groups_tool(node, "--describe", "--group", group, "--state")
    if out is None:
        return None
    [row] = table(out)
    return row["ASSIGNMENT-STRATEGY"], row["STATE"], row["#MEMBERS"]


def listed(node, group_type: str) -> dict[str, str]:
    """GROUP -> TYPE from `--list --type <group_type>` (ListGroups with a type filter)."""
    out = groups_tool(node, "--list", "--type", group_type)
    assert out is not None, f"--list --type {group_type} failed"
    return {r["GROUP"]: r["TYPE"] for r in table(out)}


def partitions(assignment: str, topic: str) -> list[int]:
    """`t:0,1` (the tool's CURRENT-/TARGET-ASSIGNMENT) as [0, 1]; `-` as []."""
    if assignment == "-":
        return []
    name, _, numbers = assignment.partition(":")
    assert name == topic, assignment
    return sorted(int(p) for p in numbers.split(","))


def kill(processes: list[subprocess.Popen]) -> None:
    """Kills those of `processes` still running (a test that failed before they finished)."""
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.communicate()


# --- 1. Java console consumers split a topic; kafka-consumer-groups ----------------------------

def test_two_java_consumers_split_four_partitions_and_kafka_consumer_groups_describes_and_lists_the_group(
        start_node):
    node = start_node()
    topic, group = "kip848-split", "kip848-split-g"
    create_topic(node.bootstrap, topic, 4)
    # A classic group beside it (offsets committed by a classic librdkafka client), for --type.
    classic = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "kip848-classic-g", "log_level": 3})
    try:
        classic.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        classic.close()

    # Each prints 100 records (two partitions' worth, below) and exits.
    consumers = [console_consumer_process(node.bootstrap, topic, group, "--max-messages", "100",
                                          "--timeout-ms", "45000", "--formatter-property", "print.partition=true")
                 for _ in range(2)]
    try:
        last: list = []

        def split():
            out = groups_tool(node, "--describe", "--group", group, "--members", "--verbose")
            if out is None:
                return None
            rows = table(out)
            last[:] = [rows]
            members = [(partitions(r["CURRENT-ASSIGNMENT"], topic), r["CURRENT-EPOCH"],
                        partitions(r["TARGET-ASSIGNMENT"], topic), r["TARGET-EPOCH"], r["#PARTITIONS"])
                       for r in rows]
            if len(members) != 2 or any(cur != target or epoch != target_epoch or n != "2"
                                        for cur, epoch, target, target_epoch, n in members):
                return None
            assert sorted(p for cur, *_ in members for p in cur) == [0, 1, 2, 3], rows
            state = group_state(node, group)
            last.append(state)
            return members if state == ("uniform", "Stable", "2") else None

        try:
            members = wait_until("two members holding two partitions each, Stable", split, timeout=45, interval=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}; last described: {last}") from None
        # Both members reconciled to one group epoch.
        assert members[0][1] == members[1][1], members

        assert listed(node, "consumer") == {group: "Consumer"}
        assert listed(node, "classic") == {"kip848-classic-g": "Classic"}

        sent = produce(node.bootstrap, topic, lines("k", 0, 200), partitions=4)
        outs = [c.communicate(timeout=60) for c in consumers]
    finally:
        kill(consumers)
    for c, (out, err) in zip(consumers, outs):
        assert c.returncode == 0, err[-2000:]
        assert "Processed a total of 100 messages" in err, err[-2000:]
    printed = [[line.split("\t", 1) for line in out.splitlines()] for out, _ in outs]
    got = sorted((int(p.removeprefix("Partition:")), v) for per in printed for p, v in per)
    assert got == sorted((p, v.decode()) for p, _, v in sent)
    # Each printed the two partitions it was described holding.
    held = sorted(sorted({int(p.removeprefix("Partition:")) for p, _ in per}) for per in printed)
    assert held == sorted(cur for cur, *_ in members), (held, members)


# --- 2. A Java consumer resumes at its committed offsets ---------------------------------------

def test_java_consumer_resumes_at_the_offsets_it_committed_on_closing(start_node):
    node = start_node()
    topic, group = "kip848-resume", "kip848-resume-g"
    create_topic(node.bootstrap, topic, 2)

    def run(n: int) -> list[str]:
        done = console_consumer(node.bootstrap, topic, group, "--max-messages", str(n), "--timeout-ms", "30000")
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"Processed a total of {n} messages" in done.stderr, done.stderr[-2000:]
        return sorted(done.stdout.splitlines())

    first = lines("r", 0, 100)
    produce(node.bootstrap, topic, first, partitions=2)
    assert run(100) == sorted(v.decode() for v in first)
    # Closing after --max-messages committed what was consumed (enable.auto.commit).
    assert committed(node.bootstrap, group, topic, 2) == {0: 50, 1: 50}
    second = lines("r", 100, 150)
    produce(node.bootstrap, topic, second, partitions=2)
    assert run(50) == sorted(v.decode() for v in second)  # --from-beginning notwithstanding
    assert committed(node.bootstrap, group, topic, 2) == {0: 75, 1: 75}


# --- 3. librdkafka ----------------------------------------------------------------------------

def test_two_librdkafka_consumers_split_four_partitions_and_a_later_member_gets_only_newer_records(start_node):
    node = start_node()
    topic, group = "kip848-rdkafka", "kip848-rdkafka-g"
    create_topic(node.bootstrap, topic, 4)
    errors: list[str] = []

    def member(client_id: str) -> Consumer:
        # No partition.assignment.strategy, session.timeout.ms or heartbeat.interval.ms: with
        # group.protocol=consumer librdkafka refuses them (the broker decides those).
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "group.protocol": "consumer",
                      "client.id": client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "log_level": 3, "error_cb": lambda e: errors.append(f"{client_id}: {e}")})
        c.subscribe([topic])
        return c

    a, b = member("kip848-a"), member("kip848-b")
    received: dict[str, list[tuple[int, int, bytes]]] = {"a": [], "b": []}

    def poll_both() -> None:
        for name, c in (("a", a), ("b", b)):
            m = c.poll(0.1)
            if m is not None:
                assert m.error() is None, m.error()
                received[name].append((m.partition(), m.offset(), m.value()))

    try:
        def split():
            poll_both()
            held = [sorted(tp.partition for tp in c.assignment()) for c in (a, b)]
            return held if [len(h) for h in held] == [2, 2] else None

        try:
            held = wait_until("assignments of 2 and 2 partitions", split, timeout=40, interval=0)
        except AssertionError as e:
            raise AssertionError(f"{e}: assignments {[c.assignment() for c in (a, b)]}; errors {errors}") from None
        assert sorted(held[0] + held[1]) == [0, 1, 2, 3], held
        assert received == {"a": [], "b": []}, "records before any were produced"

        sent = produce(node.bootstrap, topic, lines("rd", 0, 200), partitions=4)
        wait_until("200 records between the two", lambda: poll_both() or len(received["a"]) + len(received["b"]) >= 200,
                   timeout=40, interval=0)
        for c in (a, b):
            assert_nothing_more(c, 1.0)
        assert sorted(received["a"] + received["b"]) == sorted(sent)
        # Each received exactly its own partitions' records.
        assert sorted({p for p, _, _ in received["a"]}) == held[0], (held, {p for p, _, _ in received["a"]})
        assert sorted({p for p, _, _ in received["b"]}) == held[1], (held, {p for p, _, _ in received["b"]})
        for c in (a, b):
            c.commit(asynchronous=False)
    finally:
        a.close()
        b.close()
    assert committed(node.bootstrap, group, topic, 4) == {p: 50 for p in range(4)}
    assert not errors, errors

    later = member("kip848-later")
    try:
        newer = produce(node.bootstrap, topic, lines("rd", 200, 220), partitions=4)
        got = consume_n(later, 20, timeout=40)
        assert sorted(got) == sorted(newer)
        assert {o for _, o, _ in got} == set(range(50, 55)), got
        assert_nothing_more(later, 1.0)
    finally:
        later.close()
    assert not errors, errors


# --- 4. Server-side assignors -----------------------------------------------------------------

def test_a_node_offering_only_range_serves_it_and_refuses_sticky_and_uniform(start_node, tmp_path):
    node = start_node({"group.consumer.assignors": "range"})
    topic, group = "kip848-range", "kip848-range-g"
    create_topic(node.bootstrap, topic, 4)

    consumer = console_consumer_process(node.bootstrap, topic, group, "--max-messages", "20", "--timeout-ms", "45000",
                                        "--command-property", "group.remote.assignor=range")
    try:
        wait_until("the group Stable with the range assignor",
                   lambda: group_state(node, group) == ("range", "Stable", "1"), timeout=40, interval=0.5)
        sent = produce(node.bootstrap, topic, lines("rg", 0, 20), partitions=4)
        out, err = consumer.communicate(timeout=60)
    finally:
        kill([consumer])
    assert consumer.returncode == 0, err[-2000:]
    assert sorted(out.splitlines()) == sorted(v.decode() for _, _, v in sent)

    # sticky is no server-side assignor of Sluice (nor of Kafka): the heartbeat is refused, the
    # console consumer ends at once (well before its --timeout-ms) having printed none of the
    # 20 records, and Kafka's consumer reports UnsupportedAssignorException.
    started = time.monotonic()
    done = console_consumer(node.bootstrap, topic, "kip848-sticky-g", "--timeout-ms", "40000",
                            "--command-property", "group.remote.assignor=sticky")
    elapsed = time.monotonic() - started
    assert (done.returncode, done.stdout) == (0, ""), done
    assert "Processed a total of 0 messages" in done.stderr, done.stderr
    assert elapsed < 35, f"the console consumer idled out ({elapsed:.1f} s) rather than stopping at the refusal"
    for assignor in ("sticky", "uniform"):  # uniform is a Sluice assignor, but not one this node offers
        done = java_member(tmp_path, node.bootstrap, topic, f"kip848-{assignor}-g", 20,
                           f"group.remote.assignor={assignor}")
        assert done.returncode == 2, done
        assert done.stdout.startswith("ERROR org.apache.kafka.common.errors.UnsupportedAssignorException: "), done
        assert f"{assignor} is not supported" in done.stdout, done.stdout


# --- 5. Authorization -------------------------------------------------------------------------

def test_a_member_with_read_on_the_topic_but_not_on_the_group_is_refused_until_granted(start_node, tmp_path):
    """As test_security_acls.py: StandardAuthorizer, deny by default, SCRAM users. `reader` has
    READ on the topic and DESCRIBE on the group, so FindCoordinator succeeds and
    ConsumerGroupHeartbeat, which needs READ on the group, is what refuses it."""
    settings = {"authorizer.class.name": AUTHORIZER, "super.users": "User:admin", "sasl.enabled.mechanisms": MECHANISM}
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM, "sasl.username": "admin",
                "sasl.password": "admin-secret"}
    scram = [arg for user in ("admin", "reader") for arg in
             ("--add-scram", f"{MECHANISM}=[name={user},password={user}-secret]")]
    node = start_node(settings, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, client_security=security,
                      extra_args=scram, env={"RUST_LOG": "info,authorizer=debug"})
    topic, group = "kip848-secured", "kip848-secured-g"
    create_topics(node, topic)
    assert produce_as(node, "admin", topic, 5) == list(range(5))
    grant(node, binding("reader", ResourceType.TOPIC, topic, AclOperation.READ),
          binding("reader", ResourceType.GROUP, group, AclOperation.DESCRIBE))
    config = login(node, "reader").java_properties(tmp_path / "reader.properties")
    values = [f"{topic}-{i}" for i in range(5)]
    denied = f"Principal = User:reader is Denied operation = READ from host = 127.0.0.1 on resource = Group:LITERAL:{group}"

    # The console consumer stops at the refusal: exit 0, nothing printed (see the module docstring).
    started = time.monotonic()
    done = console_consumer(node.bootstrap, topic, group, "--command-config", str(config), "--timeout-ms", "40000")
    elapsed = time.monotonic() - started
    assert (done.returncode, done.stdout) == (0, ""), done
    assert "Processed a total of 0 messages" in done.stderr, done.stderr
    assert elapsed < 35, f"the console consumer idled out ({elapsed:.1f} s) rather than stopping at the refusal"
    wait_for_log(node, denied)
    # Kafka's consumer itself: GroupAuthorizationException.
    done = java_member(tmp_path, node.bootstrap, topic, group, 5, f"@{config}")
    assert done.returncode == 2, done
    assert done.stdout.startswith("ERROR org.apache.kafka.common.errors.GroupAuthorizationException: "), done
    assert group in done.stdout, done.stdout
    assert not log_lines(node, "Principal = User:reader is Denied operation = DESCRIBE"), \
        "something other than READ on the group was refused"

    grant(node, binding("reader", ResourceType.GROUP, group, AclOperation.READ))
    done = console_consumer(node.bootstrap, topic, group, "--command-config", str(config), "--max-messages", "5",
                            "--timeout-ms", "30000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == values, done


# --- 6. Coordinator failover ------------------------------------------------------------------

def test_a_consumer_group_survives_its_coordinator_being_killed_with_its_epochs_and_assignment(cluster):
    """On 3 nodes, two librdkafka members (group.protocol=consumer) hold 2 partitions each at
    member epoch 4 or more (a third member came and went); the group's coordinator is killed.
    The new coordinator rebuilds the group from its __consumer_offsets records: the members go
    on at their epochs (a group rebuilt from scratch by rejoins could not be past epoch 3) and
    together receive every record produced after the kill."""
    nodes = cluster()
    bootstrap = ",".join(n.bootstrap for n in nodes)
    topic, group = "kip848-failover", "kip848-failover-g"
    create_topic(bootstrap, topic, 4, replication_factor=3)
    errors: list[str] = []

    def member(client_id: str) -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                      "client.id": client_id, "auto.offset.reset": "earliest", "log_level": 3,
                      "error_cb": lambda e: errors.append(f"{client_id}: {e}")})
        c.subscribe([topic])
        return c

    received: list[tuple[int, int, bytes]] = []

    def poll(consumers: list[Consumer]) -> None:
        for c in consumers:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                received.append((m.partition(), m.offset(), m.value()))

    def members_described(node) -> list[dict[str, str]] | None:
        out = groups_tool(node, "--describe", "--group", group, "--members", "--verbose")
        return None if out is None else table(out)

    a, b = member("kip848-fo-a"), member("kip848-fo-b")
    try:
        def held(consumers: list[Consumer], sizes: list[int]):
            poll(consumers)
            return [len(c.assignment()) for c in consumers] == sizes or None

        wait_until("a and b to hold 2 partitions each", lambda: held([a, b], [2, 2]), timeout=40, interval=0)
        c = member("kip848-fo-c")
        wait_until("a third member to be given a partition", lambda: held([a, b, c], [1, 1, 2]) or
                   held([a, b, c], [2, 1, 1]) or held([a, b, c], [1, 2, 1]), timeout=60, interval=0)
        c.close()
        wait_until("a and b to hold 2 partitions each again", lambda: held([a, b], [2, 2]), timeout=60, interval=0)

        def settled(node):
            rows = members_described(node)
            if not rows or len(rows) != 2:
                return None
            if any(r["CURRENT-EPOCH"] != r["TARGET-EPOCH"] or r["#PARTITIONS"] != "2" for r in rows):
                return None
            return rows

        before = wait_until("the group to settle at one epoch", lambda: settled(nodes[0]), timeout=60, interval=0.5)
        epoch = min(int(r["CURRENT-EPOCH"]) for r in before)
        assert epoch >= 4, before

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        coordinator = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15).coordinator.id
        victim = next(n for n in nodes if n.node_id == coordinator)
        survivor = next(n for n in nodes if n.node_id != coordinator)
        victim.kill()

        sent = produce(survivor.bootstrap, topic, lines("fo", 0, 200), partitions=4)
        wait_until("every record produced after the kill", lambda: poll([a, b]) or
                   {v for _, _, v in received} >= {v for _, _, v in sent}, timeout=90, interval=0)
        after = wait_until("the group described by its new coordinator", lambda: settled(survivor), timeout=60,
                           interval=0.5)
        assert {r["CONSUMER-ID"] for r in after} == {r["CONSUMER-ID"] for r in before}
        assert min(int(r["CURRENT-EPOCH"]) for r in after) >= epoch, (before, after)
    finally:
        a.close()
        b.close()


# --- 6. Fifty members joining and leaving under load ------------------------------------------

def test_fifty_members_joining_and_leaving_under_load_get_every_record_once(start_node):
    """A KIP-848 group of librdkafka consumers on a 100-partition topic: 40 members settle, then
    records flow (about 1,000 a second) while 10 more join and 10 leave, one a second. Every
    record produced is delivered to the group exactly once (partitions move only once revoked
    and committed by their previous owner). The longest pause in consumption of the members
    there throughout is printed, not asserted (a speed figure, for the benchmark to judge)."""
    node = start_node()
    topic, group = "kip848-churn", "kip848-churn-g"
    create_topic(node.bootstrap, topic, 100)
    errors: list[str] = []
    members = [PollingMember(node.bootstrap, topic, group, f"churn-{i}", errors) for i in range(40)]
    joiners: list[PollingMember] = []
    stop_producing = threading.Event()
    produced: list[str] = []

    def producer() -> None:
        p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5, "log_level": 3})
        i = 0
        while not stop_producing.is_set():
            for _ in range(50):
                p.produce(topic, value=str(i).encode(), partition=i % 100)
                produced.append(str(i))
                i += 1
            p.poll(0)
            time.sleep(0.05)
        assert p.flush(60) == 0

    try:
        wait_until("40 members to share the 100 partitions",
                   lambda: sum(m.assigned for m in members) == 100 and all(m.assigned for m in members) or None,
                   timeout=120, interval=0.5)
        feeding = threading.Thread(target=producer, daemon=True)
        feeding.start()
        time.sleep(2)  # load before the churn: the window the pauses are measured in starts here
        churn_start = time.monotonic()
        for i in range(10):
            joiners.append(PollingMember(node.bootstrap, topic, group, f"churn-join-{i}", errors))
            time.sleep(1)
        leaving = members[:5] + joiners[:5]
        for m in leaving:
            m.leave()
            time.sleep(1)
        churn_end = time.monotonic()
        stop_producing.set()
        feeding.join(timeout=60)

        def all_delivered():
            seen = {v for m in members + joiners for _, v in m.got}
            return len(seen) >= len(produced) or None

        wait_until(f"all {len(produced)} records delivered", all_delivered, timeout=120, interval=0.5)
    finally:
        stop_producing.set()
        for m in members + joiners:
            m.leave()
    assert not errors, errors[:10]
    counts = Counter(v for m in members + joiners for _, v in m.got)
    assert set(counts) == set(produced), f"{len(set(produced) - set(counts))} records never delivered"
    twice = [v for v, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} records delivered more than once, e.g. {twice[:10]}"
    gaps = sorted(m.longest_gap(churn_start, churn_end) for m in members[5:])
    print(f"kip848 churn: {len(produced)} records, 10 joined and 10 left in {churn_end - churn_start:.1f} s; "
          f"longest pause of the 35 members there throughout: median {gaps[len(gaps) // 2] * 1000:.0f} ms, "
          f"max {gaps[-1] * 1000:.0f} ms")


# --- 8. Online migration between the classic and consumer protocols ------------------------------

def group_type(bootstrap: str, group: str) -> str | None:
    """The group's type as ListGroups reports it ("CLASSIC", "CONSUMER"), None if not listed."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    listed = admin.list_consumer_groups(request_timeout=10).result(timeout=20)
    for g in listed.valid:
        if g.group_id == group:
            return g.type.name
    return None


def test_a_classic_group_converts_online_to_a_consumer_group_and_back_as_a_kip848_member_comes_and_goes(start_node):
    """group.consumer.migration.policy (Kafka's default, bidirectional): two librdkafka members
    of a classic group (eager range) consume; a member with group.protocol=consumer joins while
    they are in, and the group becomes a consumer group without stopping them: the classic
    members go on through JoinGroup/SyncGroup/Heartbeat, the new member gets a share of the
    partitions, and records keep flowing to the three. When the KIP-848 member leaves, the group
    is classic again and the two take all partitions back. No record is lost at any step."""
    node = start_node({"group.initial.rebalance.delay.ms": "0"})
    topic, group = "kip848-migrate", "kip848-migrate-g"
    create_topic(node.bootstrap, topic, 4)
    errors: list[str] = []
    classic = [PollingMember(node.bootstrap, topic, group, f"classic-{i}", errors, protocol="classic")
               for i in range(2)]
    kip848: PollingMember | None = None
    produced: list[str] = []

    def delivered(members: list[PollingMember]) -> set[str]:
        return {v for m in members for _, v in m.got}

    def feed(start: int, end: int, members: list[PollingMember]) -> None:
        values = lines("mig", start, end)
        produce(node.bootstrap, topic, values, partitions=4)
        produced.extend(v.decode() for v in values)
        wait_until(f"records up to {end} delivered", lambda: delivered(members) >= set(produced) or None,
                   timeout=60, interval=0.2)

    try:
        wait_until("the two classic members to split the partitions",
                   lambda: sum(m.assigned for m in classic) == 4 and all(m.assigned for m in classic) or None,
                   timeout=60, interval=0.2)
        assert group_type(node.bootstrap, group) == "CLASSIC"
        feed(0, 200, classic)

        kip848 = PollingMember(node.bootstrap, topic, group, "kip848", errors, protocol="consumer")
        everyone = classic + [kip848]
        wait_until("the group to become a consumer group shared by all three",
                   lambda: (group_type(node.bootstrap, group) == "CONSUMER"
                            and sum(m.assigned for m in everyone) == 4 and all(m.assigned for m in everyone)) or None,
                   timeout=90, interval=0.5)
        first_of_kip848 = len(kip848.got)
        feed(200, 400, everyone)
        assert len(kip848.got) > first_of_kip848, "the KIP-848 member got none of the records sent to its partitions"

        kip848.leave()
        wait_until("the group to be classic again with the two holding every partition",
                   lambda: (group_type(node.bootstrap, group) == "CLASSIC"
                            and sum(m.assigned for m in classic) == 4 and all(m.assigned for m in classic)) or None,
                   timeout=90, interval=0.5)
        feed(400, 600, everyone)
    finally:
        for m in classic + ([kip848] if kip848 else []):
            m.leave()
    assert not errors, errors[:10]
    lost = set(produced) - delivered(classic + [kip848])
    assert not lost, f"{len(lost)} records never delivered, e.g. {sorted(lost)[:5]}"
    assert node.is_running(), "the node must survive both conversions"


def test_java_classic_consumers_carry_on_through_both_conversions(start_node):
    """The same with Kafka's own client as the classic members: two kafka-console-consumer
    processes (the Java client's default protocols, range first) print every record through
    the upgrade brought by a librdkafka KIP-848 member and the downgrade after it leaves."""
    node = start_node({"group.initial.rebalance.delay.ms": "0"})
    topic, group = "kip848-migrate-java", "kip848-migrate-java-g"
    create_topic(node.bootstrap, topic, 4)
    jars = os.pathsep.join(str(j) for j in sorted(JAVA_LIB.glob("*.jar")))
    printed: list[str] = []
    consoles = [subprocess.Popen(
        ["java", "-cp", jars, CONSOLE_CONSUMER, "--bootstrap-server", node.bootstrap, "--topic", topic,
         "--group", group, "--from-beginning", "--timeout-ms", "90000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for c in consoles:
        threading.Thread(target=lambda c=c: [printed.append(line.strip()) for line in c.stdout], daemon=True).start()
    errors: list[str] = []
    kip848: PollingMember | None = None
    produced: list[str] = []

    def feed(start: int, end: int) -> None:
        values = lines("jmig", start, end)
        produce(node.bootstrap, topic, values, partitions=4)
        produced.extend(v.decode() for v in values)
        got = lambda: set(printed) | ({v for _, v in kip848.got} if kip848 else set())  # noqa: E731
        wait_until(f"records up to {end} delivered", lambda: got() >= set(produced) or None, timeout=60, interval=0.2)

    try:
        wait_until("the console consumers' classic group", lambda: group_type(node.bootstrap, group) == "CLASSIC",
                   timeout=60, interval=0.5)
        feed(0, 100)
        kip848 = PollingMember(node.bootstrap, topic, group, "kip848-java-mig", errors, protocol="consumer")
        wait_until("the group to become a consumer group with the KIP-848 member holding partitions",
                   lambda: group_type(node.bootstrap, group) == "CONSUMER" and kip848.assigned > 0 or None,
                   timeout=90, interval=0.5)
        feed(100, 300)
        kip848.leave()
        wait_until("the group to be classic again", lambda: group_type(node.bootstrap, group) == "CLASSIC",
                   timeout=90, interval=0.5)
        feed(300, 400)
        assert all(c.poll() is None for c in consoles), "a console consumer exited early"
    finally:
        for c in consoles:
            c.kill()
            c.wait(timeout=30)
        if kip848:
            kip848.leave()
    assert not errors, errors[:10]
