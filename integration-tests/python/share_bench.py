#!/usr/bin/env python3
"""Share-group throughput (KIP-932), measured and printed, never asserted on: a share group of
--members KafkaShareConsumer processes (share_clients.py's ShareMember) drains --records records
of --record-bytes from a topic of --partitions partitions on one broker, a release sluice node
or, with --against-kafka, Apache Kafka 4.4 (scripts/kafka-as-sluice.py). Run through
scripts/share-bench.sh.

The records are produced first (each value is its index, a space, then padding), the group is
set to share.auto.offset.reset=earliest with kafka-configs, and then the members start. Figures,
in the table and the JSON result (default bench-results/share-<UTC>.json):
  time        from the first member's start to the last record delivered (10 JVMs starting and
              joining are part of it), and from the first record delivered to the last;
              records/s and MB/s (10^6 bytes of record values) over each;
  per member  records each member printed;
  exactly     deliveries, distinct indices, indices never delivered, indices delivered more
  once        than once (and of those, how many a crashed member had printed first), and the
              group's LAG from kafka-share-groups --describe --offsets once the run settled (0
              on every partition: every record acknowledged or archived);
  crash       with --crash-after N: the first member to print N records is SIGKILLed then; the
              records delivered again (delivery count >= 2) and when the last of them arrived,
              after the kill (the broker frees a crashed member's records when their
              acquisition lock, group.share.record.lock.duration.ms, expires);
  CPU         the broker's CPU seconds from the first member's start to the last delivery, its
              RSS and peak RSS (/proc/<pid>/status) after, and the members' CPU seconds together.

A run ends when every index was delivered and no delivery came for --quiet-s (and, after a
crash, not before the lock duration passed since the kill, so that redeliveries are counted).
Every process and temporary directory it starts is removed at exit (also on SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402

from group_clients import create_topic  # noqa: E402
from share_clients import MEMBER_JVM, ShareMember, describe_offsets, member_classes, start_from_earliest  # noqa: E402
from sluice_node import SluiceNode  # noqa: E402

WORKSPACE = Path(__file__).resolve().parents[2]
KAFKA = WORKSPACE / "scripts" / "kafka-as-sluice.py"
TOPIC, GROUP = "share-bench", "share-bench-g"

# Kafka alone, as test_share_groups.py sets them: its share-group state topic defaults to 3
# replicas and min.isr 2, which a single node cannot host.
KAFKA_ONLY_SETTINGS = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}
# Kafka's production JVM defaults (kafka-server-start.sh), as scripts/bench_against_kafka.py
# sets them, instead of kafka-as-sluice.py's test-sized ones (small heap, serial GC, C1 only).
KAFKA_HEAP_OPTS = "-Xmx1g -Xms1g"
KAFKA_JVM_PERFORMANCE_OPTS = ("-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
                              "-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true")


class BenchMember(ShareMember):
    """A ShareMember that keeps of each record line only `<partition> <offset> <count> <index>`
    (not the padding: 100,000 lines of 1 KB would be 100 MB in this process) and the time it
    was read, so that the first and last deliveries are timed without polling."""

    def __init__(self, *args, **kwargs):
        self.times: list[float] = []
        super().__init__(*args, **kwargs)

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            now = time.monotonic()
            if line[:1].isdigit():
                line = " ".join(line.split(" ", 4)[:4])
            with self._lock:
                if into is self.lines:
                    self.times.append(now)
                into.append(line.rstrip("\n"))

    def count(self) -> int:
        with self._lock:
            return len(self.lines)

    def since(self, start: int) -> tuple[list[str], list[float]]:
        with self._lock:
            return self.lines[start:], self.times[start:]


# ---------------------------------------------------------------- /proc figures

def cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def rss_kb(pid: int) -> dict:
    out = {"rss_kb": None, "peak_rss_kb": None}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_kb"] = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                out["peak_rss_kb"] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


def uptime() -> str:
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(WORKSPACE), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        return done.stdout.strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------- the run

def value_of(index: int, size: int) -> bytes:
    head = f"{index} ".encode()
    return head + b"x" * max(0, size - len(head))


class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.node: SluiceNode | None = None
        self.members: list[BenchMember] = []
        self.classes: Path | None = None
        self.result: dict = {
            "tool": "share_bench",
            "format": 1,
            "args": vars(args),
            "broker": "kafka" if args.against_kafka else "sluice",
            "commit": git_commit(),
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                        "uptime_before": uptime()},
            "errors": [],
        }

    def log(self, msg: str) -> None:
        print(f"[share {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def error(self, msg: str) -> None:
        self.log(f"ERROR: {msg}")
        self.result["errors"].append(msg)

    def broker_settings(self) -> dict[str, str]:
        a = self.args
        settings: dict[str, str] = {}
        if a.crash_after:
            # Short locks so that a crashed member's records come back within the run (Kafka's
            # default is 30 s; the minimum it accepts is group.share.min.record.lock.duration.ms).
            settings["group.share.record.lock.duration.ms"] = str(a.lock_ms)
            settings["group.share.min.record.lock.duration.ms"] = str(min(1000, a.lock_ms))
        settings.update(dict(kv.split("=", 1) for kv in a.set))
        if a.against_kafka:
            settings = {**KAFKA_ONLY_SETTINGS, **settings}
        return settings

    def start_broker(self) -> None:
        a = self.args
        settings = self.broker_settings()
        if a.against_kafka:
            os.environ["SLUICE_BIN"] = str(KAFKA)
            os.environ["KAFKA_HEAP_OPTS"] = KAFKA_HEAP_OPTS
            os.environ["KAFKA_JVM_PERFORMANCE_OPTS"] = KAFKA_JVM_PERFORMANCE_OPTS
            self.result["kafka_jvm"] = {"heap": KAFKA_HEAP_OPTS, "performance": KAFKA_JVM_PERFORMANCE_OPTS}
        self.node = SluiceNode(settings, ready_timeout=120 if a.against_kafka else None)
        self.result["broker_binary"] = str(self.node.binary)
        self.result["broker_settings"] = settings
        self.node.start()
        self.log(f"{self.result['broker']} up: {self.node.bootstrap} (pid {self.node.proc.pid})")

    def produce(self) -> None:
        a = self.args
        bootstrap = self.node.bootstrap
        create_topic(bootstrap, TOPIC, a.partitions)
        failed: list = []

        def on_delivery(err, _msg):
            if err is not None:
                failed.append(str(err))

        # batch.num.messages caps a produced batch: a share fetch acquires whole batches, so the
        # batch size is how finely the members of a group can split one partition.
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                      "batch.num.messages": a.batch_records, "batch.size": 4 * 1024 * 1024,
                      "queue.buffering.max.kbytes": 1048576, "compression.type": "none", "log_level": 3})
        t0 = time.perf_counter()
        for i in range(a.records):
            while True:
                try:
                    p.produce(TOPIC, value_of(i, a.record_bytes), partition=i % a.partitions,
                              on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        left = p.flush(120)
        produce_s = time.perf_counter() - t0
        if left or failed:
            self.error(f"produce: {left} records unflushed, {len(failed)} failed: {failed[:3]}")
        self.result["produce"] = {"records": a.records, "record_bytes": a.record_bytes,
                                  "records_per_batch": a.batch_records, "seconds": round(produce_s, 3),
                                  "failed": len(failed), "unflushed": left}
        self.log(f"produced {a.records:,} records of {a.record_bytes} B to {a.partitions} partition(s) "
                 f"in {produce_s:.1f} s")
        start_from_earliest(bootstrap, GROUP)

    def member_props(self) -> dict[str, str]:
        return dict(kv.split("=", 1) for kv in self.args.member_set)

    def consume(self) -> None:
        a = self.args
        self.classes = member_classes()  # javac once, before the clock starts
        broker_pid = self.node.proc.pid
        props = self.member_props()
        self.result["client"] = {"ack": a.ack, "props": props, "jvm": MEMBER_JVM,
                                 "client": "KafkaShareConsumer (Kafka 4.4 jars in .java-lib)"}
        cpu0 = cpu_seconds(broker_pid)
        t0 = time.monotonic()
        for i in range(a.members):
            self.members.append(BenchMember(self.node.bootstrap, TOPIC, GROUP, count=-1,
                                            timeout_ms=int(a.timeout_s * 1000) + 60_000, ack=a.ack,
                                            client_id=f"{GROUP}-{i + 1}", **props))
        started_s = time.monotonic() - t0
        self.log(f"started {a.members} members in {started_s:.1f} s ({a.ack} acknowledgement, {props or 'defaults'})")

        seen: set[int] = set()
        read = [0] * len(self.members)
        victim: BenchMember | None = None
        killed_at = killed_count = None
        last_new = time.monotonic()
        deadline = t0 + a.timeout_s
        covered_at = None
        while True:
            now = time.monotonic()
            for k, m in enumerate(self.members):
                lines, _ = m.since(read[k])
                if lines:
                    read[k] += len(lines)
                    last_new = now
                    for line in lines:
                        fields = line.split(" ")
                        if len(fields) == 4 and fields[0].isdigit():
                            seen.add(int(fields[3]))
                        elif line.startswith(("ERROR ", "ACK-ERROR ")) and len(self.result["errors"]) < 20:
                            self.error(f"{m.name}: {line}")
            if a.crash_after and victim is None:
                victim = next((m for m in self.members if m.count() >= a.crash_after), None)
            if victim is not None and killed_at is None:
                victim.proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                victim.wait(timeout=30)
                killed_count = len(victim.deliveries())
                self.log(f"SIGKILLed {victim.name} at {killed_at - t0:.1f} s, after it printed {killed_count:,} records")
            if covered_at is None and len(seen) >= a.records:
                covered_at = now
                self.log(f"every index delivered at {now - t0:.1f} s")
            quiet = now - last_new >= a.quiet_s
            lock_passed = killed_at is None or now - killed_at >= a.lock_ms / 1000 + a.quiet_s
            if covered_at is not None and quiet and lock_passed:
                break
            if now > deadline:
                self.error(f"timed out after {a.timeout_s} s: {len(seen):,} of {a.records:,} indices delivered")
                break
            if all(m.proc.poll() is not None for m in self.members):
                self.error("every member exited")
                break
            time.sleep(0.1)
        broker_cpu = cpu_seconds(broker_pid)
        member_cpu = [cpu_seconds(m.proc.pid) for m in self.members if m.proc.poll() is None]

        firsts = [m.times[0] for m in self.members if m.times]
        lasts = [m.times[-1] for m in self.members if m.times]
        first, last = (min(firsts), max(lasts)) if firsts else (None, None)
        self.result["timing"] = {
            "members_started_s": round(started_s, 3),
            "first_delivery_s": None if first is None else round(first - t0, 3),
            "last_delivery_s": None if last is None else round(last - t0, 3),
            "every_index_s": None if covered_at is None else round(covered_at - t0, 3),
        }
        self.result["broker_cpu_s"] = None if cpu0 is None or broker_cpu is None else round(broker_cpu - cpu0, 2)
        self.result["broker_memory"] = rss_kb(broker_pid)
        # The killed member's CPU is gone with it; these are the survivors'.
        self.result["members_cpu_s"] = round(sum(c for c in member_cpu if c is not None), 2)
        self.result["crash"] = None if not a.crash_after else {
            "member": victim and victim.name, "after_records": a.crash_after, "killed_s": None if killed_at is None
            else round(killed_at - t0, 3), "printed_before_kill": killed_count, "lock_ms": a.lock_ms}
        self.killed_at, self.t0, self.victim = killed_at, t0, victim

        # Acknowledged: with nothing left to deliver, LAG is 0 on every partition (the members
        # still run, so implicit acknowledgements of their last poll go out with the next one).
        try:
            rows = [r for r in describe_offsets(self.node.bootstrap, GROUP) if r["TOPIC"] == TOPIC]
            self.result["offsets_after"] = rows
        except AssertionError as e:
            self.error(f"kafka-share-groups --describe --offsets: {e}")
        for m in self.members:
            m.terminate()

    def figures(self) -> None:
        a = self.args
        per_member = {m.name: len(m.deliveries()) for m in self.members}
        deliveries = [(m.name, d) for m in self.members for d in m.deliveries()]
        counts = Counter(int(d.value) for _, d in deliveries)
        duplicates = {i for i, c in counts.items() if c > 1}
        missing = a.records - len(set(counts) & set(range(a.records)))
        victim = self.victim.name if self.victim else None
        dup_after_crash = {int(d.value) for name, d in deliveries if name == victim} & duplicates
        redelivered = [(name, d) for name, d in deliveries if d.delivery_count >= 2]
        last_redelivery = None
        if redelivered and self.killed_at is not None:
            times = []
            for m in self.members:
                lines, ts = m.since(0)
                for line, t in zip(lines, ts):
                    f = line.split(" ")
                    if len(f) == 4 and f[0].isdigit() and int(f[2]) >= 2:
                        times.append(t)
            if times:
                last_redelivery = round(max(times) - self.killed_at, 3)
        t = self.result["timing"]
        mb = a.records * a.record_bytes / 1e6
        total_s = t["last_delivery_s"]
        steady_s = None if total_s is None or t["first_delivery_s"] is None else total_s - t["first_delivery_s"]
        self.result["figures"] = {
            "deliveries": len(deliveries),
            "distinct_indices": len(counts),
            "missing_indices": missing,
            "every_index_processed": missing == 0,
            "duplicate_indices": len(duplicates),
            "duplicates_first_printed_by_crashed_member": len(dup_after_crash),
            "redelivered_records": len(redelivered),
            "redelivery_counts": dict(Counter(d.delivery_count for _, d in deliveries)),
            "last_redelivery_after_kill_s": last_redelivery,
            "per_member": per_member,
            "members_with_nothing": sum(1 for n in per_member.values() if n == 0),
            "records_per_s": None if not total_s else round(a.records / total_s, 1),
            "mb_per_s": None if not total_s else round(mb / total_s, 2),
            "steady_records_per_s": None if not steady_s else round(a.records / steady_s, 1),
            "steady_mb_per_s": None if not steady_s else round(mb / steady_s, 2),
        }

    def run(self) -> dict:
        self.start_broker()
        self.produce()
        self.consume()
        self.figures()
        self.result["machine"]["uptime_after"] = uptime()
        return self.result

    def cleanup(self) -> None:
        for m in self.members:
            try:
                m.kill()
            except Exception:  # noqa: BLE001 - cleaning up anyway
                pass
        if self.classes is not None:
            shutil.rmtree(self.classes, ignore_errors=True)
        if self.node is not None:
            self.node.kill()
            if self.args.keep_dirs:
                self.log(f"kept {self.node.work_dir}")
            else:
                shutil.rmtree(self.node.work_dir, ignore_errors=True)


def fmt(v, unit: str = "", digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v:,}{unit}"


def table(r: dict) -> str:
    a = r["args"]
    f = r.get("figures", {})
    t = r.get("timing", {})
    c = r.get("client", {})
    rows = [
        ("broker", f"{r['broker']} ({r.get('broker_binary', '-')})"),
        ("records x value bytes, partitions", f"{a['records']:,} x {a['record_bytes']} B, {a['partitions']} partition(s), "
                                              f"{a['batch_records']} records a produced batch"),
        ("members, acknowledgement, client settings", f"{a['members']}, {c.get('ack', a['ack'])}, "
                                                      f"{c.get('props') or 'defaults'}"),
    ]
    p = r.get("produce")
    if p:
        rows.append(("produce (before the members start)", f"{p['seconds']:.1f} s"))
    if t:
        rows += [
            ("members started / first delivery", f"{fmt(t['members_started_s'], ' s')} / {fmt(t['first_delivery_s'], ' s')}"),
            ("first member start -> last delivery", f"{fmt(t['last_delivery_s'], ' s', 2)}: "
                                                    f"{fmt(f.get('records_per_s'), ' records/s', 0)}, {fmt(f.get('mb_per_s'), ' MB/s', 1)}"),
            ("first delivery -> last delivery", f"{fmt(f.get('steady_records_per_s'), ' records/s', 0)}, "
                                                f"{fmt(f.get('steady_mb_per_s'), ' MB/s', 1)}"),
        ]
    if f:
        rows += [
            ("deliveries / distinct indices / missing", f"{f['deliveries']:,} / {f['distinct_indices']:,} / {f['missing_indices']:,}"),
            ("indices delivered more than once", f"{f['duplicate_indices']:,} ({f['duplicates_first_printed_by_crashed_member']:,} "
                                                 "printed by the crashed member first)"),
            ("per member", ", ".join(f"{n:,}" for n in f["per_member"].values())),
        ]
    cr = r.get("crash")
    if cr:
        rows += [
            (f"crash: SIGKILL of {cr['member']} after {cr['after_records']:,}", f"at {fmt(cr['killed_s'], ' s')}, "
             f"it had printed {fmt(cr['printed_before_kill'])}; lock {cr['lock_ms']} ms"),
            ("redelivered (delivery count >= 2)", f"{f.get('redelivered_records', 0):,}, the last "
                                                  f"{fmt(f.get('last_redelivery_after_kill_s'), ' s', 2)} after the kill"),
        ]
    if "offsets_after" in r:
        rows.append(("LAG after (kafka-share-groups)", ", ".join(f"p{o['PARTITION']}={o['LAG']}" for o in r["offsets_after"])))
    mem = r.get("broker_memory", {})
    if "broker_cpu_s" in r:
        rows.append(("broker CPU-s / RSS / peak RSS", f"{fmt(r['broker_cpu_s'], ' s', 2)} / "
                     f"{fmt(mem.get('rss_kb') and mem['rss_kb'] / 1024, ' MB')} / "
                     f"{fmt(mem.get('peak_rss_kb') and mem['peak_rss_kb'] / 1024, ' MB')}"))
        rows.append(("members' CPU-s (survivors, together)", fmt(r.get("members_cpu_s"), " s", 1)))
    for e in r.get("errors", []):
        rows.append(("ERROR", e[:200]))
    w = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(w)}  {v}" for k, v in rows]
    bar = "-" * min(160, max(len(x) for x in lines))
    mach = r["machine"]
    head = [f"Share group on one {r['broker']} node: {mach['cpus']} CPUs, {mach['kernel']}, commit {r.get('commit')}",
            f"before: {mach['uptime_before']}; after: {mach.get('uptime_after', '-')}"]
    return "\n".join(head + [bar] + lines + [bar])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--record-bytes", type=int, default=1024, help="value size (default 1024)")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--batch-records", type=int, default=100,
                   help="at most this many records a produced batch (librdkafka batch.num.messages)")
    p.add_argument("--ack", choices=["implicit", "explicit"], default="implicit",
                   help="implicit: the next poll accepts the last one's records (default); explicit: "
                        "acknowledge(ACCEPT) each record and commitSync() after each poll")
    p.add_argument("--member-set", action="append", default=[], metavar="KEY=VALUE",
                   help="KafkaShareConsumer property, repeatable (e.g. max.poll.records=1000)")
    p.add_argument("--crash-after", type=int, default=0, metavar="N",
                   help="SIGKILL the first member to print N records, then")
    p.add_argument("--lock-ms", type=int, default=5000,
                   help="group.share.record.lock.duration.ms with --crash-after (default 5000)")
    p.add_argument("--quiet-s", type=float, default=3.0,
                   help="seconds without a delivery, once every index arrived, that end the run")
    p.add_argument("--timeout-s", type=float, default=280.0, help="give up consuming after this long")
    p.add_argument("--against-kafka", action="store_true",
                   help="Apache Kafka 4.4 (scripts/kafka-as-sluice.py, 1 GB heap, G1) instead of sluice")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker setting, repeatable")
    p.add_argument("--output", help="JSON result path (default bench-results/share-<UTC>.json)")
    p.add_argument("--keep-dirs", action="store_true", help="keep the node's data and log")
    args = p.parse_args(argv)
    if args.output is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        args.output = str(WORKSPACE / "bench-results" / f"share-{stamp}.json")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run = Run(args)
    status = 0
    try:
        try:
            result = run.run()
        except BaseException as e:  # noqa: BLE001 - the partial result is still written
            run.error(f"interrupted: {type(e).__name__}: {e}")
            result, status = run.result, 1
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(table(result))
        print(f"result: {out}", flush=True)
    finally:
        run.cleanup()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
