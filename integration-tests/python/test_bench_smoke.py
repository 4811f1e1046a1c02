"""Smoke run of the benchmark tools (issue 14), never of their timings.

1. sluice-bench with tiny counts against one real sluice node writes a --json whose counts add
   up: every record sent was acknowledged and received by every group, every phase has CPU
   seconds >= 0 and a peak RSS per node, and percentiles are ordered (p50 <= p99 <= p99.9 <= max).
2. scripts/bench_against_kafka.py's report turns two such JSONs (the same run labelled once
   "sluice" and once "kafka", to keep CI short) into the one table, with a ratio of exactly 1
   for identical figures, and a real PNG of the latency percentiles.
3. The ratio points the same way for every figure (> 1 = Sluice better) and ProducerPerformance's
   closing line is parsed as Kafka 4.4 prints it.
4. Transactions: ProducerPerformance's transactional phase is the idempotent one's command with
   --transactional-id and 100 ms transactions, and its figures sit beside the idempotent ones
   with each system's transaction cost (1 - txn/idempotent) and a ratio > 1 when transactions
   cost Sluice less.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice_node import SPEC, WORKSPACE, sluice_binary

sys.path.insert(0, str(WORKSPACE / "scripts"))
import bench_against_kafka as report  # noqa: E402

RECORDS_2K = 300
RECORDS_100B = 700
RATE = 400
DURATION_S = 2


def bench_binary() -> Path:
    """sluice-bench from the target dir, found as sluice_node.py finds sluice."""
    spec = SPEC["binary"]
    target_dir = WORKSPACE / os.environ.get(spec["target_dir_env"], spec["default_target_dir"])
    for c in (target_dir / "release/sluice-bench", target_dir / "debug/sluice-bench"):
        if c.is_file():
            return c
    raise FileNotFoundError(
        f"no sluice-bench under {target_dir}: run "
        "`cargo build --release -p sluice-integration-tests --bin sluice-bench` (scripts/test.sh does)")


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "sluice.json"
    cmd = [str(bench_binary()), "--label", "sluice-smoke", "--json", str(out),
           "--records-2k", str(RECORDS_2K), "--records-100b", str(RECORDS_100B), "--records-txn", str(RECORDS_2K),
           "--rate", str(RATE), "--duration-s", str(DURATION_S), "--partitions", "3", "--consumers", "2"]
    env = {**os.environ, "SLUICE_BIN": str(sluice_binary())}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, f"sluice-bench failed:\n{p.stdout}\n{p.stderr}"
    assert "producer: send to delivery report" in p.stdout, p.stdout  # the printed table stays
    return json.loads(out.read_text())


def assert_ordered(q: dict, what: str) -> None:
    assert q["p50_ms"] is not None, what
    assert 0 <= q["p50_ms"] <= q["p99_ms"] <= q["p99_9_ms"] <= q["max_ms"], f"{what}: {q}"


def assert_usage(phase: dict, nodes: int, what: str) -> None:
    assert phase["broker_cpu_s"] >= 0, what
    assert len(phase["nodes"]) == nodes, what
    for n in phase["nodes"]:
        assert n["cpu_s"] >= 0, what
        assert n["peak_rss_mb"] > 0, what
    assert phase["peak_rss_mb_max"] == max(n["peak_rss_mb"] for n in phase["nodes"]), what
    assert abs(phase["broker_cpu_s"] - sum(n["cpu_s"] for n in phase["nodes"])) < 1e-6, what


def test_sluice_bench_json_counts_add_up(bench_json):
    j = bench_json
    assert (j["tool"], j["label"]) == ("sluice-bench", "sluice-smoke")
    assert j["librdkafka"].count(".") >= 2
    assert j["brokers"]["nodes"] == 1 and j["brokers"]["replication_factor"] == 1
    assert j["config"]["acks"] == "all" and j["config"]["consumer_groups"] == 2
    assert j["config"]["linger_ms"] == 5  # librdkafka's default, unless --linger-ms says otherwise

    by_size = {t["record_bytes"]: t for t in j["throughput"] if not t["transactional"]}
    assert set(by_size) == {2048, 100}
    transactional = [t for t in j["throughput"] if t["transactional"]]
    assert len(transactional) == 1 and transactional[0]["transaction_ms"] == 100, transactional
    by_size["txn"] = transactional[0]
    for size, records in ((2048, RECORDS_2K), (100, RECORDS_100B), ("txn", RECORDS_2K)):
        t = by_size[size]
        size = 2048 if size == "txn" else size
        assert t["records"] == records and t["bytes"] == records * size
        assert t["secs"] > 0 and t["msgs_per_s"] > 0 and t["mb_per_s"] > 0
        assert abs(t["msgs_per_s"] * t["secs"] - records) < 1e-6 * records
        assert_usage(t, 1, f"throughput {size}")

    lat = j["latency"]
    sent = RATE * DURATION_S
    assert lat["sent"] == lat["records"] == sent and lat["target_rate"] == RATE
    assert lat["bytes"] == sent * 2048
    assert lat["producer_ack"]["count"] == sent
    assert_ordered(lat["producer_ack"], "producer ack")
    assert [g["group"] for g in lat["end_to_end"]] == ["sluice-bench-group-0", "sluice-bench-group-1"]
    for g in lat["end_to_end"]:
        assert g["received"] == g["count"] == sent, g
        assert_ordered(g, g["group"])
    assert_usage(lat, 1, "latency")


def test_report_prints_table_and_draws_png(bench_json, tmp_path):
    sluice = tmp_path / "sluice.json"
    kafka = tmp_path / "kafka.json"
    sluice.write_text(json.dumps(bench_json))
    as_kafka = {**bench_json, "label": "kafka-smoke"}
    kafka.write_text(json.dumps(as_kafka))
    out = tmp_path / "result.json"
    p = subprocess.run([sys.executable, str(WORKSPACE / "scripts/bench_against_kafka.py"), "report",
                        str(sluice), str(kafka), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == ("| figure | Sluice (run 1) | Kafka (run 2) | spread, Sluice / Kafka | "
                        "ratio (>1: Sluice better) |")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    for figure in ("2 KB: MB/s", "100 B: msgs/s", "producer ack p99, ms", "end-to-end group 2 p99.9, ms",
                   "broker CPU-s per GB", "peak RSS, largest node, MB"):
        assert figure in rows, f"{figure} missing from\n{p.stdout}"
    # The same run under both labels: every measured figure is present twice and its ratio is 1.
    assert rows["2 KB: MB/s"].endswith("| 1.00x |"), rows["2 KB: MB/s"]
    assert rows["producer ack p99, ms"].endswith("| 1.00x |"), rows["producer ack p99, ms"]
    # sluice-bench's own transactional phase ran: its cost against the 2 KB phase is the same twice.
    txn_cost = "2 KB transaction cost, % of MB/s (1 - txn / 2 KB, not idempotent)"
    assert rows[txn_cost].endswith("| 1.00x |"), rows[txn_cost]
    # ProducerPerformance did not run here: shown as missing, not as a number.
    assert rows["max: MB/s"] == "| max: MB/s | - | - | - / - | - |"
    for figure in ("100 ms transactions: MB/s", "100 ms transactions: ack p99, ms",
                   "transaction cost, % of MB/s (1 - txn/idempotent)"):
        assert rows[figure] == f"| {figure} | - | - | - / - | - |", rows[figure]
    assert rows["linger 0: producer ack p99, ms"] == "| linger 0: producer ack p99, ms | - | - | - / - | - |"

    result = json.loads(out.read_text())
    assert [r["system"] for r in result["runs"]] == ["sluice", "kafka"]
    assert result["table"] in p.stdout
    png = out.with_suffix(".png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000, len(data)


def test_ratio_is_above_one_when_sluice_is_better():
    base = {"order": 1, "errors": [], "sluice_bench": {"throughput": [], "latency": None}}

    def run(system, mb_s, p99):
        r = copy.deepcopy(base)
        r["system"] = system
        r["sluice_bench"]["throughput"] = [{"record_bytes": 2048, "mb_per_s": mb_s}]
        r["sluice_bench"]["latency"] = {"producer_ack": {"p99_ms": p99}}
        return r

    result = {"runs": [run("sluice", 300.0, 2.0), run("kafka", 100.0, 8.0), run("kafka", 100.0, 12.0)]}
    rows = {r["figure"]: r for r in report.table_rows(result) if not r.get("section")}
    assert rows["2 KB: MB/s"]["ratio"] == pytest.approx(3.0)
    assert rows["producer ack p99, ms"]["ratio"] == pytest.approx(5.0)
    assert rows["100 B: msgs/s"]["ratio"] is None
    # The spread of each system's runs: Kafka's two p99s, 8 and 12 ms, lie 40 % of their mean apart.
    assert rows["producer ack p99, ms"]["kafka_spread"] == pytest.approx(40.0)
    assert rows["producer ack p99, ms"]["sluice_spread"] is None, "one run has no spread"
    assert report.alternating(3) == ["sluice", "kafka", "kafka", "sluice", "sluice", "kafka"]


def test_kafka_4_1_gets_its_own_columns_spread_and_ratio_beside_the_newest_kafka(tmp_path):
    def run(order, system, mb_s):
        return {"order": order, "system": system, "errors": [],
                "sluice_bench": {"throughput": [{"record_bytes": 2048, "mb_per_s": mb_s}], "latency": None}}

    order = report.alternating(2, list(report.SYSTEMS))
    assert order == ["sluice", "kafka", "kafka-4.1", "kafka-4.1", "kafka", "sluice"]
    throughput = {"sluice": [300.0, 340.0], "kafka": [100.0, 100.0], "kafka-4.1": [80.0, 80.0]}
    seen = {s: 0 for s in report.SYSTEMS}
    runs = []
    for i, system in enumerate(order, start=1):
        runs.append(run(i, system, throughput[system][seen[system]]))
        seen[system] += 1
    result = {"versions": {"kafka": "4.4.0", "kafka_4_1": "4.1.2"}, "runs": runs}
    row = next(r for r in report.table_rows(result) if r["figure"] == "2 KB: MB/s")
    assert row["kafka-4.1"] == [80.0, 80.0], "a kafka-4.1 run is not counted as the newest Kafka's"
    assert row["ratio"] == pytest.approx(3.2) and row["ratio_kafka"] == pytest.approx(3.2)
    assert row["ratio_kafka-4.1"] == pytest.approx(4.0)
    lines = report.format_table(result).splitlines()
    assert lines[0] == ("| figure | Sluice (run 1) | Sluice (run 6) | Kafka (run 2) | Kafka (run 5) | "
                        "Kafka 4.1 (run 3) | Kafka 4.1 (run 4) | spread, Sluice / Kafka / Kafka 4.1 | "
                        "ratio (>1: Sluice better) | ratio to Kafka 4.1 |")
    assert "| 2 KB: MB/s | 300 | 340 | 100 | 100 | 80.0 | 80.0 | 12% / 0% / 0% | 3.20x | 4.00x |" in lines
    assert any(line.startswith("versions:") and "Apache Kafka 4.4.0 and 4.1.2;" in line for line in lines), lines
    # A sluice-bench JSON labelled kafka-4.1-... is Kafka 4.1's run, not the newest Kafka's.
    files = []
    for label in ("kafka-2", "kafka-4.1-3"):
        files.append(tmp_path / f"{label}.json")
        files[-1].write_text(json.dumps({"tool": "sluice-bench", "label": label, "config": {}}))
    loaded = report.load_report_inputs(files)
    assert [r["system"] for r in loaded["runs"]] == ["kafka", "kafka-4.1"]


def test_footer_says_how_host_memory_was_prepared_and_what_each_run_gave_back():
    runs = [{"order": 1, "system": "sluice", "errors": [], "reported_mib": 0},
            {"order": 2, "system": "kafka", "errors": [], "reported_mib": 768}]
    warmed = {"machine": {"nproc": 2, "host_memory": {"warmed_gib": 20, "warm_s": 41.5,
                                                      "page_reporting_order_before": "9",
                                                      "page_reporting_order": 11}},
              "runs": runs}
    lines = report._footer(warmed)
    assert any(line.startswith("host memory: free page reporting paused (order 9 -> 11) and 20 GiB touched")
               for line in lines), lines
    assert any(line.startswith("run 2 kafka") and "768 MiB reported to the host" in line for line in lines), lines
    assert not any("reported to the host" in line for line in lines if line.startswith("run 1")), lines
    left_on = {"machine": {"nproc": 2, "host_memory": {"warmed": "free page reporting left on (denied)"}},
               "runs": []}
    assert "host memory: free page reporting left on (denied)" in report._footer(left_on)


def test_producer_performance_summary_is_parsed():
    out = ("100000 records sent, 19996.0 records/sec (39.05 MB/sec), 3.10 ms avg latency, 212.00 ms max latency.\n"
           "200000 records sent, 19992.003199 records/sec (39.05 MB/sec), 2.87 ms avg latency, 212.00 ms max "
           "latency, 2 ms 50th, 5 ms 95th, 11 ms 99th, 98 ms 99.9th.\n")
    got = report.parse_producer_perf(out)
    assert got["records"] == 200000
    assert got["msgs_per_s"] == pytest.approx(19992.003199)
    assert got["mb_per_s"] == pytest.approx(19992.003199 * 2048 / 1e6)
    assert (got["p50_ms"], got["p95_ms"], got["p99_ms"], got["p99_9_ms"]) == (2, 5, 11, 98)
    with pytest.raises(ValueError):
        report.parse_producer_perf("10 records sent, 5.0 records/sec (0.01 MB/sec), 1.0 ms avg latency, 2.0 ms max latency.")


def test_transactional_producer_performance_is_the_idempotent_command_in_100_ms_transactions():
    args = (Path("/lib"), "127.0.0.1:9092", "perf-txn", 2000, -1)
    idempotent = report.producer_perf_cmd(*args)
    transactional = report.producer_perf_cmd(*args, transactional_id="bench-pp-sluice-1")
    assert "--transactional-id" not in idempotent
    assert transactional == idempotent + ["--transactional-id", "bench-pp-sluice-1",
                                          "--transaction-duration-ms", "100"]
    assert "acks=all" in transactional and transactional[transactional.index("--record-size") + 1] == "2048"


def test_transaction_cost_rows_sit_beside_the_idempotent_figures():
    def run(system, idempotent_mb_s, txn_mb_s, txn_p99):
        return {"order": 1, "system": system, "errors": [], "producer_perf": {
            "max": {"mb_per_s": idempotent_mb_s, "p99_ms": 10.0},
            "txn": {"mb_per_s": txn_mb_s, "p99_ms": txn_p99}}}

    # Transactions cost Sluice 15 % and Kafka 40 % (the mean of 30 % and 50 %).
    result = {"runs": [run("sluice", 200.0, 170.0, 20.0), run("kafka", 100.0, 70.0, 50.0),
                       run("kafka", 100.0, 50.0, 30.0)]}
    rows = {r["figure"]: r for r in report.table_rows(result) if not r.get("section")}
    assert rows["idempotent: MB/s"]["ratio"] == pytest.approx(2.0)
    assert rows["100 ms transactions: MB/s"]["ratio"] == pytest.approx(170.0 / 60.0)
    assert rows["100 ms transactions: ack p99, ms"]["ratio"] == pytest.approx(2.0)
    cost = rows["transaction cost, % of MB/s (1 - txn/idempotent)"]
    assert cost["sluice"] == [pytest.approx(15.0)]
    assert cost["kafka"] == [pytest.approx(30.0), pytest.approx(50.0)]
    # Sluice keeps 85 % of its throughput, Kafka 60 %: > 1, Sluice better.
    assert cost["ratio"] == pytest.approx(0.85 / 0.6)
    # The other way round the ratio drops below 1, and a negative cost (noise) still gives one.
    assert report.ratio("cost", 40.0, 10.0) == pytest.approx(0.6 / 0.9)
    assert report.ratio("cost", -5.0, 20.0) == pytest.approx(1.05 / 0.8)
    table = report.format_table(result)
    # Kafka's costs, 30 % and 50 %, lie 50 % of their mean (40 %) apart.
    assert "| transaction cost, % of MB/s (1 - txn/idempotent) | 15.0 | 30.0 | 50.0 | - / 50% | 1.42x |" in table
