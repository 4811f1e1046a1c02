#!/usr/bin/env python3
"""Sluice against Apache Kafka, side by side on this machine (`scripts/bench.sh --against-kafka`).

    run     starts a 3-node Sluice cluster, a 3-node cluster of the newest Kafka and one of
            Kafka 4.1 (KRaft, 1 GB heap per node) in turn, A B C C B A (--systems sluice,kafka
            for A B B A without 4.1), and drives each with the same clients: sluice-bench
            (rdkafka: max acks=all throughput at 2 KB, at 100 B and at 2 KB in 100 ms
            transactions, then producer-ack and end-to-end latency at the seed load with two
            consumer groups committing) and Kafka's own ProducerPerformance (2 KB acks=all: max
            throughput, idempotent as the Java client is by default; the same records with
            --transactional-id in 100 ms transactions; and at the seed rate). The table puts
            each client's transactional figures beside its non-transactional ones (Java:
            throughput and ack p99, idempotent), with what transactions cost each system
            (1 - txn/non-txn MB/s) and their ratio.
            Writes one JSON result and a PNG of latency percentiles, prints one table.
            With --security SASL_SSL each system runs twice in its turn, plaintext and then with
            TLS and SASL SCRAM-SHA-512 on its only listener (replication too), the same workload,
            and the table is each system's figures under both and what TLS and SASL cost it.
            --records-2k, --records-100b, --records-txn, --rate, --duration-s, --pp-max-records
            and --settle-s scale a run down (or up) from the full or --quick figures.
    report  the table and PNG again from a result JSON, or from sluice-bench --json files
            whose --label starts with "sluice", "kafka" or "kafka-4.1" (the CI smoke test
            does this).

Nothing is asserted: a phase that fails is recorded as an error and shows as "-".
The cluster is started with the Python test harness (integration-tests/python/sluice_node.py);
Kafka takes sluice's place through scripts/kafka-as-sluice.py, so both get the same ports,
data directories on the same disk, and the same readiness probe."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration-tests/python"))

import security_certs  # noqa: E402
import sluice_node  # noqa: E402  (after the path insert)

# "kafka" is the newest Kafka (integration-tests/java/pom.xml, --java-lib); "kafka-4.1" is Kafka
# 4.1's broker (integration-tests/java/kafka-4.1/pom.xml, --kafka-4.1-lib) driven by the same,
# newest clients. Ratios are Sluice's against each Kafka; the headline one is the newest.
SYSTEMS = ("sluice", "kafka", "kafka-4.1")
NAMES = {"sluice": "Sluice", "kafka": "Kafka", "kafka-4.1": "Kafka 4.1"}
KAFKAS = ("kafka", "kafka-4.1")
RECORD_BYTES = 2048
# Both clients' transactional phases commit every TRANSACTION_MS (the issue's 100 ms):
# sluice-bench's --txn-ms and ProducerPerformance's --transaction-duration-ms.
TRANSACTION_MS = 100
SECURITY = ("PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISM = "SCRAM-SHA-512"
BENCH_USER = "admin"

# Kafka's own defaults from kafka-server-start.sh / kafka-run-class.sh, except that the issue
# fixes the heap at 1 GB per node.
KAFKA_HEAP_OPTS = "-Xmx1g -Xms1g"
KAFKA_JVM_PERFORMANCE_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"
)

FULL = {
    "records_2k": 500_000,
    "records_100b": 2_000_000,
    "records_txn": 200_000,
    "rate": 20_000,
    "duration_s": 30,
    "partitions": 12,
    "consumers": 2,
    "pp_max_records": 500_000,
    "settle_s": 60,
    "linger0": True,
}
QUICK = {
    "records_2k": 2_000,
    "records_100b": 5_000,
    "records_txn": 2_000,
    "rate": 1_000,
    "duration_s": 3,
    "partitions": 12,
    "consumers": 2,
    "pp_max_records": 2_000,
    "settle_s": 0,
    "linger0": True,
}


# ---------------------------------------------------------------- machine, versions


def machine_info() -> dict:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = _meminfo_kib("MemTotal")
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_total_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
    }


def _output(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({e})"
    return (p.stdout + p.stderr).strip()


def kafka_version(java_lib: Path) -> str:
    """Kafka's version from the broker jar's name, e.g. kafka_2.13-4.1.0.jar -> 4.1.0."""
    for jar in sorted(java_lib.glob("kafka_*.jar")):
        m = re.fullmatch(r"kafka_[\d.]+-([\w.\-]+)\.jar", jar.name)
        if m:
            return m.group(1)
    return "?"


def rdkafka_crate_version() -> str:
    lock = (ROOT / "Cargo.lock").read_text()
    m = re.search(r'name = "rdkafka"\nversion = "([^"]+)"', lock)
    return m.group(1) if m else "?"


def versions(sluice_bin: Path, java_lib: Path, kafka_41_lib: Path | None = None) -> dict:
    commit = _output(["git", "rev-parse", "--short=12", "HEAD"], ROOT)
    if _output(["git", "status", "--porcelain", "--untracked-files=no"], ROOT):
        commit += "+dirty"
    return {
        "sluice": _output([str(sluice_bin), "--version"]),
        "sluice_commit": commit,
        "kafka": kafka_version(java_lib),
        **({"kafka_4_1": kafka_version(kafka_41_lib)} if kafka_41_lib else {}),
        "rdkafka_crate": rdkafka_crate_version(),
        "java": _output(["java", "-version"]).splitlines()[0:3],
        "python": platform.python_version(),
    }


# ---------------------------------------------------------------- broker resource use


def _cpu_seconds(pid: int) -> float:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Meter:
    """CPU seconds and peak RSS of each broker over a span, as sluice-bench measures them."""

    def __init__(self, pids: list[tuple[int, int]]):
        self.start = {}
        for node_id, pid in pids:
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM
                reset = True
            except OSError:
                reset = False
            self.start[node_id] = (pid, _cpu_seconds(pid), reset)

    def stop(self) -> dict:
        nodes = []
        for node_id, (pid, cpu0, reset) in self.start.items():
            nodes.append({"node_id": node_id, "cpu_s": _cpu_seconds(pid) - cpu0,
                          "peak_rss_mb": _peak_rss_mb(pid), "peak_rss_since_start": not reset})
        return {"broker_cpu_s": sum(n["cpu_s"] for n in nodes),
                "peak_rss_mb_max": max((n["peak_rss_mb"] for n in nodes), default=float("nan")),
                "nodes": nodes}


# ---------------------------------------------------------------- Kafka's ProducerPerformance

# The closing line: "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency,
# P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
PP_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")


def parse_producer_perf(output: str) -> dict:
    """Figures of ProducerPerformance's closing line (its MB/sec is MiB: 1024 * 1024 bytes)."""
    matches = PP_SUMMARY.findall(output)
    if not matches:
        raise ValueError("no ProducerPerformance summary line in its output")
    n, rps, mibps, avg, mx, p50, p95, p99, p999 = matches[-1]
    return {"records": int(n), "msgs_per_s": float(rps), "mb_per_s": float(rps) * RECORD_BYTES / 1e6,
            "mib_per_s_reported": float(mibps), "avg_ms": float(avg), "max_ms": float(mx),
            "p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "p99_9_ms": float(p999)}


def producer_perf_cmd(java_lib: Path, bootstrap: str, topic: str, records: int, rate: int,
                      client_config: Path | None = None, transactional_id: str | None = None,
                      transaction_ms: int = TRANSACTION_MS) -> list[str]:
    """ProducerPerformance's command line: acks=all, 2 KB, Java client defaults otherwise
    (idempotent); with `transactional_id`, one transactional producer committing every
    `transaction_ms`."""
    cmd = ["java", "-Xmx512m", "-cp", str(java_lib / "*"), "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_BYTES),
           "--throughput", str(rate), "--producer-props", "acks=all", f"bootstrap.servers={bootstrap}"]
    if client_config is not None:
        cmd += ["--producer.config", str(client_config)]
    if transactional_id is not None:
        cmd += ["--transactional-id", transactional_id, "--transaction-duration-ms", str(transaction_ms)]
    return cmd


def producer_perf(java_lib: Path, bootstrap: str, topic: str, records: int, rate: int,
                  pids: list[tuple[int, int]], log: Path, client_config: Path | None = None,
                  transactional_id: str | None = None) -> dict:
    """One ProducerPerformance run (producer_perf_cmd; rate -1 = as fast as it goes) with the
    brokers' CPU and peak RSS over it. `client_config` is a properties file of the producer's
    security settings (kept out of the logged command)."""
    cmd = producer_perf_cmd(java_lib, bootstrap, topic, records, rate, client_config, transactional_id)
    meter = Meter(pids)
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    secs = time.monotonic() - t0
    usage = meter.stop()
    if p.returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited with {p.returncode} (log {log})")
    result = parse_producer_perf(log.read_text(errors="replace"))
    gb = result["records"] * RECORD_BYTES / 1e9
    return {**result, **usage, "target_rate": rate, "record_bytes": RECORD_BYTES, "secs": secs,
            "transaction_ms": TRANSACTION_MS if transactional_id else None,
            "broker_cpu_s_per_gb": usage["broker_cpu_s"] / gb if gb else float("nan")}


# ---------------------------------------------------------------- one run (one cluster)


def settle(max_s: float) -> None:
    """Waits (at most max_s) for the 1-minute load average to drop below 1, so a run does
    not start in the previous run's tail."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline and os.getloadavg()[0] >= 1.0:
        time.sleep(2)


PAGE_REPORTING = Path("/sys/module/page_reporting/parameters")
# Free memory left untouched by the warm-up, so that the kernel never has to reclaim for it.
WARM_SPARE_GIB = 1


def _meminfo_kib(key: str) -> int:
    """A /proc/meminfo figure in KiB (0 where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def no_reporting_order() -> int:
    """One above the kernel's largest free-block order (10 on x86-64, the last column of
    /proc/buddyinfo): the page_reporting_order that leaves no block to report, and the
    largest the kernel accepts."""
    try:
        columns = Path("/proc/buddyinfo").read_text().splitlines()[0].split("zone", 1)[1].split()[1:]
        return len(columns)
    except (OSError, IndexError):
        return 11


def _reported_kib() -> int | None:
    try:
        return int((PAGE_REPORTING / "reported_kib").read_text())
    except (OSError, ValueError):
        return None


class HostMemory:
    """A virtual machine whose balloon reports free memory to its host (virtio-balloon free page
    reporting, Linux's page_reporting) gets a reported page back only through a fault taken by
    the host the next time the guest uses it. A broker's page cache grows into free memory as
    it writes, so on a fresh VM, or after free memory has been reported, every byte a run writes
    pays for it: on this 2-core VM the 2 KB max-throughput phase ran at 128 MB/s with 10.7 broker
    CPU-s instead of 295-360 MB/s with 3.1, the first run's "half speed" that every earlier full
    run showed, while the runs after it found memory the first had touched.

    `warm()` stops the reporting (page_reporting_order above any block the kernel has) and
    touches the free memory once, so that every run of either system finds memory its host
    already backs; `restore()` puts the order back. Without the knob (no balloon, not root) it
    records why and changes nothing; the run's `reported_mib` still shows what was reported
    during it where the counter exists."""

    def __init__(self) -> None:
        self.info: dict = {"free_page_reporting": PAGE_REPORTING.is_dir()}
        self._order_before: str | None = None

    def warm(self) -> dict:
        order = PAGE_REPORTING / "page_reporting_order"
        if not order.exists():
            self.info["warmed"] = "no free page reporting on this machine: nothing to do"
            return self.info
        paused = no_reporting_order()
        try:
            self._order_before = order.read_text().strip()
            order.write_text(f"{paused}\n")
        except OSError as e:
            self.info["warmed"] = f"free page reporting left on ({e}); runs may pay host faults for new memory"
            self._order_before = None
            return self.info
        self.info["page_reporting_order_before"] = self._order_before
        self.info["page_reporting_order"] = paused
        gib = max(_meminfo_kib("MemFree") // (1 << 20) - WARM_SPARE_GIB, 0)
        say(f"touching {gib} GiB of free memory once, with free page reporting paused (HostMemory)")
        t0 = time.monotonic()
        chunks = []
        for _ in range(gib):
            chunks.append(b"\x01" * (1 << 30))  # written, so every page is faulted in
        del chunks
        self.info.update(warmed_gib=gib, warm_s=round(time.monotonic() - t0, 1))
        say(f"  {gib} GiB touched in {self.info['warm_s']} s")
        return self.info

    def restore(self) -> None:
        if self._order_before is not None:
            try:
                (PAGE_REPORTING / "page_reporting_order").write_text(self._order_before + "\n")
                self.info["page_reporting_order_restored"] = self._order_before
            except OSError as e:
                say(f"could not restore page_reporting_order {self._order_before}: {e}")
            self._order_before = None


class Secured:
    """A SASL_SSL-only cluster's material for one run, in `directory`: a test CA, one broker
    certificate (SAN 127.0.0.1, localhost) every node presents as a PEM keystore, and the
    SCRAM-SHA-512 user `admin` with a fresh random password. The brokers log in to each other
    as that user too. The password goes to the brokers through SLUICE_ADD_SCRAM (the Kafka shim
    reads it as well) and to the clients through files, so it is on no command line or log."""

    def __init__(self, directory: Path):
        pki = security_certs.Pki(directory)
        server = pki.server("broker")
        self.ca = pki.ca.cert
        self.password = secrets.token_hex(16)
        self.password_file = directory / "sasl-password"
        self.password_file.write_text(self.password + "\n")
        self.password_file.chmod(0o600)
        self.settings = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.combined),
                         "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca),
                         "sasl.enabled.mechanisms": SCRAM_MECHANISM}
        self.env = {"SLUICE_ADD_SCRAM": f"{SCRAM_MECHANISM}=[name={BENCH_USER},password={self.password}]"}
        self.client_security = {"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM,
                                "sasl.username": BENCH_USER, "sasl.password": self.password,
                                "ssl.ca.location": str(self.ca)}
        # Kafka's Java producer (ProducerPerformance): the same login, the CA as a PEM truststore.
        self.java_config = directory / "producer-security.properties"
        self.java_config.write_text(
            "security.protocol=SASL_SSL\n"
            f"sasl.mechanism={SCRAM_MECHANISM}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BENCH_USER}" password="{self.password}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.ca}\n")
        self.java_config.chmod(0o600)

    def bench_args(self) -> list[str]:
        return ["--security", "SASL_SSL", "--ssl-ca", str(self.ca), "--sasl-username", BENCH_USER,
                "--sasl-password-file", str(self.password_file)]


def run_once(order: int, system: str, cfg: dict, paths: dict, log_dir: Path,
             security: str = "PLAINTEXT") -> dict:
    label = f"{system}-{order}" if security == "PLAINTEXT" else f"{system}-{security.lower()}-{order}"
    say(f"run {order}: {system}, {security}")
    settle(cfg["settle_s"])
    os.environ["SLUICE_BIN"] = str(paths["sluice_bin"] if system == "sluice" else paths["kafka_shim"])
    if system in KAFKAS:
        # The shim's broker classpath; ProducerPerformance keeps the newest clients (java_lib).
        os.environ["SLUICE_JAVA_LIB"] = str(paths["broker_lib"][system])
    run: dict = {"order": order, "system": system, "security": security, "label": label,
                 "load_before": list(os.getloadavg()), "errors": []}
    reported_before = _reported_kib()
    secured = Secured(log_dir / f"{label}-pki") if security == "SASL_SSL" else None
    bench_security = secured.bench_args() if secured else []
    t0 = time.monotonic()
    if secured:
        # Kafka's brokers replicate over the SASL_SSL listener too, as sluice's do with only it
        # (the shim otherwise adds an internal PLAINTEXT listener for them).
        own = {"inter.broker.listener.name": "SASL_SSL"} if system in KAFKAS else {}
        nodes = sluice_node.start_cluster(3, settings={**secured.settings, **own}, ready_timeout=120,
                                          listeners={"SASL_SSL": "SASL_SSL"},
                                          client_security=secured.client_security, env=secured.env)
    else:
        nodes = sluice_node.start_cluster(3, ready_timeout=120)
    try:
        run["startup_s"] = time.monotonic() - t0
        pids = [(n.node_id, n.proc.pid) for n in nodes]
        bootstrap = ",".join(n.bootstrap for n in nodes)
        bench_json = log_dir / f"{label}-sluice-bench.json"
        cmd = [str(paths["bench_bin"]), "--bootstrap", bootstrap,
               "--broker-pids", ",".join(f"{i}:{p}" for i, p in pids),
               "--label", label, "--json", str(bench_json),
               "--records-2k", str(cfg["records_2k"]), "--records-100b", str(cfg["records_100b"]),
               "--records-txn", str(cfg["records_txn"]), "--txn-ms", str(TRANSACTION_MS),
               "--rate", str(cfg["rate"]), "--duration-s", str(cfg["duration_s"]),
               "--partitions", str(cfg["partitions"]), "--consumers", str(cfg["consumers"]),
               "--create-topics", "perf-max,perf-txn,perf-rate", *bench_security]
        log = log_dir / f"{label}-sluice-bench.log"
        say(f"  sluice-bench (log {log})")
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1800)
        if bench_json.exists():
            run["sluice_bench"] = json.loads(bench_json.read_text())
        if p.returncode != 0:
            run["errors"].append(f"sluice-bench exited with {p.returncode} (log {log})")
        if cfg.get("linger0"):
            # The same seed load with the producer's linger.ms at 0: what the broker adds to
            # ack latency without librdkafka's 5 ms batching delay in every figure.
            l0_json = log_dir / f"{label}-sluice-bench-linger0.json"
            l0_cmd = [str(paths["bench_bin"]), "--bootstrap", bootstrap,
                      "--broker-pids", ",".join(f"{i}:{p}" for i, p in pids),
                      "--label", label, "--json", str(l0_json), "--phase", "latency", "--linger-ms", "0",
                      "--rate", str(cfg["rate"]), "--duration-s", str(cfg["duration_s"]),
                      "--partitions", str(cfg["partitions"]), "--consumers", str(cfg["consumers"]),
                      *bench_security]
            l0_log = log_dir / f"{label}-sluice-bench-linger0.log"
            say(f"  sluice-bench, linger.ms=0 (log {l0_log})")
            with open(l0_log, "w") as f:
                f.write(" ".join(l0_cmd) + "\n")
                f.flush()
                p = subprocess.run(l0_cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1800)
            if l0_json.exists():
                run["sluice_bench_linger0"] = json.loads(l0_json.read_text())
            if p.returncode != 0:
                run["errors"].append(f"sluice-bench --linger-ms 0 exited with {p.returncode} (log {l0_log})")
        run["producer_perf"] = {}
        # "txn" is "max" again in transactions, right after it, on a fresh topic of its own.
        pp_phases = [("max", "perf-max", cfg["pp_max_records"], -1, None),
                     ("txn", "perf-txn", cfg["pp_max_records"], -1, f"bench-pp-{label}"),
                     ("rate", "perf-rate", cfg["rate"] * cfg["duration_s"], cfg["rate"], None)]
        for name, topic, records, rate, transactional_id in pp_phases:
            pp_log = log_dir / f"{label}-producer-perf-{name}.log"
            say(f"  ProducerPerformance {name} (log {pp_log})")
            try:
                run["producer_perf"][name] = producer_perf(paths["java_lib"], bootstrap, topic, records,
                                                           rate, pids, pp_log,
                                                           secured.java_config if secured else None,
                                                           transactional_id)
            except Exception as e:  # noqa: BLE001 - recorded, the other figures still count
                run["errors"].append(f"ProducerPerformance {name}: {e}")
        run["running_after"] = all(n.is_running() for n in nodes)
    finally:
        run["load_after"] = list(os.getloadavg())
        reported_after = _reported_kib()
        if reported_before is not None and reported_after is not None:
            # Memory the VM gave its host during the run: the next use of it is a host fault.
            run["reported_mib"] = round((reported_after - reported_before) / 1024)
        for n in nodes:
            n.kill()
            if os.environ.get("SLUICE_BENCH_KEEP"):
                say(f"  kept {n.work_dir} (SLUICE_BENCH_KEEP)")
            else:
                shutil.rmtree(n.work_dir, ignore_errors=True)
    for e in run["errors"]:
        say(f"  error: {e}")
    return run


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- figures and the table


