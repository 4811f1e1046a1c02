"""Helpers for the KIP-932 share-group tests (test_share_groups.py): a share-group member on
Kafka's own KafkaShareConsumer run as a subprocess (so a test can SIGKILL it mid-delivery, as a
crashed consumer), and the admin side through Kafka's own tools: kafka-share-groups
(ShareGroupCommand) and kafka-configs for a group's settings.

Everything here talks the Kafka protocol only, so the same helpers drive a sluice node and a real
Apache Kafka node (scripts/kafka-as-sluice.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from group_clients import wait_until
from test_java_cli import JAVA_LIB
from test_java_groups import table

SHARE_GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"  # kafka-share-groups.sh
CONFIG_TOOL = "org.apache.kafka.tools.ConfigCommand"  # kafka-configs.sh

# A share-group member as a user writes one on Kafka's KafkaShareConsumer: subscribes to <topic>
# and polls, printing one line per record delivered, `<partition> <offset> <delivery count>
# <value>`, flushed after each poll, until it printed <count> records (-1: until killed),
# <timeout ms> passed or SIGTERM arrived; then it closes (leaving the group). An exception is
# printed as "ERROR <exception class>: <message>" (exit 2). Arguments after the first three:
# `--ack=MODE`, `--reject=REGEX`, `--release=REGEX`, `--sleep-ms=N`, or a client property k=v.
#   --ack=explicit (default): share.acknowledgement.mode=explicit; each record is acknowledged
#       ACCEPT, or REJECT / RELEASE when its value matches --reject / --release, and commitSync()
#       follows each poll (a failed acknowledgement is printed "ACK-ERROR <partition>
#       <exception class>: <message>"), then "COMMITTED": the records printed before it were
#       acknowledged, those of a partition with an ACK-ERROR line excepted.
#   --ack=implicit: the default mode, the next poll accepts what the last one delivered.
#   --ack=hold: explicit mode, but after the first poll that delivered records it acknowledges
#       nothing and polls no more, holding their acquisition locks until it is killed.
#   --sleep-ms=N: N ms of "processing" per record, so one member cannot drain a partition alone.
#   --renew-ms=N: explicit mode; the first records delivered are worked on for N ms, their
#       acquisition locks renewed (AcknowledgeType.RENEW, KIP-1222) and committed every 1.5 s;
#       a renewed record is acknowledged again only once a poll presented it again, so each round
#       polls and prints "RENEWED <records that poll presented>" (after any ACK-ERROR lines);
#       then they are accepted.
SHARE_MEMBER = """\
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.WakeupException;

