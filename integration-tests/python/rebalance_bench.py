#!/usr/bin/env python3
"""Rebalance cost, measured and printed, never asserted on: what a member joining a group of
--members (default 100) costs the members already there, with the classic protocol (librdkafka's
default eager `range,roundrobin`, and `cooperative-sticky`) and with KIP-848's
(`group.protocol=consumer`), on a release sluice node or, with --against-kafka, Apache Kafka
4.4 (scripts/kafka-as-sluice.py, Kafka's production JVM settings). The same client, librdkafka
(confluent-kafka-python), on both. Run through scripts/rebalance-bench.sh.

Per protocol, on a fresh broker: a topic of --partitions partitions; --members members start and
settle (every partition assigned); records flow at --rate a second, round robin over the
partitions; after --warm-s one more member joins. Figures, in the table and the JSON result
(default bench-results/rebalance-<UTC>.json):
  assigned    seconds from the new member's start until it holds partitions;
  settled     seconds until, besides, every partition is held by one member again;
  pause       per member already there, the longest time between two records it received from
              1 s before the join until 3 s after the group settled; the median and the largest
              over the members, beside the same figure for the --warm-s before the join (what
              the records' spacing alone gives).
Every process and temporary directory it starts is removed at exit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402

from group_clients import PollingMember, create_topic, wait_until  # noqa: E402
from sluice_node import SluiceNode  # noqa: E402

WORKSPACE = Path(__file__).resolve().parents[2]
KAFKA = WORKSPACE / "scripts" / "kafka-as-sluice.py"
# Kafka's production JVM defaults, as scripts/bench_against_kafka.py and share_bench.py set them.
KAFKA_HEAP_OPTS = "-Xmx1g -Xms1g"
KAFKA_JVM_PERFORMANCE_OPTS = ("-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
                              "-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true")
PROTOCOLS = {
    "classic-eager": ("classic", None),
    "classic-cooperative": ("classic", "cooperative-sticky"),
    "consumer": ("consumer", None),
}


def log(msg: str) -> None:
    print(f"[rebalance {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_one(args: argparse.Namespace, name: str) -> dict:
    protocol, assignment = PROTOCOLS[name]
    if args.against_kafka:
        os.environ["SLUICE_BIN"] = str(KAFKA)
        os.environ["KAFKA_HEAP_OPTS"] = KAFKA_HEAP_OPTS
        os.environ["KAFKA_JVM_PERFORMANCE_OPTS"] = KAFKA_JVM_PERFORMANCE_OPTS
    # Kafka's default group.initial.rebalance.delay.ms (3 s) holds an empty group's first
    # classic rebalance; it does not touch the join measured here.
    node = SluiceNode({}, ready_timeout=120 if args.against_kafka else None)
    node.start()
    members: list[PollingMember] = []
    stop = threading.Event()
    errors: list[str] = []
    try:
        topic, group = "rebalance-bench", f"rebalance-bench-{name}"
        create_topic(node.bootstrap, topic, args.partitions)
        started = time.monotonic()
        members = [PollingMember(node.bootstrap, topic, group, f"m{i}", errors, protocol, assignment, poll_s=0.02)
                   for i in range(args.members)]

        def settled(group_members: list[PollingMember]):
            held = [m.assigned for m in group_members]
            return sum(held) == args.partitions and all(held) or None

        wait_until(f"{args.members} members to settle", lambda: settled(members), timeout=300, interval=0.1)
        log(f"{name}: {args.members} members settled in {time.monotonic() - started:.1f} s")

        def feed() -> None:
            p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5, "log_level": 3})
            i, tick = 0, 0.02
            per_tick = max(1, int(args.rate * tick))
            while not stop.is_set():
                for _ in range(per_tick):
                    p.produce(topic, value=str(i).encode(), partition=i % args.partitions)
                    i += 1
                p.poll(0)
                time.sleep(tick)
            p.flush(30)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(args.warm_s)  # records flowing before the join: the baseline window
        join_at = time.monotonic()
        joiner = PollingMember(node.bootstrap, topic, group, "joiner", errors, protocol, assignment, poll_s=0.02)
        wait_until("the new member to hold partitions", lambda: joiner.assigned or None, timeout=120, interval=0.01)
        assigned_at = time.monotonic()
        wait_until("the group to settle again", lambda: settled(members + [joiner]), timeout=120, interval=0.01)
        settled_at = time.monotonic()
        members.append(joiner)
        time.sleep(3)  # the window the pauses are measured in ends 3 s after the group settled
        stop.set()
        feeder.join(timeout=60)
        old = members[:-1]
        pauses = [m.longest_gap(join_at - 1, settled_at + 3) for m in old]
        baseline = [m.longest_gap(join_at - args.warm_s, join_at) for m in old]
        result = {
            "protocol": name, "group.protocol": protocol, "assignment": assignment or "librdkafka default",
            "assigned_s": round(assigned_at - join_at, 3), "settled_s": round(settled_at - join_at, 3),
            "pause_median_ms": round(statistics.median(pauses) * 1000), "pause_max_ms": round(max(pauses) * 1000),
            "baseline_median_ms": round(statistics.median(baseline) * 1000),
            "baseline_max_ms": round(max(baseline) * 1000), "client_errors": errors[:20],
        }
        log(f"{name}: {result}")
        return result
    finally:
        stop.set()
        for m in members:
            m._stop.set()
        for m in members:
            m.leave()
        node.kill()
        shutil.rmtree(node.work_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--rate", type=int, default=2000, help="records a second, round robin over the partitions")
    ap.add_argument("--warm-s", type=float, default=5.0)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help=f"some of {','.join(PROTOCOLS)}")
    ap.add_argument("--against-kafka", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    broker = "kafka" if args.against_kafka else "sluice"
    runs = [run_one(args, name) for name in args.protocols.split(",")]
    print(f"\nrebalance: one member joining {args.members} ({args.partitions} partitions, {args.rate} records/s), "
          f"librdkafka, on {broker}")
    print(f"{'protocol':<22}{'assigned s':>11}{'settled s':>11}{'pause median/max ms':>22}{'baseline median/max ms':>25}")
    for r in runs:
        print(f"{r['protocol']:<22}{r['assigned_s']:>11.2f}{r['settled_s']:>11.2f}"
              f"{r['pause_median_ms']:>12}/{r['pause_max_ms']:<9}{r['baseline_median_ms']:>15}/{r['baseline_max_ms']}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or WORKSPACE / "bench-results" / f"rebalance-{broker}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"tool": "rebalance_bench", "broker": broker, "args": {k: str(v) for k, v in vars(args).items()},
                               "load_after": os.getloadavg(), "runs": runs}, indent=2) + "\n")
    print(f"result: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
