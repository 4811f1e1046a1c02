#!/usr/bin/env python3
"""Scale on one machine (issue 14, part 3): a 3-node release Sluice cluster with many partitions
and many idle connections, measured and printed, never asserted on. Run through scripts/scale.sh,
which builds the broker and raises the open-files limit first.

Phases, in order, each reported in the table and the JSON result:
  create      --partitions N at RF 3 (--per-topic P per topic), CreateTopics in batches of
              --create-batch topics; time until every request is answered, and until every
              node's Metadata shows every partition with a leader and a full ISR;
  metadata    Metadata for all topics (v8, hand-encoded, so the size is the wire size):
              p50/p99/max over --metadata-requests requests spread over the nodes; then every
              topic paged through DescribeTopicPartitions v0, 2,000 partitions a page (what
              Kafka 4's Admin describeTopics does): pages, total time and bytes;
  memory      each node's RSS, threads, open files and CPU before creating and once idle after;
              KB per idle partition replica = (after - before) / (N x 3 replicas / 3 nodes);
  spread      acks=all produce at --spread-rate msg/s of --spread-bytes for --spread-s seconds,
              round-robin over every partition; ack latency from librdkafka's delivery reports;
  idle-conns  the seed load (--seed-rate x --seed-bytes to a 12-partition RF 3 topic for
              --seed-s) without, with --idle-connections C idle connections (each has done an
              ApiVersions exchange), and without again; RSS per node with them;
  restart     SIGKILL of all nodes, started again on the same ports and data: time until each
              node lists all brokers and a leader for every partition, until every ISR is full,
              and until one acks=all record to every partition is acknowledged.

With --against-kafka the same phases run against Apache Kafka too (the newest in .java-lib,
KRaft, through scripts/kafka-as-sluice.py with the JVM options and the heap of
`scripts/bench.sh --against-kafka`, --kafka-heap to raise it), --runs of each alternating
(A B, A B B A, ...), and one table puts each run's figures side by side with Sluice's ratio to
Kafka; a phase a system could not complete shows "-" and the error below the table says why.
--set applies to Sluice's nodes only.

Every process and temporary directory it starts is removed at exit (also on SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from confluent_kafka import KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from sluice_node import HOST, SluiceNode, sluice_binary, start_cluster  # noqa: E402
import bench_against_kafka as against  # noqa: E402  (Kafka's JVM settings, ratios, run order)

WORKSPACE = Path(__file__).resolve().parents[2]
CLIENT_ID = b"sluice-scale"
REPLICATION_FACTOR = 3
NODES = 3
SEED_TOPIC = "scale-seed"
SEED_PARTITIONS = 12
TOPIC_PREFIX = "scale-"
API_METADATA, API_VERSIONS, API_DESCRIBE_TOPIC_PARTITIONS = 3, 18, 75
METADATA_VERSION = 8  # the newest non-flexible version: every field a client needs for routing
# Partitions a DescribeTopicPartitions page asks for: Kafka's max.request.partition.size.limit.
DESCRIBE_PAGE_PARTITIONS = 2000


# ---------------------------------------------------------------- wire: one blocking connection

class Wire:
    """A blocking connection speaking hand-encoded requests (request header v1, non-flexible
    bodies), so a response's size and time are measured on the wire, not through a client."""

    def __init__(self, port: int, timeout_s: float = 30.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("connection closed mid-frame")
            got += k
        return buf

    def request(self, api_key: int, version: int, body: bytes) -> tuple[bytearray, float, int]:
        """(response body after the correlation id, seconds from send to last byte, frame bytes)."""
        self.correlation_id += 1
        msg = struct.pack(">hhih", api_key, version, self.correlation_id, len(CLIENT_ID)) + CLIENT_ID + body
        t0 = time.perf_counter()
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (length,) = struct.unpack(">i", self._recv_exact(4))
        resp = self._recv_exact(length)
        elapsed = time.perf_counter() - t0
        (got,) = struct.unpack_from(">i", resp, 0)
        if got != self.correlation_id:
            raise ValueError(f"correlation id {got} != {self.correlation_id}")
        return resp[4:], elapsed, length + 4

    def api_versions(self) -> int:
        body, _, _ = self.request(API_VERSIONS, 0, b"")
        (error,) = struct.unpack_from(">h", body, 0)
        return error

    def metadata(self) -> tuple["MetadataSummary", float, int]:
        # v8: all topics (null array), no auto-creation, no authorized operations.
        body, elapsed, size = self.request(API_METADATA, METADATA_VERSION, struct.pack(">i", -1) + b"\x00\x00\x00")
        return MetadataSummary.decode(body), elapsed, size

    def describe_topic_partitions(self, cursor: tuple[str, int] | None,
                                  limit: int) -> tuple[int, tuple[str, int] | None, float, int]:
        """One DescribeTopicPartitions v0 page of every topic (an empty topic list) from
        `cursor`: (partitions of `scale-*` topics on it, the next cursor, seconds, frame bytes).
        Flexible: request header v2, response header v1, compact arrays and strings."""
        body = b"\x01" + struct.pack(">i", limit)  # no topics named: all of them
        if cursor is None:
            body += b"\xff"
        else:
            name = cursor[0].encode()
            body += b"\x01" + uvarint(len(name) + 1) + name + struct.pack(">i", cursor[1]) + b"\x00"
        body += b"\x00"
        self.correlation_id += 1
        msg = (struct.pack(">hhih", API_DESCRIBE_TOPIC_PARTITIONS, 0, self.correlation_id, len(CLIENT_ID))
               + CLIENT_ID + b"\x00" + body)
        t0 = time.perf_counter()
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (length,) = struct.unpack(">i", self._recv_exact(4))
        r = Reader(self._recv_exact(length))
        elapsed = time.perf_counter() - t0
        if r.i32() != self.correlation_id:
            raise ValueError("correlation id mismatch")
        r.tagged()
        r.i32()  # throttle_time_ms
        partitions = 0
        for _ in range(r.compact_len()):
            r.i16()  # error_code
            name = r.compact_str() or ""
            r.skip(16 + 1)  # topic_id, is_internal
            nparts = r.compact_len()
            for _ in range(nparts):
                r.skip(2 + 4 + 4 + 4)  # error_code, partition_index, leader_id, leader_epoch
                for _ in range(5):  # replicas, isr, eligible leaders, last known ELR, offline
                    r.skip(4 * r.compact_len())
                r.tagged()
            r.i32()  # topic_authorized_operations
            r.tagged()
            if name.startswith(TOPIC_PREFIX):
                partitions += nparts
        next_cursor = None
        if r.i8() >= 0:
            topic = r.compact_str() or ""
            next_cursor = (topic, r.i32())
            r.tagged()
        return partitions, next_cursor, elapsed, length + 4


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Reader:
    """Reads a flexible response body in order."""

    def __init__(self, b: bytearray):
        self.b, self.pos = b, 0

    def _unpack(self, fmt: str, size: int):
        (v,) = struct.unpack_from(fmt, self.b, self.pos)
        self.pos += size
        return v

    def i8(self) -> int:
        return self._unpack(">b", 1)

    def i16(self) -> int:
        return self._unpack(">h", 2)

    def i32(self) -> int:
        return self._unpack(">i", 4)

    def skip(self, n: int) -> None:
        self.pos += n

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.b[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def compact_len(self) -> int:
        """Elements of a compact (nullable) array or bytes of a compact string; null is 0."""
        return max(self.uvarint() - 1, 0)

    def compact_str(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        text = bytes(self.b[self.pos:self.pos + n - 1]).decode()
        self.pos += n - 1
        return text

    def tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.skip(self.uvarint())


class MetadataSummary:
    """Counts from a Metadata v8 response: the brokers listed and, over the topics named
    `scale-*`, partitions, those whose leader is a listed broker, and those whose ISR holds
    every replica."""

    def __init__(self):
        self.brokers: list[int] = []
        self.topics = 0
        self.partitions = 0
        self.led = 0
        self.full_isr = 0
        self.errors = 0

    @staticmethod
    def decode(b: bytearray) -> "MetadataSummary":
        s = MetadataSummary()
        pos = 4  # throttle_time_ms
        (n,) = struct.unpack_from(">i", b, pos)
        pos += 4
        for _ in range(n):
            node_id, hlen = struct.unpack_from(">ih", b, pos)
            pos += 6 + hlen + 4  # host, port
            (rlen,) = struct.unpack_from(">h", b, pos)
            pos += 2 + max(rlen, 0)
            s.brokers.append(node_id)
        (clen,) = struct.unpack_from(">h", b, pos)
        pos += 2 + max(clen, 0) + 4  # cluster_id, controller_id
        (ntopics,) = struct.unpack_from(">i", b, pos)
        pos += 4
        for _ in range(ntopics):
            terr, nlen = struct.unpack_from(">hh", b, pos)
            pos += 4
            name = bytes(b[pos:pos + nlen])
            pos += nlen + 1  # is_internal
            mine = name.startswith(TOPIC_PREFIX.encode())
            (nparts,) = struct.unpack_from(">i", b, pos)
            pos += 4
            if mine:
                s.topics += 1
                s.errors += terr != 0
            for _ in range(max(nparts, 0)):
                perr, _, leader, _, nrep = struct.unpack_from(">hiiii", b, pos)
                pos += 18 + 4 * nrep
                (nisr,) = struct.unpack_from(">i", b, pos)
                pos += 4 + 4 * nisr
                (noff,) = struct.unpack_from(">i", b, pos)
                pos += 4 + 4 * max(noff, 0)
                if mine:
                    s.partitions += 1
                    s.errors += perr != 0
                    s.led += leader in s.brokers  # a leader on a broker not listed is not serving
                    s.full_isr += nisr == nrep == REPLICATION_FACTOR
            pos += 4  # topic_authorized_operations
        return s


def metadata_of(node: SluiceNode, timeout_s: float = 30.0) -> MetadataSummary | None:
    """One Metadata on a fresh connection, or None if the node does not answer (yet)."""
    try:
        w = Wire(node.port, timeout_s)
        try:
            return w.metadata()[0]
        finally:
            w.close()
    except (OSError, ValueError, struct.error):
        return None


# ---------------------------------------------------------------- process figures from /proc

def proc_figures(pid: int) -> dict:
    """RSS (KB), threads, open files, CPU seconds and the open-files limit of one process."""
    fig = {"rss_kb": None, "threads": None, "open_files": None, "cpu_s": None, "nofile_limit": None}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                fig["rss_kb"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                fig["threads"] = int(line.split()[1])
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        fig["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        fig["open_files"] = len(os.listdir(f"/proc/{pid}/fd"))
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                fig["nofile_limit"] = int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return fig


def nodes_figures(nodes: list[SluiceNode]) -> list[dict]:
    return [{"node_id": n.node_id, **proc_figures(n.proc.pid)} for n in nodes]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------- percentiles and producing

def percentiles_ms(samples_s: list[float]) -> dict:
    """Nearest-rank p50/p99/p99.9/max in milliseconds (None when there are no samples)."""
    if not samples_s:
        return {"count": 0, "p50": None, "p99": None, "p99.9": None, "max": None}
    xs = sorted(samples_s)

    def rank(q: float) -> float:
        return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] * 1000

    return {"count": len(xs), "p50": rank(0.5), "p99": rank(0.99), "p99.9": rank(0.999), "max": xs[-1] * 1000}


def producer_config(bootstrap: str, message_timeout_ms: int = 60000) -> dict:
    """sluice-bench's producer settings, so figures compare with scripts/bench.sh."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": 5,
        "batch.size": 1048576,
        "queue.buffering.max.messages": 500000,
        "queue.buffering.max.kbytes": 1048576,
        "compression.type": "none",
        "message.timeout.ms": message_timeout_ms,
        "log_level": 3,
    }


def produce_retrying(producer: Producer, topic: str, value: bytes, partition: int, on_delivery) -> None:
    while True:
        try:
            if on_delivery is None:
                producer.produce(topic, value, partition=partition)
            else:
                producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.01)


def produce_at_rate(bootstrap: str, targets: list[tuple[str, int]], rate: int, size: int,
                    duration_s: float) -> dict:
    """acks=all records of `size` bytes at `rate` per second for `duration_s`, round-robin over
    `targets` (topic, partition), each keyed by its sequence number; librdkafka's per-message
    latency (produce() to acknowledgement) of every delivery report."""
    latencies: list[float] = []
    acked_partitions: set[tuple[str, int]] = set()
    errors: dict[str, int] = {}

    def on_delivery(err, msg):
        if err is not None:
            errors[str(err.name())] = errors.get(str(err.name()), 0) + 1
            return
        latency = msg.latency()
        if latency is not None:
            latencies.append(latency)
        acked_partitions.add((msg.topic(), msg.partition()))

    producer = Producer(producer_config(bootstrap))
    value = os.urandom(size)
    # Unmeasured warm-up: one record to every target, so metadata lookups and connection set-up
    # are not in the figures.
    for topic, partition in targets:
        produce_retrying(producer, topic, value, partition, None)
    producer.flush(60)
    sent = 0
    t0 = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - t0
        if elapsed >= duration_s:
            break
        due = min(int(elapsed * rate) + 1, int(duration_s * rate)) - sent
        for _ in range(due):
            topic, partition = targets[sent % len(targets)]
            try:
                producer.produce(topic, value, key=str(sent).encode(), partition=partition, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
                break
            sent += 1
        producer.poll(0)
        if due <= 0:
            time.sleep(0.0005)
    send_s = time.perf_counter() - t0
    unflushed = producer.flush(90)
    return {
        "rate_per_s": rate,
        "record_bytes": size,
        "duration_s": duration_s,
        "sent": sent,
        "achieved_rate_per_s": round(sent / send_s, 1),
        "acked": len(latencies),
        "errors": errors,
        "unflushed": unflushed,
        "partitions_targeted": len(targets),
        "partitions_acked": len(acked_partitions),
        "latency_ms": percentiles_ms(latencies),
    }


# ---------------------------------------------------------------- the phases

class Run:
    def __init__(self, args: argparse.Namespace, system: str = "sluice"):
        self.args = args
        self.system = system
        self.nodes: list[SluiceNode] = []
        self.secret_dirs: list[Path] = []
        self.idle: list[socket.socket] = []
        self.topics = [f"{TOPIC_PREFIX}t{i:04d}" for i in range(math.ceil(args.partitions / args.per_topic))]
        counts = [args.per_topic] * len(self.topics)
        if self.topics:
            counts[-1] = args.partitions - args.per_topic * (len(self.topics) - 1)
        self.topic_partitions = dict(zip(self.topics, counts))
        self.result: dict = {
            "tool": "scale_bench",
            "format": 1,
            "system": system,
            "args": vars(args),
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                        "mem_total_kb": mem_total_kb(), "uptime_before": uptime(),
                        "client_nofile_limit": nofile_limit()},
            "errors": [],
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def log(self, msg: str) -> None:
        print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def error(self, phase: str, msg: str) -> None:
        self.log(f"{phase}: {msg}")
        self.result["errors"].append({"phase": phase, "message": msg})

    # -- cluster

    def start(self) -> None:
        settings = dict(kv.split("=", 1) for kv in self.args.set) if self.system == "sluice" else {}
        # A broker keeps max.connections files of its open-files limit for clients (default
        # 10,000), which at a 20,000 limit leaves room for fewer than 10,000 replicas. Size the
        # client reserve to this run's idle connections instead, with room to spare.
        settings.setdefault("max.connections", str(max(1000, 2 * self.args.idle_connections // NODES + 500)))
        self.nodes = start_cluster(NODES, settings)
        for n in self.nodes:
            if "--cluster-secret-file" in n.extra_args:
                secret = Path(n.extra_args[n.extra_args.index("--cluster-secret-file") + 1])
                if secret.parent not in self.secret_dirs:
                    self.secret_dirs.append(secret.parent)
        self.result["sluice_binary"] = str(self.nodes[0].binary)
        self.result["broker_settings"] = settings
        self.log(f"cluster up: {self.bootstrap}")

    def report_exited(self, phase: str) -> None:
        """Records each node that exited during `phase`, with the last error lines of its log."""
        for n in self.nodes:
            if n.proc.poll() is not None and n.node_id not in self.exited_reported:
                self.exited_reported.add(n.node_id)
                errors = [line for line in n.log_tail(2000).splitlines() if " ERROR " in line]
                # The last distinct message (without timestamp and fields) usually says why.
                kinds: dict[str, str] = {}
                for line in errors:
                    kinds[line.split(" ERROR ", 1)[1].split(" topic=")[0][:160]] = line
                last = list(kinds.values())[-2:]
                self.error(phase, f"node {n.node_id} exited with {n.proc.returncode} after {len(errors)} "
                                  f"ERROR lines, the last kinds: " + " | ".join(last))

    def fd_budget(self) -> dict:
        """Files each node needs: its share of the idle connections, and for Kafka one per idle
        partition replica (the active segment's log), against its limit. Sluice's segment files
        go through a cache bounded by the limit (`broker/src/log/file_cache.rs`)."""
        a = self.args
        per_replica = 0 if self.system == "sluice" else 1
        need = per_replica * (a.partitions * REPLICATION_FACTOR // NODES) + a.idle_connections // NODES + 200
        limit = nofile_limit()
        if need > limit:
            self.log(f"WARNING: each node needs about {need:,} open files, the limit is {limit:,}: expect EMFILE")
        return {"estimated_per_node": need, "limit": limit, "fits": need <= limit}

    def cleanup(self) -> None:
        for s in self.idle:
            s.close()
        self.idle.clear()
        for n in self.nodes:
            n.kill()
        keep = self.args.keep_dirs
        for n in self.nodes:
            if keep:
                self.log(f"kept {n.work_dir}")
            else:
                shutil.rmtree(n.work_dir, ignore_errors=True)
        for d in self.secret_dirs:
            shutil.rmtree(d, ignore_errors=True)

    def wait_cluster(self, want, t0: float, timeout_s: float, interval_s: float) -> tuple[dict[int, float | None], list[dict]]:
        """Polls every node's Metadata until `want(summary)` holds on each, for at most
        `timeout_s` after `t0` (a perf_counter reading): the seconds since `t0` at which it first
        held on each node (None if never) and a timeline of samples."""
        done: dict[int, float | None] = {n.node_id: None for n in self.nodes}
        exited: set[int] = set()
        timeline = []
        while time.perf_counter() - t0 < timeout_s:
            for n in self.nodes:
                if done[n.node_id] is not None or n.node_id in exited:
                    continue
                if n.proc.poll() is not None:
                    exited.add(n.node_id)
                    timeline.append({"t_s": round(time.perf_counter() - t0, 2), "node_id": n.node_id,
                                     "exited": n.proc.returncode})
                    continue
                s = metadata_of(n, timeout_s=max(1.0, timeout_s - (time.perf_counter() - t0)))
                t = time.perf_counter() - t0
                if s is None:
                    timeline.append({"t_s": round(t, 2), "node_id": n.node_id, "answered": False})
                    continue
                timeline.append({"t_s": round(t, 2), "node_id": n.node_id, "answered": True,
                                 "brokers": len(s.brokers), "partitions": s.partitions, "led": s.led,
                                 "full_isr": s.full_isr})
                if want(s):
                    done[n.node_id] = round(t, 3)
            if all(v is not None or k in exited for k, v in done.items()):
                break
            time.sleep(interval_s)
        return done, timeline

    def all_led(self, s: MetadataSummary) -> bool:
        return len(s.brokers) == NODES and s.partitions >= self.expected_partitions() and s.led == s.partitions

    def all_full(self, s: MetadataSummary) -> bool:
        return self.all_led(s) and s.full_isr == s.partitions

    def expected_partitions(self) -> int:
        return self.args.partitions + (SEED_PARTITIONS if self.seed_created else 0)

    seed_created = False
    exited_reported: set[int] = set()

    # -- phases

    def phase_create(self) -> None:
        a = self.args
        self.result["memory"] = {"before": nodes_figures(self.nodes)}
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        new = [NewTopic(t, num_partitions=p, replication_factor=REPLICATION_FACTOR)
               for t, p in self.topic_partitions.items()]
        self.log(f"creating {a.partitions} partitions in {len(new)} topics, {a.create_batch} topics a request")
        failures: list[str] = []
        retried: list[str] = []
        t0 = time.perf_counter()
        pending = new
        while pending:
            # A topic whose creation timed out may still commit: retry, and take
            # TOPIC_ALREADY_EXISTS as created.
            again = []
            for i in range(0, len(pending), a.create_batch):
                batch = pending[i:i + a.create_batch]
                futures = admin.create_topics(batch, request_timeout=60)
                by_name = {t.topic: t for t in batch}
                for topic, f in futures.items():
                    try:
                        f.result()
                    except KafkaException as e:
                        err = e.args[0]
                        if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                            continue
                        if err.retriable() or err.code() == KafkaError.REQUEST_TIMED_OUT:
                            retried.append(f"{topic}: {err.str()}")
                            again.append(by_name[topic])
                        else:
                            failures.append(f"{topic}: {e}")
            pending = again
            if pending and time.perf_counter() - t0 > a.create_timeout_s:
                failures += [f"{t.topic}: still failing at the deadline" for t in pending]
                break
        answered_s = time.perf_counter() - t0
        led, led_timeline = self.wait_cluster(self.all_led, t0, a.create_timeout_s, a.poll_interval_s)
        full, full_timeline = self.wait_cluster(self.all_full, t0, a.create_timeout_s, a.poll_interval_s)
        final = [metadata_of(n) for n in self.nodes]
        worst = min((s for s in final if s is not None), key=lambda s: s.full_isr, default=None)
        seed = SEED_PARTITIONS if self.seed_created else 0
        self.result["create"] = {
            "partitions": a.partitions,
            "topics": len(new),
            "partitions_per_topic": a.per_topic,
            "replication_factor": REPLICATION_FACTOR,
            "topics_per_request": a.create_batch,
            "requests_answered_s": round(answered_s, 3),
            "all_led_s": latest(led),
            "all_full_isr_s": latest(full),
            "retried": retried[:20],
            "retry_count": len(retried),
            "failures": failures[:20],
            "failure_count": len(failures),
            # The N created, without the seed topic's when seed-alone made it first.
            "partitions_listed": worst.partitions - seed if worst else 0,
            "partitions_led": worst.led - seed if worst else 0,
            "partitions_full_isr": worst.full_isr - seed if worst else 0,
            "timeline": (led_timeline + full_timeline)[-60:],
        }
        if failures:
            self.error("create", f"{len(failures)} topics failed, e.g. {failures[0]}")
        if self.result["create"]["all_full_isr_s"] is None:
            self.error("create", f"not every partition led with a full ISR within {a.create_timeout_s}s")

    def phase_metadata(self) -> None:
        a = self.args
        wires = [Wire(n.port) for n in self.nodes]
        times, sizes, listed = [], [], []
        try:
            for i in range(a.metadata_requests):
                s, elapsed, size = wires[i % len(wires)].metadata()
                times.append(elapsed)
                sizes.append(size)
                listed.append(s.partitions)
        finally:
            for w in wires:
                w.close()
        self.result["metadata"] = {
            "version": METADATA_VERSION,
            "requests": len(times),
            "latency_ms": percentiles_ms(times),
            "response_bytes": max(sizes) if sizes else None,
            "partitions_listed": min(listed) if listed else 0,
            "describe_topic_partitions": self.describe_all_pages(),
        }

    def describe_all_pages(self) -> dict | None:
        """Pages through every topic with DescribeTopicPartitions (what Kafka 4's Admin
        describeTopics and kafka-topics --describe use), DESCRIBE_PAGE_PARTITIONS a page: the
        pages, the whole walk's time and bytes, the slowest page. None if the broker does not
        answer it (Kafka before 3.8)."""
        wire = Wire(self.nodes[0].port)
        pages, total_s, total_bytes, listed, slowest = 0, 0.0, 0, 0, 0.0
        cursor = None
        try:
            while True:
                partitions, cursor, elapsed, size = wire.describe_topic_partitions(cursor, DESCRIBE_PAGE_PARTITIONS)
                pages += 1
                total_s += elapsed
                total_bytes += size
                listed += partitions
                slowest = max(slowest, elapsed)
                if cursor is None or pages > 10_000:
                    break
        except (OSError, ValueError, struct.error, IndexError) as e:
            self.log(f"DescribeTopicPartitions: {e}")
            return None
        finally:
            wire.close()
        return {
            "version": 0,
            "partitions_per_page": DESCRIBE_PAGE_PARTITIONS,
            "pages": pages,
            "all_pages_ms": round(1000 * total_s, 1),
            "slowest_page_ms": round(1000 * slowest, 1),
            "all_pages_bytes": total_bytes,
            "partitions_listed": listed,
        }

    def phase_memory(self) -> None:
        a = self.args
        start = nodes_figures(self.nodes)
        time.sleep(a.settle_s)
        after = nodes_figures(self.nodes)
        mem = self.result["memory"]
        mem["after_idle"] = after
        mem["idle_window_s"] = a.settle_s
        replicas_per_node = a.partitions * REPLICATION_FACTOR / NODES
        per = []
        for before, s, e in zip(mem["before"], start, after):
            kb = (e["rss_kb"] - before["rss_kb"]) / replicas_per_node if replicas_per_node else None
            per.append({"node_id": e["node_id"], "kb_per_idle_partition_replica": kb,
                        "open_files_per_partition_replica":
                            (e["open_files"] - before["open_files"]) / replicas_per_node if replicas_per_node else None,
                        "idle_cpu_pct": round(100 * (e["cpu_s"] - s["cpu_s"]) / a.settle_s, 1)})
        mem["per_node"] = per
        mem["replicas_per_node"] = replicas_per_node
        kbs = [p["kb_per_idle_partition_replica"] for p in per if p["kb_per_idle_partition_replica"] is not None]
        mem["kb_per_idle_partition_replica_mean"] = sum(kbs) / len(kbs) if kbs else None

    def phase_written_idle(self) -> None:
        """Replicas that were written to, then left idle: `--written-idle-mib` MiB to each of the
        first `--written-idle-partitions` partitions in batches of about 4 KB (an index entry
        each), then RSS right after writing and after `--written-idle-s` without appends (the
        brokers' idle passes run every 10 s; two must pass for a log to count as idle)."""
        a = self.args
        targets = [(t, p) for t, n in self.topic_partitions.items() for p in range(n)][: a.written_idle_partitions]
        value = os.urandom(2000)
        per_partition = int(a.written_idle_mib * 1024 * 1024 / len(value))
        self.log(f"written-idle: {a.written_idle_mib} MiB to each of {len(targets)} partitions, then {a.written_idle_s}s idle")
        before = nodes_figures(self.nodes)
        config = {**producer_config(self.bootstrap), "linger.ms": 0, "batch.size": 4096}
        producer = Producer(config)
        failed = []
        on_delivery = lambda err, _msg: failed.append(err) if err else None  # noqa: E731
        for _ in range(per_partition):
            for topic, partition in targets:
                while True:
                    try:
                        producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.poll(0)
        unsent = producer.flush(120)
        written = nodes_figures(self.nodes)
        time.sleep(a.written_idle_s)
        idle = nodes_figures(self.nodes)
        replicas_per_node = len(targets) * REPLICATION_FACTOR / NODES
        self.result["written_idle"] = {
            "partitions": len(targets), "mib_per_partition": a.written_idle_mib,
            "messages": per_partition * len(targets), "failed": len(failed) + unsent,
            "idle_window_s": a.written_idle_s,
            "per_node": [{"node_id": i["node_id"],
                          "kb_per_written_replica_after_writing": (w["rss_kb"] - b["rss_kb"]) / replicas_per_node,
                          "kb_per_written_replica_after_idle": (i["rss_kb"] - b["rss_kb"]) / replicas_per_node}
                         for b, w, i in zip(before, written, idle)],
        }

    def phase_spread(self) -> None:
        a = self.args
        targets = [(t, p) for t, n in self.topic_partitions.items() for p in range(n)]
        self.log(f"spread produce: {a.spread_rate}/s x {a.spread_bytes} B over {len(targets)} partitions, {a.spread_s}s")
        cpu0 = nodes_figures(self.nodes)
        self.result["spread"] = produce_at_rate(self.bootstrap, targets, a.spread_rate, a.spread_bytes, a.spread_s)
        self.result["spread"]["broker_cpu_s"] = cpu_delta(cpu0, nodes_figures(self.nodes))

    def create_seed_topic(self) -> None:
        if self.seed_created:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        f = admin.create_topics([NewTopic(SEED_TOPIC, num_partitions=SEED_PARTITIONS,
                                          replication_factor=REPLICATION_FACTOR)])[SEED_TOPIC]
        f.result()
        self.seed_created = True
        self.wait_cluster(self.all_full, time.perf_counter(), self.args.create_timeout_s, self.args.poll_interval_s)

    def seed_load(self, label: str) -> dict:
        a = self.args
        self.log(f"seed load {label}: {a.seed_rate}/s x {a.seed_bytes} B to {SEED_TOPIC}, {a.seed_s}s")
        cpu0 = nodes_figures(self.nodes)
        r = produce_at_rate(self.bootstrap, [(SEED_TOPIC, p) for p in range(SEED_PARTITIONS)],
                            a.seed_rate, a.seed_bytes, a.seed_s)
        after = nodes_figures(self.nodes)
        r["broker_cpu_s"] = cpu_delta(cpu0, after)
        r["rss_kb_after"] = {f["node_id"]: f["rss_kb"] for f in after}
        return r

    def open_idle(self, count: int) -> dict:
        """`count` connections, round-robin over the nodes, each answered one ApiVersions v0."""
        opened, failed = 0, []
        t0 = time.perf_counter()
        for i in range(count):
            node = self.nodes[i % len(self.nodes)]
            try:
                w = Wire(node.port, timeout_s=10)
                self.idle.append(w.sock)
                if (error := w.api_versions()) != 0:
                    raise ValueError(f"ApiVersions error {error}")
                opened += 1
            except (OSError, ValueError, struct.error) as e:
                if len(failed) < 5:
                    failed.append(f"connection {i} to node {node.node_id}: {e!r}")
                if isinstance(e, OSError) and e.errno == 24:  # EMFILE in this process: stop
                    break
        return {"requested": count, "opened": opened, "open_s": round(time.perf_counter() - t0, 3),
                "failures": failed}

    def phase_seed_alone(self) -> None:
        """The seed load before the many partitions exist: what the phases beside them are
        compared with (issue 33: within 1.5x), on the same cluster and in the same run."""
        self.create_seed_topic()
        self.result["seed_alone"] = self.seed_load("before the other partitions exist")

    def phase_idle_connections(self) -> None:
        a = self.args
        self.create_seed_topic()
        out: dict = {}
        out["without"] = self.seed_load("without idle connections")
        before = nodes_figures(self.nodes)
        self.log(f"opening {a.idle_connections} idle connections")
        out.update(self.open_idle(a.idle_connections))
        time.sleep(min(2.0, a.settle_s))
        held = nodes_figures(self.nodes)
        out["nodes_without"] = before
        out["nodes_with"] = held
        per_node = max(1, out["opened"] // NODES)
        out["kb_per_idle_connection"] = {
            h["node_id"]: round((h["rss_kb"] - b["rss_kb"]) / per_node, 2) for b, h in zip(before, held)}
        out["with"] = self.seed_load(f"with {out['opened']} idle connections")
        out["still_open_after"] = sum(1 for s in self.idle if still_open(s))
        for s in self.idle:
            s.close()
        self.idle.clear()
        time.sleep(1.0)
        out["after"] = self.seed_load("without idle connections, again")
        self.result["idle_connections"] = out
        if out["opened"] < a.idle_connections:
            self.error("idle-connections", f"opened {out['opened']} of {a.idle_connections}: {out['failures']}")

    def phase_restart(self) -> None:
        a = self.args
        self.log("SIGKILL all nodes, then start them again")
        for n in self.nodes:
            n.proc.send_signal(signal.SIGKILL)
        for n in self.nodes:
            n.proc.wait(timeout=30)
        t0 = time.perf_counter()
        self.exited_reported = set()
        for n in self.nodes:
            n.spawn()
        answering, _ = self.wait_cluster(lambda s: True, t0, a.restart_timeout_s, 0.05)
        serving, serve_timeline = self.wait_cluster(self.all_led, t0, a.restart_timeout_s, a.poll_interval_s)
        full, full_timeline = self.wait_cluster(self.all_full, t0, a.restart_timeout_s, a.poll_interval_s)
        out = {
            "answering_s": answering,
            "serving_s": serving,
            "all_serving_s": latest(serving),
            "all_full_isr_s": latest(full),
            "timeline": (serve_timeline + full_timeline)[-90:],
        }
        out["writable"] = self.all_writable(t0)
        out["nodes_after"] = nodes_figures(self.nodes)
        out["completed"] = (out["all_serving_s"] is not None and out["all_full_isr_s"] is not None
                            and out["writable"]["acked"] == out["writable"]["partitions"])
        self.result["restart"] = out
        if not out["completed"]:
            self.error("restart", "the cluster did not recover fully within the deadline")

    def all_writable(self, t0: float) -> dict:
        """One acks=all record to every partition; seconds since the restart until all are acked."""
        targets = [(t, p) for t, n in self.topic_partitions.items() for p in range(n)]
        targets += [(SEED_TOPIC, p) for p in range(SEED_PARTITIONS)] if self.seed_created else []
        acked, errors = [0], {}

        def on_delivery(err, msg):
            if err is None:
                acked[0] += 1
            else:
                errors[str(err.name())] = errors.get(str(err.name()), 0) + 1

        left = max(5.0, self.args.restart_timeout_s - (time.perf_counter() - t0))
        producer = Producer(producer_config(self.bootstrap, message_timeout_ms=int(left * 1000)))
        for topic, partition in targets:
            produce_retrying(producer, topic, b"after-restart", partition, on_delivery)
            producer.poll(0)
        producer.flush(left + 5)
        return {"partitions": len(targets), "acked": acked[0], "errors": errors,
                "all_acked_s": round(time.perf_counter() - t0, 3) if acked[0] == len(targets) else None}

    def run(self) -> dict:
        a = self.args
        # seed-alone only when asked for: its load would be in the memory phase's baseline.
        seed_alone = [("seed-alone", self.phase_seed_alone)] if a.seed_alone else []
        # written-idle only when asked for: it writes MiBs to many partitions.
        written_idle = [("written-idle", self.phase_written_idle)] if a.written_idle_partitions else []
        phases = seed_alone + [("create", self.phase_create), ("metadata", self.phase_metadata),
                  ("memory", self.phase_memory)] + written_idle + [("spread", self.phase_spread),
                  ("idle-connections", self.phase_idle_connections), ("restart", self.phase_restart)]
        self.result["open_files"] = self.fd_budget()
        self.start()
        time.sleep(a.settle_s)
        for name, phase in phases:
            if name in a.skip:
                continue
            if self.exited_reported and name != "restart":
                self.log(f"{name} skipped: a node has exited")
                self.result.setdefault("skipped", []).append(name)
                continue
            t0 = time.perf_counter()
            try:
                phase()
            except Exception as e:  # noqa: BLE001 - recorded; later phases still run
                self.error(name, f"{type(e).__name__}: {e}")
            self.log(f"{name} done in {time.perf_counter() - t0:.1f}s")
            self.report_exited(name)
        self.result["machine"]["uptime_after"] = uptime()
        self.result["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return self.result


def latest(per_node: dict[int, float | None]) -> float | None:
    """The last node's time, or None if some node never got there."""
    return None if any(v is None for v in per_node.values()) else max(per_node.values())


def cpu_delta(before: list[dict], after: list[dict]) -> dict:
    return {a["node_id"]: round(a["cpu_s"] - b["cpu_s"], 2) for b, a in zip(before, after)}


def still_open(s: socket.socket) -> bool:
    """True if the peer has not closed the connection (a read would block)."""
    try:
        s.setblocking(False)
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def mem_total_kb() -> int | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return None


def nofile_limit() -> int:
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---------------------------------------------------------------- table

def fmt(x, unit: str = "", digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}{unit}"
    return f"{x:,}{unit}"


def lat(d: dict | None) -> str:
    if not d or not d.get("latency_ms") or d["latency_ms"]["count"] == 0:
        return "-"
    m = d["latency_ms"]
    return f"{m['p50']:.1f} / {m['p99']:.1f} / {m['p99.9']:.1f} ms"


def table(r: dict) -> str:
    rows: list[tuple[str, str]] = []
    c = r.get("create")
    if c:
        rows += [
            (f"create {c['partitions']:,} partitions ({c['topics']} topics, RF {c['replication_factor']})",
             f"answered {fmt(c['requests_answered_s'], ' s', 2)}, all led {fmt(c['all_led_s'], ' s', 2)}, "
             f"full ISR {fmt(c['all_full_isr_s'], ' s', 2)}; {c['retry_count']} topic creations retried"),
            ("partitions listed / led / full ISR (worst node)",
             f"{c['partitions_listed']:,} / {c['partitions_led']:,} / {c['partitions_full_isr']:,}"),
        ]
    m = r.get("metadata")
    if m and m["requests"]:
        rows.append((f"Metadata v{m['version']}, all topics ({m['requests']} requests)",
                     f"p50 {fmt(m['latency_ms']['p50'], ' ms')} / p99 {fmt(m['latency_ms']['p99'], ' ms')}, "
                     f"{m['response_bytes']:,} bytes"))
        d = m.get("describe_topic_partitions")
        if d:
            rows.append((f"DescribeTopicPartitions v0, all topics, {d['partitions_per_page']:,} a page",
                         f"{d['pages']} pages in {fmt(d['all_pages_ms'], ' ms')} (slowest {fmt(d['slowest_page_ms'], ' ms')}), "
                         f"{d['all_pages_bytes']:,} bytes, {d['partitions_listed']:,} partitions"))
    mem = r.get("memory")
    if mem and "per_node" in mem:
        for b, a, p in zip(mem["before"], mem["after_idle"], mem["per_node"]):
            rows.append((f"node {a['node_id']} RSS before -> idle after",
                         f"{b['rss_kb'] / 1024:.1f} -> {a['rss_kb'] / 1024:.1f} MB = "
                         f"{fmt(p['kb_per_idle_partition_replica'], ' KB', 2)}/replica; "
                         f"{a['open_files']:,} files, {a['threads']} threads, idle CPU {p['idle_cpu_pct']}%"))
    w = r.get("written_idle")
    if w:
        for p in w["per_node"]:
            rows.append((f"node {p['node_id']} RSS per written replica: after writing / {w['idle_window_s']:g} s idle",
                         f"{fmt(p['kb_per_written_replica_after_writing'], ' KB', 1)} / "
                         f"{fmt(p['kb_per_written_replica_after_idle'], ' KB', 1)} "
                         f"({w['partitions']:,} partitions x {w['mib_per_partition']:g} MiB, {w['failed']} failed)"))
    s = r.get("spread")
    if s:
        rows.append((f"spread produce p50/p99/p99.9 ({s['rate_per_s']:,}/s x {s['record_bytes']} B, "
                     f"{s['partitions_acked']:,} partitions)", lat(s) + f", {s['acked']:,}/{s['sent']:,} acked"))
    alone = r.get("seed_alone")
    if alone:
        rows.append(("seed load p50/p99/p99.9, before the partitions", lat(alone)))
    ic = r.get("idle_connections")
    if ic:
        for key, label in (("without", "without idle conns"), ("with", f"with {ic.get('opened', 0):,} idle conns"),
                           ("after", "without, again")):
            if key in ic:
                rows.append((f"seed load p50/p99/p99.9, {label}", lat(ic[key])))
        base = (alone or {}).get("latency_ms", {}).get("p99")
        beside = [ic[k]["latency_ms"]["p99"] for k in ("without", "with", "after") if k in ic]
        if base and beside:
            rows.append(("seed p99 beside the partitions / before them",
                         " / ".join(f"{b / base:.2f}x" for b in beside)))
        if "nodes_with" in ic:
            rows.append(("RSS per node with idle conns",
                         ", ".join(f"{n['rss_kb'] / 1024:.1f} MB" for n in ic["nodes_with"])
                         + f" ({', '.join(str(v) for v in ic['kb_per_idle_connection'].values())} KB/conn)"))
    rs = r.get("restart")
    if rs:
        rows += [
            ("restart after SIGKILL: answering / serving (per node)",
             ", ".join(fmt(v, " s", 2) for v in rs["answering_s"].values()) + " / "
             + ", ".join(fmt(v, " s", 2) for v in rs["serving_s"].values())),
            ("restart: all ISRs full / every partition writable",
             f"{fmt(rs['all_full_isr_s'], ' s', 2)} / {fmt(rs['writable']['all_acked_s'], ' s', 2)} "
             f"({rs['writable']['acked']:,}/{rs['writable']['partitions']:,} acked)"),
        ]
    for e in r.get("errors", []):
        rows.append((f"ERROR in {e['phase']}", e["message"][:200]))
    w = max(len(k) for k, _ in rows) if rows else 10
    lines = [f"{k.ljust(w)}  {v}" for k, v in rows]
    bar = "-" * min(160, max(len(x) for x in lines) if lines else 10)
    mach = r["machine"]
    name = against.NAMES.get(r.get("system", "sluice"), "Sluice")
    head = [f"{name} scale on one machine: 3 nodes, {mach['cpus']} CPUs, {mach['kernel']}",
            f"uptime before: {mach['uptime_before']}", f"uptime after:  {mach.get('uptime_after', '-')}"]
    return "\n".join(head + [bar] + lines + [bar])


# ---------------------------------------------------------------- side by side with Kafka

def _nodes(values) -> list:
    return [v for v in (values or {}).values() if isinstance(v, (int, float))]


def _max(values) -> float | None:
    return max(values) if values else None


def compared_figures() -> list[tuple[str, str, object]]:
    """(label, better, value of one run's result) in table order; a section has no getter."""
    def g(*keys):
        return lambda r: against._get(r, *keys)

    def seed(key, q):
        return lambda r: against._get(r, "idle_connections", key, "latency_ms", q)

    return [
        ("create", "", None),
        ("CreateTopics answered, s", "lower", g("create", "requests_answered_s")),
        ("every partition led, s", "lower", g("create", "all_led_s")),
        ("every ISR full, s", "lower", g("create", "all_full_isr_s")),
        ("partitions with a full ISR (worst node)", "higher", g("create", "partitions_full_isr")),
        ("Metadata, all topics", "", None),
        ("p50, ms", "lower", g("metadata", "latency_ms", "p50")),
        ("p99, ms", "lower", g("metadata", "latency_ms", "p99")),
        ("response bytes", "info", g("metadata", "response_bytes")),
        ("DescribeTopicPartitions, every page, ms", "lower",
         g("metadata", "describe_topic_partitions", "all_pages_ms")),
        ("idle, per node", "", None),
        ("KB of RSS per idle replica (mean of nodes)", "lower", g("memory", "kb_per_idle_partition_replica_mean")),
        ("RSS once idle, largest node, MB",
         "lower", lambda r: _max([n["rss_kb"] / 1024 for n in against._get(r, "memory", "after_idle") or []])),
        ("idle CPU, busiest node, % of a core", "lower",
         lambda r: _max([p["idle_cpu_pct"] for p in against._get(r, "memory", "per_node") or []])),
        ("open files, most on a node", "lower",
         lambda r: _max([n["open_files"] for n in against._get(r, "memory", "after_idle") or []])),
        ("spread produce over every partition", "", None),
        ("ack p50, ms", "lower", g("spread", "latency_ms", "p50")),
        ("ack p99, ms", "lower", g("spread", "latency_ms", "p99")),
        ("ack p99.9, ms", "lower", g("spread", "latency_ms", "p99.9")),
        ("records acknowledged", "higher", g("spread", "acked")),
        ("seed load before the other partitions exist: ack p99, ms", "lower",
         lambda r: against._get(r, "seed_alone", "latency_ms", "p99")),
        ("seed load beside the idle partitions", "", None),
        ("without idle connections: ack p99, ms", "lower", seed("without", "p99")),
        ("with idle connections: ack p99, ms", "lower", seed("with", "p99")),
        ("without, again: ack p99, ms", "lower", seed("after", "p99")),
        ("KB of RSS per idle connection (mean of nodes)", "lower",
         lambda r: against._mean(_nodes(against._get(r, "idle_connections", "kb_per_idle_connection")))),
        ("restart after SIGKILL of every node", "", None),
        ("every node serving, s", "lower", lambda r: _max(_nodes(against._get(r, "restart", "serving_s")))),
        ("every ISR full again, s", "lower", g("restart", "all_full_isr_s")),
        ("every partition written to, s", "lower", g("restart", "writable", "all_acked_s")),
    ]


def compare_table(runs: list[dict]) -> str:
    """Each run's figures side by side, Sluice's runs first, and Sluice's ratio to Kafka (means
    of each system's runs; > 1: Sluice better), then each run's errors."""
    ordered = sorted(runs, key=lambda r: (against.SYSTEMS.index(r["system"]), r["order"]))
    heads = [f"{against.NAMES[r['system']]} (run {r['order']})" for r in ordered]
    lines = ["| figure | " + " | ".join(heads) + " | ratio (>1: Sluice better) |",
             "|---" * (len(heads) + 2) + "|"]
    for label, better, get in compared_figures():
        if get is None:
            lines.append(f"| **{label}** |" + " |" * (len(heads) + 1))
            continue
        values = [against._num(get(r)) for r in ordered]
        means = {s: against._mean([v for r, v in zip(ordered, values) if r["system"] == s]) for s in ("sluice", "kafka")}
        ratio = against.ratio(better, means["sluice"], means["kafka"])
        lines.append(f"| {label} | " + " | ".join(against._cell(v) for v in values)
                     + f" | {against._ratio_cell(ratio)} |")
    lines.append("")
    for r in ordered:
        name = f"{against.NAMES[r['system']]} (run {r['order']})"
        for e in r.get("errors", []):
            lines.append(f"{name} could not complete {e['phase']}: {e['message'][:300]}")
        for phase in r.get("skipped", []):
            lines.append(f"{name} skipped {phase}: a node had exited")
    return "\n".join(lines)


def run_against_kafka(args: argparse.Namespace) -> tuple[dict, int]:
    """Every phase against Sluice and Kafka, --runs of each alternating; the combined result."""
    java_lib = Path(args.java_lib).resolve()
    version = against.kafka_version(java_lib)
    if version == "?":
        raise SystemExit(f"no Kafka broker jar in {java_lib}: run `bash scripts/java-lib.sh` (scripts/scale.sh does)")
    sluice_bin = str(sluice_binary())
    env = {"SLUICE_JAVA_LIB": str(java_lib), "KAFKA_HEAP_OPTS": args.kafka_heap,
           "KAFKA_JVM_PERFORMANCE_OPTS": against.KAFKA_JVM_PERFORMANCE_OPTS}
    combined = {"tool": "scale_bench", "format": 1, "against_kafka": True, "args": vars(args),
                "versions": {"kafka": version, "sluice_binary": sluice_bin},
                "kafka_heap_opts": args.kafka_heap, "kafka_jvm_performance_opts": against.KAFKA_JVM_PERFORMANCE_OPTS,
                "runs": []}
    status = 0
    for order, system in enumerate(against.alternating(args.runs), start=1):
        os.environ.update(env)
        os.environ["SLUICE_BIN"] = sluice_bin if system == "sluice" else str(WORKSPACE / "scripts/kafka-as-sluice.py")
        run = Run(args, system)
        run.log(f"run {order}: {system}")
        try:
            try:
                result = run.run()
            except Exception as e:  # noqa: BLE001 - a cluster that did not start is a result too
                run.error("start", f"{type(e).__name__}: {e}")
                result, status = run.result, 1
        finally:
            run.cleanup()
        result["order"] = order
        print(table(result), flush=True)
        combined["runs"].append(result)
    os.environ["SLUICE_BIN"] = sluice_bin
    combined["table"] = compare_table(combined["runs"])
    return combined, status


# ---------------------------------------------------------------- main

def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=10000)
    p.add_argument("--per-topic", type=int, default=100, help="partitions per topic (default 100)")
    p.add_argument("--create-batch", type=int, default=10, help="topics per CreateTopics request")
    p.add_argument("--create-timeout-s", type=float, default=300)
    p.add_argument("--metadata-requests", type=int, default=20)
    p.add_argument("--settle-s", type=float, default=10, help="idle window before the idle RSS is read")
    p.add_argument("--spread-rate", type=int, default=5000)
    p.add_argument("--spread-bytes", type=int, default=1024)
    p.add_argument("--spread-s", type=float, default=30)
    p.add_argument("--idle-connections", type=int, default=5000)
    p.add_argument("--seed-rate", type=int, default=20000)
    p.add_argument("--seed-bytes", type=int, default=2048)
    p.add_argument("--seed-s", type=float, default=20)
    p.add_argument("--restart-timeout-s", type=float, default=180)
    p.add_argument("--poll-interval-s", type=float, default=0.25)
    p.add_argument("--skip", action="append", default=[],
                   choices=["create", "metadata", "memory", "spread", "idle-connections", "restart"])
    p.add_argument("--written-idle-partitions", type=int, default=0,
                   help="written-idle phase (off by default): write to this many partitions, then measure RSS once idle")
    p.add_argument("--written-idle-mib", type=float, default=5, help="written-idle: MiB written to each partition")
    p.add_argument("--written-idle-s", type=float, default=25, help="written-idle: idle window before RSS is read")
    p.add_argument("--seed-alone", action="store_true",
                   help="first run the seed load before the partitions exist, to compare the seed loads beside "
                        "them with (use with --skip memory: that load would be in the memory baseline)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker setting, repeatable")
    p.add_argument("--output", help="JSON result path (default bench-results/scale-<UTC>.json)")
    p.add_argument("--keep-dirs", action="store_true", help="keep the nodes' data and logs")
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke: 300 partitions, 200 connections, short low-rate phases")
    p.add_argument("--against-kafka", action="store_true",
                   help="the same phases against Apache Kafka too, alternating, side by side")
    p.add_argument("--runs", type=int, default=1, help="with --against-kafka: runs of each (default 1: A B)")
    p.add_argument("--kafka-heap", default=against.KAFKA_HEAP_OPTS,
                   help=f"Kafka's heap options (default {against.KAFKA_HEAP_OPTS!r}, as scripts/bench.sh --against-kafka)")
    p.add_argument("--java-lib", default=str(WORKSPACE / ".java-lib"), help="Kafka's jars (scripts/java-lib.sh)")
    args = p.parse_args(argv)
    if args.quick:
        defaults = {"partitions": 300, "idle_connections": 200, "metadata_requests": 6, "settle_s": 1.0,
                    "spread_rate": 1000, "spread_s": 3.0, "seed_rate": 2000, "seed_s": 2.0,
                    "restart_timeout_s": 60, "create_timeout_s": 60}
        for k, v in defaults.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    if args.output is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        args.output = str(WORKSPACE / "bench-results" / f"scale-{stamp}.json")
    return args


def write_result(out: Path, result: dict, text: str) -> None:
    """The JSON result to `out`, and its table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(text)
    print(f"result: {out}", flush=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.against_kafka:
        combined, status = run_against_kafka(args)
        write_result(Path(args.output), combined, combined["table"])
        return status
    run = Run(args)
    status = 0
    try:
        try:
            result = run.run()
        except BaseException as e:  # noqa: BLE001 - the partial result is still written
            run.error("interrupted", f"{type(e).__name__}: {e}")
            result, status = run.result, 1
        write_result(Path(args.output), result, table(result))
    finally:
        run.cleanup()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
