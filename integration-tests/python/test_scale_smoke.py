"""Smoke of the scale benchmark (scripts/scale.sh --quick): a 3-node cluster creates a few
hundred RF 3 partitions, every one gets a leader and a full ISR, produce reaches every one,
idle connections stay open through the seed load, and the cluster recovers from SIGKILL of all
nodes. Checks the JSON result's structure and sanity (counts, completion, ordered percentiles),
never its timings: the figures themselves are reported by the full run (docs/scale.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sluice_node import WORKSPACE, sluice_binary

PARTITIONS = 300
CONNECTIONS = 200


def ordered(latency: dict) -> bool:
    keys = ["p50", "p99", "p99.9", "max"]
    values = [latency[k] for k in keys]
    return all(v is not None and v >= 0 for v in values) and values == sorted(values)


def test_scale_quick_creates_leads_produces_to_and_recovers_every_partition(tmp_path: Path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "SLUICE_BIN": str(sluice_binary()), "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(WORKSPACE / "scripts/scale.sh"), "--quick", "--partitions", str(PARTITIONS),
         "--idle-connections", str(CONNECTIONS), "--output", str(out)],
        cwd=WORKSPACE, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"scale.sh failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert "restart after SIGKILL" in proc.stdout, proc.stdout[-2000:]
    r = json.loads(out.read_text())
    assert r["errors"] == [], r["errors"]

    create = r["create"]
    assert create["partitions"] == PARTITIONS and create["failure_count"] == 0
    assert create["partitions_listed"] == create["partitions_led"] == create["partitions_full_isr"] == PARTITIONS
    assert 0 <= create["requests_answered_s"] <= create["all_led_s"] <= create["all_full_isr_s"]

    meta = r["metadata"]
    assert meta["requests"] >= 1 and meta["partitions_listed"] == PARTITIONS
    assert meta["response_bytes"] > PARTITIONS * 40, "a v8 partition entry with 3 replicas is 50 bytes"
    assert ordered(meta["latency_ms"])
    pages = meta["describe_topic_partitions"]
    assert pages is not None, "DescribeTopicPartitions was not answered"
    assert pages["partitions_listed"] == PARTITIONS and pages["pages"] >= 1
    assert pages["all_pages_bytes"] > PARTITIONS * 40

    mem = r["memory"]
    assert [n["node_id"] for n in mem["after_idle"]] == [1, 2, 3]
    assert all(n["rss_kb"] > 0 for n in mem["before"] + mem["after_idle"])
    assert mem["replicas_per_node"] == PARTITIONS
    assert mem["kb_per_idle_partition_replica_mean"] is not None

    spread = r["spread"]
    assert spread["sent"] > 0 and spread["acked"] == spread["sent"] and spread["errors"] == {}
    assert spread["partitions_acked"] == spread["partitions_targeted"] == PARTITIONS
    assert ordered(spread["latency_ms"])

    idle = r["idle_connections"]
    assert idle["opened"] == CONNECTIONS and idle["still_open_after"] == CONNECTIONS
    for phase in ("without", "with", "after"):
        load = idle[phase]
        assert load["sent"] > 0 and load["acked"] == load["sent"] and load["errors"] == {}, (phase, load)
        assert load["partitions_acked"] == 12
        assert ordered(load["latency_ms"])

    restart = r["restart"]
    assert restart["completed"] is True
    assert restart["all_serving_s"] is not None and restart["all_full_isr_s"] is not None
    assert all(v is not None for v in restart["serving_s"].values())
    writable = restart["writable"]
    assert writable["acked"] == writable["partitions"] == PARTITIONS + 12
    assert r["machine"]["uptime_before"] and r["machine"]["uptime_after"]


def test_against_kafka_puts_each_run_side_by_side_with_a_ratio_and_says_what_kafka_could_not_do():
    sys.path.insert(0, str(WORKSPACE / "integration-tests/python"))
    import scale_bench

    def run(order, system, full_isr_s, kb_per_replica, errors=()):
        return {"order": order, "system": system, "errors": list(errors),
                "create": {"requests_answered_s": 1.0, "all_led_s": 2.0, "all_full_isr_s": full_isr_s,
                           "partitions_full_isr": 10000},
                "memory": {"kb_per_idle_partition_replica_mean": kb_per_replica,
                           "after_idle": [{"rss_kb": 40 * 1024, "open_files": 10018}],
                           "per_node": [{"idle_cpu_pct": 5.0}, {"idle_cpu_pct": 7.0}]}}

    runs = [run(1, "sluice", 15.0, 3.0),
            run(2, "kafka", 60.0, 30.0, [{"phase": "restart", "message": "node 2 exited with 1"}])]
    lines = scale_bench.compare_table(runs).splitlines()
    assert lines[0] == "| figure | Sluice (run 1) | Kafka (run 2) | ratio (>1: Sluice better) |"
    assert "| every ISR full, s | 15.0 | 60.0 | 4.00x |" in lines, lines
    assert "| KB of RSS per idle replica (mean of nodes) | 3.00 | 30.0 | 10.00x |" in lines
    assert "| idle CPU, busiest node, % of a core | 7.00 | 7.00 | 1.00x |" in lines
    # A phase neither ran shows "-", and what Kafka could not complete is said under the table.
    assert "| every partition written to, s | - | - | - |" in lines
    assert "Kafka (run 2) could not complete restart: node 2 exited with 1" in lines