public class ShareMember {
    public static void main(String[] args) throws Exception {
        String topic = args[0];
        long want = Long.parseLong(args[1]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[2]);
        String ack = "explicit";
        Pattern reject = null, release = null;
        long sleepMs = 0;
        long renewMs = 0;
        boolean renewed = false;
        Properties props = new Properties();
        props.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            switch (kv[0]) {
                case "--ack": ack = kv[1]; break;
                case "--reject": reject = Pattern.compile(kv[1]); break;
                case "--release": release = Pattern.compile(kv[1]); break;
                case "--sleep-ms": sleepMs = Long.parseLong(kv[1]); break;
                case "--renew-ms": renewMs = Long.parseLong(kv[1]); break;
                default: props.put(kv[0], kv[1]);
            }
        }
        boolean explicit = !ack.equals("implicit");
        if (explicit) {
            props.put("share.acknowledgement.mode", "explicit");
        }
        long got = 0;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            // SIGTERM: wake the poll loop so that the consumer is closed (leaving the group).
            Thread loop = Thread.currentThread();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                consumer.wakeup();
                try {
                    loop.join(10000);
                } catch (InterruptedException e) {
                    // exiting anyway
                }
            }));
            consumer.subscribe(List.of(topic));
            while ((want < 0 || got < want) && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                boolean renewing = renewMs > 0 && !renewed && !records.isEmpty();
                for (ConsumerRecord<String, String> r : records) {
                    Optional<Short> deliveries = r.deliveryCount();
                    System.out.println(r.partition() + " " + r.offset() + " "
                        + deliveries.map(String::valueOf).orElse("-") + " " + r.value());
                    got++;
                    if (sleepMs > 0) {
                        Thread.sleep(sleepMs);
                    }
                    if (explicit && !ack.equals("hold") && !renewing) {
                        AcknowledgeType type = AcknowledgeType.ACCEPT;
                        if (reject != null && reject.matcher(r.value()).matches()) {
                            type = AcknowledgeType.REJECT;
                        } else if (release != null && release.matcher(r.value()).matches()) {
                            type = AcknowledgeType.RELEASE;
                        }
                        consumer.acknowledge(r, type);
                    }
                }
                System.out.flush();
                if (renewing) {
                    renewed = true;
                    // By name: Kafka 4.1's client, which this also compiles against, has no RENEW.
                    AcknowledgeType renew = AcknowledgeType.valueOf("RENEW");
                    long until = System.currentTimeMillis() + renewMs;
                    while (System.currentTimeMillis() < until) {
                        Thread.sleep(1500);
                        for (ConsumerRecord<String, String> r : records) {
                            consumer.acknowledge(r, renew);
                        }
                        printFailures(consumer.commitSync());
                        ConsumerRecords<String, String> again = consumer.poll(Duration.ZERO);
                        System.out.println("RENEWED " + again.count());
                        System.out.flush();
                    }
                    for (ConsumerRecord<String, String> r : records) {
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                }
                if (ack.equals("hold") && !records.isEmpty()) {
                    Thread.sleep(Long.MAX_VALUE);  // a consumer stuck in processing, until killed
                }
                if (explicit && !records.isEmpty()) {
                    printFailures(consumer.commitSync());
                    System.out.println("COMMITTED");
                    System.out.flush();
                }
            }
        } catch (WakeupException e) {
            // shut down by SIGTERM; the consumer was closed
        } catch (Exception e) {
            System.out.println("ERROR " + e.getClass().getName() + ": " + e.getMessage());
            System.out.flush();
            System.exit(2);
        }
    }

    static void printFailures(Map<TopicIdPartition, Optional<KafkaException>> results) {
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : results.entrySet()) {
            if (e.getValue().isPresent()) {
                KafkaException x = e.getValue().get();
                System.out.println("ACK-ERROR " + e.getKey().partition() + " "
                    + x.getClass().getName() + ": " + x.getMessage());
            }
        }
    }
}
"""

# Small, quick-starting JVMs: a test runs up to ten members beside the broker on two cores.
MEMBER_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]

# Kafka 4.1's Java client alone (scripts/java-lib.sh): the first KafkaShareConsumer, a preview.
JAVA_LIB_4_1 = JAVA_LIB.parent / ".java-lib-4.1"

_compiled: dict[Path, Path] = {}
_compile_lock = threading.Lock()


def jars(lib: Path = JAVA_LIB) -> str:
    found = sorted(lib.glob("*.jar"))
    assert found, f"no Kafka jars in {lib}; scripts/java-lib.sh fetches them with Maven"
    return os.pathsep.join(str(j) for j in found)


def member_classes(lib: Path = JAVA_LIB) -> Path:
    """SHARE_MEMBER compiled once per test session and client (javac), so that starting ten
    members does not compile it ten times as `java ShareMember.java` would."""
    with _compile_lock:
        if lib not in _compiled:
            out = Path(tempfile.mkdtemp(prefix="sluice-share-member-"))
            (out / "ShareMember.java").write_text(SHARE_MEMBER)
            done = subprocess.run(["javac", "-cp", jars(lib), "-d", str(out), str(out / "ShareMember.java")],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"javac ShareMember.java against {lib} failed:\n{done.stdout}{done.stderr}"
            _compiled[lib] = out
        return _compiled[lib]


@dataclass(frozen=True)
class Delivery:
    """One record as a member printed it."""
    partition: int
    offset: int
    delivery_count: int
    value: str


class ShareMember:
    """One SHARE_MEMBER process; a thread collects its output lines as they are printed."""

    def __init__(self, bootstrap: str, topic: str, group: str, count: int = -1, timeout_ms: int = 120_000,
                 ack: str = "explicit", reject: str | None = None, release: str | None = None,
                 sleep_ms: int = 0, client_id: str | None = None, client_lib: Path = JAVA_LIB,
                 renew_ms: int = 0, **props: str):
        args = [f"--ack={ack}"]
        if renew_ms:
            args.append(f"--renew-ms={renew_ms}")
        if reject is not None:
            args.append(f"--reject={reject}")
        if release is not None:
            args.append(f"--release={release}")
        if sleep_ms:
            args.append(f"--sleep-ms={sleep_ms}")
        config = {"bootstrap.servers": bootstrap, "group.id": group, **props}
        if client_id:
            config["client.id"] = client_id
        self.name = client_id or group
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            ["java", *MEMBER_JVM, "-cp", f"{member_classes(client_lib)}{os.pathsep}{jars(client_lib)}", "ShareMember",
             topic, str(count), str(timeout_ms), *args, *(f"{k}={v}" for k, v in config.items())],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self._stderr), daemon=True)]
        for t in self._readers:
            t.start()

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            with self._lock:
                into.append(line.rstrip("\n"))

    def output(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def deliveries(self) -> list[Delivery]:
        """The records printed so far."""
        out = []
        for line in self.output():
            fields = line.split(" ", 3)
            if len(fields) == 4 and fields[0].isdigit():
                out.append(Delivery(int(fields[0]), int(fields[1]), int(fields[2]), fields[3]))
        return out

    def acknowledged(self) -> list[Delivery]:
        """The records printed before the last COMMITTED line whose acknowledgement was not
        refused (no ACK-ERROR for their partition in that commit or an earlier one)."""
        out: list[Delivery] = []
        pending: list[Delivery] = []
        refused: set[int] = set()
        for line in self.output():
            fields = line.split(" ", 3)
            if len(fields) == 4 and fields[0].isdigit():
                pending.append(Delivery(int(fields[0]), int(fields[1]), int(fields[2]), fields[3]))
            elif line.startswith("ACK-ERROR "):
                refused.add(int(line.split(" ", 2)[1]))
            elif line == "COMMITTED":
                out.extend(d for d in pending if d.partition not in refused)
                pending, refused = [], set()
        return out

    def errors(self) -> list[str]:
        """ERROR and ACK-ERROR lines printed so far."""
        return [line for line in self.output() if line.startswith(("ERROR ", "ACK-ERROR "))]

    def stderr_tail(self, lines: int = 20) -> str:
        with self._lock:
            return "\n".join(self._stderr[-lines:])

    def wait_for(self, n: int, timeout: float = 60.0) -> list[Delivery]:
        """Waits until this member printed at least `n` records; fails on an ERROR line."""
        def enough():
            errors = self.errors()
            assert not errors, f"{self.name}: {errors}"
            got = self.deliveries()
            return got if len(got) >= n else None
        try:
            return wait_until(f"{self.name} to print {n} records", enough, timeout, interval=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}; it printed {len(self.deliveries())}, exit {self.proc.poll()}, "
                                 f"stderr:\n{self.stderr_tail()}") from None

    def wait(self, timeout: float = 120.0) -> int:
        """Waits for the process to exit (count reached or timed out) and its output to be read."""
        code = self.proc.wait(timeout=timeout)
        for t in self._readers:
            t.join(timeout=10)
        return code

    def freeze(self) -> None:
        """SIGSTOP: a member hung in processing; its connections stay open, so only the
        acquisition lock gives its records back."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        """SIGKILL: a crash; the member neither acknowledges nor leaves the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.wait(timeout=30)

    def terminate(self) -> None:
        """SIGTERM: a clean shutdown; the member closes its consumer, which leaves the group."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.wait(timeout=30)


def start_members(n: int, bootstrap: str, topic: str, group: str, **kwargs) -> list[ShareMember]:
    """`n` members of `group` (client ids <group>-1..n), each a ShareMember(**kwargs)."""
    return [ShareMember(bootstrap, topic, group, client_id=f"{group}-{i + 1}", **kwargs) for i in range(n)]


def stop_members(members: list[ShareMember]) -> None:
    """Kills those of `members` still running (a test that failed before they finished)."""
    for m in members:
        m.kill()


def all_deliveries(members: list[ShareMember]) -> list[Delivery]:
    return [d for m in members for d in m.deliveries()]


def wait_for_total(members: list[ShareMember], n: int, timeout: float = 120.0) -> list[Delivery]:
    """Waits until `members` together printed at least `n` records; fails on an ERROR line."""
    def enough():
        for m in members:
            assert not m.errors(), f"{m.name}: {m.errors()}"
        got = all_deliveries(members)
        return got if len(got) >= n else None
    try:
        return wait_until(f"{n} records across {len(members)} members", enough, timeout, interval=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}; printed {[len(m.deliveries()) for m in members]}, exits "
                             f"{[m.proc.poll() for m in members]}") from None


def produce_values(bootstrap: str, topic: str, values: list[str], partitions: int = 1,
                   batch: int = 10) -> None:
    """Produces `values` (value i to partition i % partitions), flushing every `batch` records so
    that they land in batches of about that size: a share fetch acquires whole batches, so small
    batches let members of a group share a partition record by record."""
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0})
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)

    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions, on_delivery=on_delivery)
        if (i + 1) % batch == 0:
            assert p.flush(60) == 0, "records still queued after 60 s"
    assert p.flush(60) == 0, "records still queued after 60 s"
    assert not errors, errors[:5]


# --- admin: kafka-share-groups and kafka-configs ----------------------------------------------

def kafka_tool(main_class: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """One run of a Kafka CLI tool class; the caller checks the outcome."""
    return subprocess.run(["java", "-XX:TieredStopAtLevel=1", "-cp", jars(), main_class, *args],
                          capture_output=True, text=True, timeout=timeout)


def share_groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """kafka-share-groups --bootstrap-server <bootstrap> <args>."""
    return kafka_tool(SHARE_GROUPS_TOOL, "--bootstrap-server", bootstrap, *args)


def share_groups_ok(bootstrap: str, *args: str) -> str:
    """kafka-share-groups' stdout; fails if it exits non-zero or prints an `Error: ` line (the tool
    reports some failures, e.g. a group that does not exist, that way)."""
    done = share_groups(bootstrap, *args)
    assert done.returncode == 0 and "Error: " not in done.stdout, \
        f"kafka-share-groups {args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def list_share_groups(bootstrap: str) -> set[str]:
    """--list: the share groups' names (Kafka's tool sends ListGroups v5 with TypesFilter
    ["Share"] and no StatesFilter)."""
    return set(share_groups_ok(bootstrap, "--list").split())


def describe_state(bootstrap: str, group: str, *args: str) -> dict[str, str]:
    """--describe --state (`args`: more options, e.g. --command-config): {"GROUP", "COORDINATOR",
    "STATE", "#MEMBERS"}. Kafka prints the coordinator as `host:port  (id)` under a
    `COORDINATOR (ID)` header, both with a space."""
    out = share_groups_ok(bootstrap, *args, "--describe", "--group", group, "--state")
    rows = table(re.sub(r"\s+\((\d+)\)", r"(\1)", out.replace("COORDINATOR (ID)", "COORDINATOR")))
    assert len(rows) == 1, out
    return rows[0]


def describe_members(bootstrap: str, group: str) -> list[dict[str, str]]:
    """--describe --members: one row per member (GROUP, CONSUMER-ID, HOST, CLIENT-ID,
    #PARTITIONS, ASSIGNMENT)."""
    return member_rows(share_groups_ok(bootstrap, "--describe", "--group", group, "--members"))


def member_rows(out: str) -> list[dict[str, str]]:
    """The rows of --describe --members; a member assigned nothing has an empty ASSIGNMENT
    (the last column), kept as ''. No table (`Share group '<g>' has no active members.`): []."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    starts = [i for i, fields in enumerate(lines) if fields[0] == "GROUP"]
    if not starts:
        return []
    header = lines[starts[0]]
    rows = []
    for fields in lines[starts[0] + 1:]:
        if len(fields) == len(header) - 1 and header[-1] == "ASSIGNMENT":
            fields = fields + [""]
        assert len(fields) == len(header), f"row {fields} does not match header {header}:\n{out}"
        rows.append(dict(zip(header, fields)))
    return rows


def describe_offsets(bootstrap: str, group: str) -> list[dict[str, str]]:
    """--describe (--offsets): one row per topic partition (GROUP, TOPIC, PARTITION,
    START-OFFSET, LAG; --verbose adds LEADER-EPOCH), from DescribeShareGroupOffsets. On Kafka
    4.4 START-OFFSET is the start offset the share coordinator last persisted, which can trail
    the acknowledgements; LAG 0 is what says nothing is left to deliver."""
    out = share_groups_ok(bootstrap, "--describe", "--group", group, "--offsets")
    return table(out)


def start_offsets(bootstrap: str, group: str, topic: str) -> dict[int, str]:
    """PARTITION -> START-OFFSET of `topic` from --describe --offsets ('-' where none)."""
    return {int(r["PARTITION"]): r["START-OFFSET"] for r in describe_offsets(bootstrap, group)
            if r["TOPIC"] == topic}


def reset_to_earliest(bootstrap: str, group: str, topic: str) -> str:
    """--reset-offsets --to-earliest --execute for `topic`: the table GROUP TOPIC PARTITION
    NEW-OFFSET. The group must be empty (else stderr "Share group '<group>' is not empty.",
    exit 1)."""
    return share_groups_ok(bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                           "--to-earliest", "--execute")


def delete_group(bootstrap: str, group: str) -> subprocess.CompletedProcess:
    """--delete --group <group>; the caller checks. Kafka's tool prints "Deletion of requested
    share groups ('<group>') was successful." or, for a group with members, "Error: Deletion of
    some share groups failed: * Group '<group>' could not be deleted due to: ...
    GroupNotEmptyException: Share group '<group>' is not EMPTY." on stdout, exiting 0 both times."""
    return share_groups(bootstrap, "--delete", "--group", group)


def set_group_config(bootstrap: str, group: str, *tool_args: str, **settings: str) -> None:
    """kafka-configs --alter --entity-type groups --entity-name <group> --add-config k=v,...
    (IncrementalAlterConfigs on a GROUP resource). Setting names are Kafka's group configs,
    e.g. share.auto.offset.reset; `tool_args` go to the tool as they are (--command-config)."""
    config = ",".join(f"{k}={v}" for k, v in settings.items())
    done = kafka_tool(CONFIG_TOOL, "--bootstrap-server", bootstrap, *tool_args, "--alter", "--entity-type", "groups",
                      "--entity-name", group, "--add-config", config)
    assert done.returncode == 0, f"kafka-configs --add-config {config} for {group}:\n{done.stdout}\n{done.stderr}"


def start_from_earliest(bootstrap: str, group: str, *tool_args: str) -> None:
    """share.auto.offset.reset=earliest for `group` (a share group starts at `latest` by default:
    records produced before its first member fetched would not be delivered)."""
    set_group_config(bootstrap, group, *tool_args, **{"share.auto.offset.reset": "earliest"})


def wait_for_members(bootstrap: str, group: str, n: int, timeout: float = 60.0) -> list[dict[str, str]]:
    """Waits until --describe --members lists `n` members each holding a partition assignment."""
    last: list = []

    def ready():
        done = share_groups(bootstrap, "--describe", "--group", group, "--members")
        if done.returncode != 0 or "Error: " in done.stdout:
            last[:] = [done.stdout + done.stderr]
            return None
        rows = member_rows(done.stdout)
        last[:] = [rows]
        return rows if len(rows) == n and all(r["ASSIGNMENT"] for r in rows) else None

    try:
        return wait_until(f"{n} members in share group {group}", ready, timeout, interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; last described: {last}") from None