def _get(d, *keys):
    for k in keys:
        if d is None:
            return None
        d = d[k] if isinstance(d, list) else d.get(k)
    return d


def _throughput(run: dict, size: int, transactional: bool = False) -> dict | None:
    for t in _get(run, "sluice_bench", "throughput") or []:
        if t.get("record_bytes") == size and bool(t.get("transactional")) == transactional:
            return t
    return None


def _group(run: dict, i: int) -> dict | None:
    groups = _get(run, "sluice_bench", "latency", "end_to_end") or []
    return groups[i] if i < len(groups) else None


def _slowest(run: dict, key: str, q: str) -> float | None:
    """The slowest consumer group's percentile `q` in run[key]'s latency phase."""
    vals = [_num(g.get(q)) for g in _get(run, key, "latency", "end_to_end") or []]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def _transaction_cost(plain: float | None, transactional: float | None) -> float | None:
    """The share of a client's non-transactional throughput that transactions lose, in
    percent: 1 - txn/plain (negative when the transactional run happened to be faster)."""
    if plain is None or transactional is None or not plain:
        return None
    return (1 - transactional / plain) * 100


def _peak_rss(run: dict, combine) -> float | None:
    """Over every phase of the run: `combine` (max or sum) of the nodes' peaks, largest phase."""
    phases = list(_get(run, "sluice_bench", "throughput") or [])
    phases.append(_get(run, "sluice_bench", "latency"))
    phases += list((run.get("producer_perf") or {}).values())
    values = [combine(n["peak_rss_mb"] for n in ph["nodes"]) for ph in phases if ph and ph.get("nodes")]
    return max(values) if values else None


def figures(cfg: dict) -> list[tuple[str, str, object]]:
    """(figure, better: higher|lower|info, extractor(run) -> number or None), table order."""
    rate = cfg.get("rate", "?")
    groups = cfg.get("consumer_groups", 2)
    rows: list[tuple[str, str, object]] = [
        ("sluice-bench (rdkafka), max throughput, acks=all", "", None),
        ("2 KB: MB/s", "higher", lambda r: _get(_throughput(r, 2048), "mb_per_s")),
        ("2 KB: msgs/s", "higher", lambda r: _get(_throughput(r, 2048), "msgs_per_s")),
        ("2 KB: broker CPU-s per GB", "lower", lambda r: _get(_throughput(r, 2048), "broker_cpu_s_per_gb")),
        ("100 B: msgs/s", "higher", lambda r: _get(_throughput(r, 100), "msgs_per_s")),
        ("100 B: MB/s", "higher", lambda r: _get(_throughput(r, 100), "mb_per_s")),
        ("100 B: broker CPU-s per GB", "lower", lambda r: _get(_throughput(r, 100), "broker_cpu_s_per_gb")),
        ("2 KB in 100 ms transactions: MB/s", "higher", lambda r: _get(_throughput(r, 2048, True), "mb_per_s")),
        ("2 KB in 100 ms transactions: broker CPU-s per GB", "lower",
         lambda r: _get(_throughput(r, 2048, True), "broker_cpu_s_per_gb")),
        ("2 KB transaction cost, % of MB/s (1 - txn / 2 KB, not idempotent)", "cost",
         lambda r: _transaction_cost(_num(_get(_throughput(r, 2048), "mb_per_s")),
                                     _num(_get(_throughput(r, 2048, True), "mb_per_s")))),
        (f"sluice-bench (rdkafka), {rate} msgs/s x 2 KB, {groups} groups committing", "", None),
        ("achieved send rate, msgs/s", "info", lambda r: _get(r, "sluice_bench", "latency", "achieved_send_rate")),
    ]
    for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9")):
        rows.append((f"producer ack {name}, ms", "lower",
                     lambda r, q=q: _get(r, "sluice_bench", "latency", "producer_ack", q)))
    for g in range(groups if isinstance(groups, int) else 2):
        for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9"), ("max_ms", "max")):
            rows.append((f"end-to-end group {g + 1} {name}, ms", "lower", lambda r, g=g, q=q: _get(_group(r, g), q)))
    rows += [
        ("broker CPU-s (all nodes)", "lower", lambda r: _get(r, "sluice_bench", "latency", "broker_cpu_s")),
        ("broker CPU-s per GB", "lower", lambda r: _get(r, "sluice_bench", "latency", "broker_cpu_s_per_gb")),
        (f"sluice-bench (rdkafka), {rate} msgs/s x 2 KB, {groups} groups, producer linger.ms=0", "", None),
    ]
    for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9")):
        rows.append((f"linger 0: producer ack {name}, ms", "lower",
                     lambda r, q=q: _get(r, "sluice_bench_linger0", "latency", "producer_ack", q)))
    for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9")):
        rows.append((f"linger 0: end-to-end slowest group {name}, ms", "lower",
                     lambda r, q=q: _slowest(r, "sluice_bench_linger0", q)))
    rows += [
        ("linger 0: broker CPU-s (all nodes)", "lower",
         lambda r: _get(r, "sluice_bench_linger0", "latency", "broker_cpu_s")),
        ("ProducerPerformance (Java client), 2 KB, acks=all", "", None),
        ("max: MB/s", "higher", lambda r: _get(r, "producer_perf", "max", "mb_per_s")),
        ("max: msgs/s", "higher", lambda r: _get(r, "producer_perf", "max", "msgs_per_s")),
        ("max: ack p99, ms", "lower", lambda r: _get(r, "producer_perf", "max", "p99_ms")),
        ("max: broker CPU-s per GB", "lower", lambda r: _get(r, "producer_perf", "max", "broker_cpu_s_per_gb")),
        (f"{rate} msgs/s: achieved msgs/s", "info", lambda r: _get(r, "producer_perf", "rate", "msgs_per_s")),
        (f"{rate} msgs/s: ack p50, ms", "lower", lambda r: _get(r, "producer_perf", "rate", "p50_ms")),
        (f"{rate} msgs/s: ack p99, ms", "lower", lambda r: _get(r, "producer_perf", "rate", "p99_ms")),
        (f"{rate} msgs/s: ack p99.9, ms", "lower", lambda r: _get(r, "producer_perf", "rate", "p99_9_ms")),
        (f"{rate} msgs/s: broker CPU-s (all nodes)", "lower", lambda r: _get(r, "producer_perf", "rate", "broker_cpu_s")),
        (f"{rate} msgs/s: broker CPU-s per GB", "lower",
         lambda r: _get(r, "producer_perf", "rate", "broker_cpu_s_per_gb")),
        (f"ProducerPerformance (Java client), 2 KB, acks=all, max: idempotent and in "
         f"{TRANSACTION_MS} ms transactions", "", None),
        ("idempotent: MB/s", "higher", lambda r: _get(r, "producer_perf", "max", "mb_per_s")),
        ("idempotent: ack p99, ms", "lower", lambda r: _get(r, "producer_perf", "max", "p99_ms")),
        (f"{TRANSACTION_MS} ms transactions: MB/s", "higher", lambda r: _get(r, "producer_perf", "txn", "mb_per_s")),
        (f"{TRANSACTION_MS} ms transactions: ack p99, ms", "lower",
         lambda r: _get(r, "producer_perf", "txn", "p99_ms")),
        (f"{TRANSACTION_MS} ms transactions: broker CPU-s per GB", "lower",
         lambda r: _get(r, "producer_perf", "txn", "broker_cpu_s_per_gb")),
        ("transaction cost, % of MB/s (1 - txn/idempotent)", "cost",
         lambda r: _transaction_cost(_num(_get(r, "producer_perf", "max", "mb_per_s")),
                                     _num(_get(r, "producer_perf", "txn", "mb_per_s")))),
        ("memory", "", None),
        ("peak RSS, largest node, MB", "lower", lambda r: _peak_rss(r, max)),
        ("peak RSS, all nodes summed, MB", "lower", lambda r: _peak_rss(r, sum)),
    ]
    return rows


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and v == v else None  # NaN -> None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def ratio(better: str, sluice: float | None, kafka: float | None) -> float | None:
    """> 1 means Sluice is better: Sluice/Kafka for throughput, Kafka/Sluice for costs, and
    for a transaction cost in percent the share of throughput Sluice keeps over the share
    Kafka keeps, (100 - Sluice's) / (100 - Kafka's): defined whatever the costs' signs."""
    if sluice is None or kafka is None:
        return None
    if better == "higher":
        return sluice / kafka if kafka else None
    if better == "lower":
        return kafka / sluice if sluice else None
    if better == "cost":
        return (100 - sluice) / (100 - kafka) if kafka != 100 else None
    return None


def _cell(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table_rows(result: dict) -> list[dict]:
    """Each figure per run, the means per system and the ratio, in table order."""
    runs = result["runs"]
    out = []
    for name, better, get in figures(result.get("config", {})):
        if get is None:
            out.append({"figure": name, "section": True})
            continue
        row = {"figure": name, "better": better}
        for s in SYSTEMS:
            row[s] = [_num(get(r)) for r in runs if r["system"] == s]
            row[f"{s}_mean"] = _mean(row[s])
            row[f"{s}_spread"] = spread(row[s])
        # Sluice against each Kafka: "ratio" against the newest, "ratio_<kafka>" against each.
        for k in KAFKAS:
            row[f"ratio_{k}"] = ratio(better, row["sluice_mean"], row[f"{k}_mean"])
        row["ratio"] = row["ratio_kafka"]
        out.append(row)
    return out


def systems_run(result: dict) -> list[str]:
    """The systems with at least one run, in SYSTEMS order."""
    present = {r["system"] for r in result["runs"]}
    return [s for s in SYSTEMS if s in present]


def spread(values: list[float | None]) -> float | None:
    """How far a system's runs of one figure lie apart: (max - min) / mean, in percent; None
    with fewer than two runs that measured it."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    mean = sum(present) / len(present)
    return (max(present) - min(present)) / abs(mean) * 100 if mean else None


def _spread_cell(row: dict, systems: list[str]) -> str:
    def one(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}%"
    return " / ".join(one(row[f"{s}_spread"]) for s in systems)


def _ratio_cell(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def format_table(result: dict) -> str:
    runs = result["runs"]
    systems = systems_run(result)
    kafkas = [s for s in systems if s in KAFKAS]
    heads = [f"{NAMES[s]} (run {r['order']})" for s in systems for r in runs if r["system"] == s]
    ratio_heads = ["ratio (>1: Sluice better)" if k == "kafka" else f"ratio to {NAMES[k]}" for k in kafkas]
    tail = [f"spread, {' / '.join(NAMES[s] for s in systems)}", *ratio_heads]
    lines = ["| figure | " + " | ".join(heads + tail) + " |",
             "|---" * (len(heads) + len(tail) + 1) + "|"]
    for row in table_rows(result):
        if row.get("section"):
            lines.append(f"| **{row['figure']}** |" + " |" * (len(heads) + len(tail)))
            continue
        cells = [_cell(v) for s in systems for v in row[s]]
        cells += [_spread_cell(row, systems), *(_ratio_cell(row[f"ratio_{k}"]) for k in kafkas)]
        lines.append(f"| {row['figure']} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("spread: (max - min) / mean of each system's runs of the figure, in percent (- with one run)")
    lines.append("ratio: Sluice/Kafka for throughput, Kafka/Sluice for latency, CPU and RSS, and for a "
                 "transaction cost the throughput share Sluice keeps over the share Kafka keeps, "
                 "(100 - Sluice's %) / (100 - Kafka's %) (means of each system's runs)")
    if "kafka-4.1" in kafkas:
        lines.append("Kafka is the newest release; Kafka 4.1 is its 4.1 broker, driven by the same newest "
                     "clients (ProducerPerformance from the newest kafka-tools)")
    lines += _footer(result)
    return "\n".join(lines)


def _footer(result: dict) -> list[str]:
    """Versions, machine and each run's load average and errors."""
    runs = result["runs"]
    lines = []
    v, m = result.get("versions", {}), result.get("machine", {})
    if v:
        java = " / ".join(v.get("java") or []) if isinstance(v.get("java"), list) else v.get("java")
        older = f" and {v['kafka_4_1']}" if v.get("kafka_4_1") else ""
        lines.append(f"versions: {v.get('sluice')} (commit {v.get('sluice_commit')}); Apache Kafka "
                     f"{v.get('kafka')}{older}; rdkafka {v.get('rdkafka_crate')} (librdkafka {v.get('librdkafka')}); "
                     f"java: {java}")
    if m:
        lines.append(f"machine: {m.get('nproc')} CPUs ({m.get('cpu_model')}), {m.get('mem_total_gib')} GiB, "
                     f"Linux {m.get('kernel')}")
        host = m.get("host_memory") or {}
        if host.get("warmed_gib") is not None:
            lines.append(f"host memory: free page reporting paused (order {host.get('page_reporting_order_before')} "
                         f"-> {host.get('page_reporting_order')}) and {host['warmed_gib']} GiB touched once before run 1, "
                         f"in {host.get('warm_s')} s, so no run paid host faults for new page cache")
        elif host.get("warmed"):
            lines.append(f"host memory: {host['warmed']}")
    for r in runs:
        lb, la = r.get("load_before"), r.get("load_after")
        load = ""
        if lb and la:
            load = f"load average before {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}, after {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}"
        errs = "; errors: " + "; ".join(r["errors"]) if r.get("errors") else ""
        security = f" {r['security']}" if r.get("security") else ""
        reported = f", {r['reported_mib']} MiB reported to the host" if r.get("reported_mib") else ""
        lines.append(f"run {r['order']} {r['system']}{security}: {load}{reported}{errs}")
    return lines


def security_figures(cfg: dict) -> list[tuple[str, str, object]]:
    """The figures --security compares: throughput, CPU per GB and p99, in table order."""
    rate = cfg.get("rate", "?")
    return [
        ("sluice-bench (rdkafka), max throughput, acks=all", "", None),
        ("2 KB: MB/s", "higher", lambda r: _get(_throughput(r, 2048), "mb_per_s")),
        ("2 KB: broker CPU-s per GB", "lower", lambda r: _get(_throughput(r, 2048), "broker_cpu_s_per_gb")),
        ("100 B: msgs/s", "higher", lambda r: _get(_throughput(r, 100), "msgs_per_s")),
        ("100 B: broker CPU-s per GB", "lower", lambda r: _get(_throughput(r, 100), "broker_cpu_s_per_gb")),
        (f"sluice-bench (rdkafka), {rate} msgs/s x 2 KB, groups committing", "", None),
        ("achieved send rate, msgs/s", "info", lambda r: _get(r, "sluice_bench", "latency", "achieved_send_rate")),
        ("producer ack p99, ms", "lower", lambda r: _get(r, "sluice_bench", "latency", "producer_ack", "p99_ms")),
        ("end-to-end slowest group p99, ms", "lower", lambda r: _slowest(r, "sluice_bench", "p99_ms")),
        ("broker CPU-s per GB", "lower", lambda r: _get(r, "sluice_bench", "latency", "broker_cpu_s_per_gb")),
        ("ProducerPerformance (Java client), 2 KB, acks=all", "", None),
        ("max: MB/s", "higher", lambda r: _get(r, "producer_perf", "max", "mb_per_s")),
        ("max: broker CPU-s per GB", "lower", lambda r: _get(r, "producer_perf", "max", "broker_cpu_s_per_gb")),
        ("max: ack p99, ms", "lower", lambda r: _get(r, "producer_perf", "max", "p99_ms")),
        (f"max in {TRANSACTION_MS} ms transactions: MB/s", "higher",
         lambda r: _get(r, "producer_perf", "txn", "mb_per_s")),
        (f"{rate} msgs/s: ack p99, ms", "lower", lambda r: _get(r, "producer_perf", "rate", "p99_ms")),
        (f"{rate} msgs/s: broker CPU-s per GB", "lower",
         lambda r: _get(r, "producer_perf", "rate", "broker_cpu_s_per_gb")),
    ]


def _cost(better: str, plain: float | None, secured: float | None) -> str:
    """What SASL_SSL costs against plaintext, as a signed percentage of the plaintext figure
    (negative throughput and positive CPU or latency are losses)."""
    if plain is None or secured is None or not plain or better == "info":
        return "-"
    return f"{(secured - plain) / plain * 100:+.0f}%"


def format_security_table(result: dict) -> str:
    """Each system plaintext and SASL_SSL (means of its runs), and what TLS and SASL cost it."""
    runs = result["runs"]
    systems = systems_run(result)
    heads = []
    for system in systems:
        name = NAMES[system]
        heads += [f"{name} PLAINTEXT", f"{name} SASL_SSL", f"{name} change"]
    lines = ["| figure | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for name, better, get in security_figures(result.get("config", {})):
        if get is None:
            lines.append(f"| **{name}** |" + " |" * len(heads))
            continue
        cells = []
        for system in systems:
            means = [_mean([_num(get(r)) for r in runs if r["system"] == system
                            and r.get("security", "PLAINTEXT") == sec]) for sec in SECURITY]
            cells += [_cell(means[0]), _cell(means[1]), _cost(better, means[0], means[1])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("change: SASL_SSL against PLAINTEXT, per system (TLS and SCRAM-SHA-512 on the only listener, "
                 "replication included)")
    lines += _footer(result)
    return "\n".join(lines)


# ---------------------------------------------------------------- the plot


def latency_series(run: dict) -> dict[str, float | None]:
    """Latency percentiles (ms) of one run: producer acks and the slowest group's end-to-end
    (sluice-bench), and ProducerPerformance's acks at the seed rate."""
    groups = _get(run, "sluice_bench", "latency", "end_to_end") or []
    out = {}
    for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9")):
        out[f"producer ack {name}"] = _num(_get(run, "sluice_bench", "latency", "producer_ack", q))
    for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9")):
        vals = [_num(g.get(q)) for g in groups]
        vals = [v for v in vals if v is not None]
        out[f"end-to-end {name}"] = max(vals) if vals else None
    for q, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9")):
        out[f"ProducerPerformance ack {name}"] = _num(_get(run, "producer_perf", "rate", q))
    return out


def _label(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def draw_png(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Sluice's runs first, then Kafka's, each in run order.
    runs = sorted(result["runs"], key=lambda r: (SYSTEMS.index(r["system"]), r["order"]))
    series = [(r, latency_series(r)) for r in runs]
    cats = list(series[0][1].keys()) if series else []
    colours = {"sluice": ["#1f5fa8", "#6fa3db"], "kafka": ["#c8501e", "#f0a070"],
               "kafka-4.1": ["#6b7f1a", "#b5c96a"]}
    seen = {s: 0 for s in SYSTEMS}
    fig, ax = plt.subplots(figsize=(12, 6), dpi=100)
    width = 0.8 / max(len(series), 1)
    highest = 1.0
    for i, (run, values) in enumerate(series):
        shade = colours[run["system"]][min(seen[run["system"]], 1)]
        seen[run["system"]] += 1
        xs = [c + (i - (len(series) - 1) / 2) * width for c in range(len(cats))]
        ys = [values[c] if values[c] is not None else 0 for c in cats]
        highest = max([highest, *ys])
        name = NAMES[run["system"]]
        security = f" {run['security']}" if run.get("security", "PLAINTEXT") != "PLAINTEXT" else ""
        ax.bar(xs, ys, width=width, color=shade, label=f"{name}{security} (run {run['order']})")
        for x, y in zip(xs, ys):
            if y > 0:
                ax.text(x, y * 1.1, _label(y), ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_yscale("log")
    ax.set_ylim(top=highest * 40)  # room for the value labels and the legend
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels(cats, rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("latency, ms (log scale)")
    cfg = result.get("config", {})
    ax.set_title(f"Latency percentiles at {cfg.get('rate', '?')} msgs/s x 2 KB, acks=all, 3 nodes, RF 3, "
                 f"{cfg.get('partitions', '?')} partitions\n"
                 f"sluice-bench (rdkafka; end-to-end: slowest of {cfg.get('consumer_groups', '?')} groups "
                 f"committing) and Kafka's ProducerPerformance (Java client)", fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=9, loc="upper center", ncol=4)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


# ---------------------------------------------------------------- entry points


def utc_stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def write_outputs(result: dict, out: Path, png: Path | None) -> None:
    png = png or out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    secured = result.get("config", {}).get("security", "PLAINTEXT") != "PLAINTEXT"
    result["table"] = format_security_table(result) if secured else format_table(result)
    out.write_text(json.dumps(result, indent=2) + "\n")
    draw_png(result, png)
    print(result["table"])
    print(f"\nwrote {out} and {png}")


def cmd_run(a) -> int:
    cfg = dict(QUICK if a.quick else FULL)
    for key in ("records_2k", "records_100b", "records_txn", "rate", "duration_s", "pp_max_records", "settle_s"):
        if getattr(a, key) is not None:
            cfg[key] = getattr(a, key)
    if a.no_linger0:
        cfg["linger0"] = False
    paths = {"sluice_bin": Path(a.sluice_bin).resolve(), "bench_bin": Path(a.bench_bin).resolve(),
             "kafka_shim": ROOT / "scripts/kafka-as-sluice.py", "java_lib": Path(a.java_lib).resolve()}
    paths["broker_lib"] = {"kafka": paths["java_lib"], "kafka-4.1": Path(a.kafka_41_lib).resolve()}
    os.environ["SLUICE_JAVA_LIB"] = str(paths["java_lib"])
    os.environ["KAFKA_HEAP_OPTS"] = KAFKA_HEAP_OPTS
    os.environ["KAFKA_JVM_PERFORMANCE_OPTS"] = KAFKA_JVM_PERFORMANCE_OPTS
    out = Path(a.out) if a.out else ROOT / "bench-results" / f"against-kafka-{utc_stamp()}.json"
    log_dir = out.with_suffix("")
    log_dir = log_dir.parent / (log_dir.name + "-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    systems = a.systems.split(",")
    if any(s not in SYSTEMS for s in systems) or "sluice" not in systems:
        raise SystemExit(f"--systems takes sluice and some of {KAFKAS}, got {systems}")
    order = (a.order or (",".join(systems) if a.security != "PLAINTEXT" else None)
             or ",".join(alternating(a.runs, systems))).split(",")
    if any(s not in SYSTEMS for s in order):
        raise SystemExit(f"--order takes {SYSTEMS}, got {order}")
    if "kafka-4.1" in order and kafka_version(paths["broker_lib"]["kafka-4.1"]) == "?":
        raise SystemExit(f"no Kafka 4.1 broker jar in {paths['broker_lib']['kafka-4.1']}: "
                         "run `bash scripts/java-lib.sh --kafka-4.1` (scripts/bench.sh does), "
                         "or leave it out with --systems sluice,kafka")
    # With --security, each system's turn is a plaintext run, then a secured one.
    plan = [(system, sec) for system in order
            for sec in (("PLAINTEXT", a.security) if a.security != "PLAINTEXT" else ("PLAINTEXT",))]
    result = {
        "tool": "bench_against_kafka", "schema": 1, "quick": a.quick, "started_utc": utc_stamp(),
        "machine": machine_info(),
        "versions": versions(paths["sluice_bin"], paths["java_lib"],
                             paths["broker_lib"]["kafka-4.1"] if "kafka-4.1" in order else None),
        "config": {**cfg, "nodes": 3, "replication_factor": 3, "acks": "all", "record_bytes_latency": RECORD_BYTES,
                   "transaction_ms": TRANSACTION_MS,
                   "consumer_groups": cfg["consumers"], "order": order, "security": a.security,
                   "kafka_heap_opts": KAFKA_HEAP_OPTS, "kafka_jvm_performance_opts": KAFKA_JVM_PERFORMANCE_OPTS},
        "runs": [],
    }
    host = HostMemory()
    try:
        if a.host_memory == "warm":
            result["machine"]["host_memory"] = host.warm()
        for i, (system, security) in enumerate(plan, start=1):
            try:
                run = run_once(i, system, cfg, paths, log_dir, security)
            except Exception as e:  # noqa: BLE001 - a cluster that did not start is a result too
                run = {"order": i, "system": system, "security": security, "label": f"{system}-{i}",
                       "errors": [f"{e}"[:2000]],
                       "load_before": list(os.getloadavg()), "load_after": list(os.getloadavg())}
                say(f"  error: {e}")
            result["runs"].append(run)
            librdkafka = _get(run, "sluice_bench", "librdkafka")
            if librdkafka:
                result["versions"]["librdkafka"] = librdkafka
    finally:
        host.restore()
    result["finished_utc"] = utc_stamp()
    write_outputs(result, out, Path(a.png) if a.png else None)
    return 0


def alternating(runs: int, systems: list[str] | None = None) -> list[str]:
    """`runs` runs of each system, the list forwards then backwards, A B B A A B ... (with
    three, A B C C B A), so that no system always runs first on a fresh or a warm machine."""
    systems = list(systems or ("sluice", "kafka"))
    order: list[str] = []
    for k in range(max(runs, 1)):
        order += systems if k % 2 == 0 else systems[::-1]
    return order


def load_report_inputs(files: list[Path]) -> dict:
    """One result from a bench_against_kafka result JSON or from sluice-bench --json files
    (the system is the start of each label)."""
    result: dict = {"tool": "bench_against_kafka", "schema": 1, "runs": []}
    for f in files:
        data = json.loads(f.read_text())
        if data.get("tool") == "bench_against_kafka":
            data.pop("table", None)
            result = {**data, "runs": result["runs"] + data["runs"]}
            continue
        if data.get("tool") != "sluice-bench":
            raise SystemExit(f"{f}: neither a sluice-bench nor a bench_against_kafka JSON")
        label = data.get("label", "")
        # The longest name first: a "kafka-4.1-..." label is Kafka 4.1's, not the newest Kafka's.
        system = next((s for s in sorted(SYSTEMS, key=len, reverse=True) if label.lower().startswith(s)), None)
        if system is None:
            raise SystemExit(f"{f}: label {label!r} starts with none of {SYSTEMS}")
        cfg = data.get("config", {})
        result.setdefault("config", {"rate": cfg.get("rate"), "partitions": cfg.get("partitions"),
                                     "consumer_groups": cfg.get("consumer_groups")})
        result["runs"].append({"order": len(result["runs"]) + 1, "system": system, "label": label,
                               "sluice_bench": data, "errors": []})
        result.setdefault("versions", {})["librdkafka"] = data.get("librdkafka")
    return result


def cmd_report(a) -> int:
    result = load_report_inputs([Path(f) for f in a.inputs])
    write_outputs(result, Path(a.out), Path(a.png) if a.png else None)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the A B B A comparison")
    r.add_argument("--quick", action="store_true", help="tiny counts, a few seconds per phase (smoke run)")
    r.add_argument("--out", help="result JSON (default bench-results/against-kafka-<UTC>.json)")
    r.add_argument("--png", help="latency plot (default: the JSON's path with .png)")
    r.add_argument("--sluice-bin", required=True)
    r.add_argument("--bench-bin", required=True)
    r.add_argument("--java-lib", default=str(ROOT / ".java-lib"),
                   help="the newest Kafka's broker and the clients of every run (scripts/java-lib.sh)")
    r.add_argument("--kafka-41-lib", "--kafka-4.1-lib", dest="kafka_41_lib",
                   default=str(ROOT / ".java-lib-kafka-4.1"),
                   help="Kafka 4.1's broker (scripts/java-lib.sh --kafka-4.1)")
    r.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"the systems compared (default {','.join(SYSTEMS)}; sluice,kafka leaves 4.1 out)")
    r.add_argument("--order", help="systems in run order (default: --runs of each, alternating; "
                                    "with --security each of --systems once)")
    r.add_argument("--runs", type=int, default=2,
                   help="runs of each system, forwards then backwards (default 2: "
                        "sluice,kafka,kafka-4.1,kafka-4.1,kafka,sluice)")
    r.add_argument("--security", default="PLAINTEXT", type=str.upper, choices=SECURITY,
                   help="SASL_SSL: each system plaintext, then TLS + SCRAM-SHA-512, the same workload")
    r.add_argument("--records-2k", type=int, help="2 KB records in sluice-bench's throughput phase")
    r.add_argument("--records-100b", type=int, help="100 B records in sluice-bench's throughput phase")
    r.add_argument("--records-txn", type=int, help="2 KB records in sluice-bench's 100 ms transactions phase")
    r.add_argument("--rate", type=int, help="msgs/s of the latency phases")
    r.add_argument("--duration-s", type=int, help="seconds of the latency phases")
    r.add_argument("--pp-max-records", type=int,
                   help="records of ProducerPerformance at max throughput, idempotent and again in "
                        f"{TRANSACTION_MS} ms transactions (--transactional-id)")
    r.add_argument("--settle-s", type=int, help="longest wait for the load average to drop before a run")
    r.add_argument("--no-linger0", action="store_true", help="skip the linger.ms=0 latency phase")
    r.add_argument("--host-memory", choices=("warm", "as-is"), default="warm",
                   help="warm (default): pause the VM's free page reporting and touch free memory once "
                        "before the first run, so no run pays host faults for new page cache (HostMemory); "
                        "as-is: leave the machine as it is")
    r.set_defaults(func=cmd_run)
    p = sub.add_parser("report", help="table and PNG from result or sluice-bench JSON files")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--out", required=True, help="combined result JSON")
    p.add_argument("--png", help="latency plot (default: the JSON's path with .png)")
    p.set_defaults(func=cmd_report)
    a = ap.parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
