#!/usr/bin/env python3
"""The compatibility matrix driver (issue 11 §3; the contract is compat/README.md).

Installs every client listed in compat/clients.json and compat/clients.*.json, starts a fresh
single node and then a fresh 3-node cluster of real `sluice` processes (with
integration-tests/python/sluice_node.py, the harness the client tests use) with a PLAINTEXT
listener and SASL_SSL, SSL (mutual TLS) and SASL_PLAINTEXT ones beside it (certificates and an
OAUTHBEARER token from compat/security.py), runs every client's adapter once per cluster with all
scenarios (the secured listeners' logins in a --security file), writes the scenario x client
tables to docs/compatibility.md, prints a summary, and exits non-zero on any unexpected result: a
`fail` not listed in compat/known-failures.txt, or a listed pair that now passes (the list only
shrinks).

Standard library only, so it runs before any virtualenv exists (compat/security.py, which needs
`cryptography`, runs with .venv's Python, made when missing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration-tests/python"))

from sluice_node import HOST, SluiceNode, connect, start_cluster  # noqa: E402

# The rows that reach the secured listeners (the --security file names each one's way in).
SECURITY_SCENARIOS = [
    "sasl_ssl_scram512", "sasl_ssl_plain", "sasl_plaintext_scram256", "ssl_mtls", "oauthbearer",
    "sasl_wrong_password",
]
SCENARIOS = [
    "metadata", "admin_topics", "produce_acks0", "produce_acks1", "produce_acksall",
    "compression_gzip", "compression_snappy", "compression_lz4", "compression_zstd",
    "idempotent_produce", "group_resume", "two_groups", "groups_describe_lag", "offsets_for_times",
    "delete_records", "empty_topic", "many_topics", "regex_subscribe",
    "transactions_commit_abort", "read_committed", "consume_transform_produce",
    "group_kip848", "group_migration", "share_group", "fetch_from_follower",
    *SECURITY_SCENARIOS,
    "tool_topics", "tool_configs", "tool_console", "tool_consumer_groups", "tool_delete_records",
    "tool_log_dirs", "tool_leader_election", "tool_reassign_partitions", "tool_metadata_quorum",
    "tool_perf", "tool_verifiable", "tool_client_compatibility", "tool_scram_users",
    "tool_transactions",
]
# Column order of the tables; clients.json files may add others, which go last.
CLIENT_ORDER = [
    "kcat", "rdkafka-rust", "confluent-kafka-python", "kafka-python", "java-client", "kafka-tools",
    "franz-go", "kafkajs", "confluent-kafka-javascript",
]
CLUSTERS = {"single": 1, "three": 3}
CLUSTER_TITLES = {"single": "Single node", "three": "3-node cluster"}
INSTALL_TIMEOUT_S = 1800
CELL_MAX_CHARS = 160
# Python adapters (compat/clients/harness.py) write where each scenario still running waits
# this long before their timeout, told through this environment variable, on a line starting
# with STILL_RUNNING; the driver prints those of a killed adapter last (CI keeps only the tail).
DUMP_AFTER_ENV = "SLUICE_COMPAT_DUMP_AFTER_S"
STILL_RUNNING = "[still running]"
DUMP_LEAD_S = 15

# The listeners of every compat node: the existing scenarios use PLAINTEXT (the first, which the
# readiness probe and `SluiceNode.bootstrap` use); the security rows use the others.
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
# SCRAM users, created by --add-scram on every node (a user is created once, whichever node
# creates it): the administrator, and the user the SASL rows log in as (PLAIN checks the same
# credentials). The wrong-password row logs in as USER with another password.
ADMIN = ("admin", "admin-secret")
USER = ("compat", "compat-secret")
WRONG_PASSWORD = "not-compat-secret"
ADD_SCRAM = [a for mechanism, (name, password) in [("SCRAM-SHA-512", ADMIN), ("SCRAM-SHA-512", USER),
                                                   ("SCRAM-SHA-256", USER)]
             for a in ("--add-scram", f"{mechanism}=[name={name},password={password}]")]
SECURITY_READY_TIMEOUT_S = 30
# fetch_from_follower (KIP-392): on a cluster, node i is in rack RACKS[i-1], partition leaders
# send a consumer to the replica in its client.rack, and every node serves /metrics, where the
# adapters see which node sent a topic's records (the --security file's fetch_from_follower entry).
RACKS = ["rack-a", "rack-b", "rack-c"]
RACK_SELECTOR = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}


@dataclass
class Client:
    id: str
    version: str
    install: list[str]
    run: list[str]
    timeout_s: float
    install_error: str | None = None


@dataclass
class Outcome:
    result: str  # pass | fail | n/a
    detail: str = ""

    def cell(self) -> str:
        return self.result if not self.detail else f"{self.result}: {self.detail}"


@dataclass
class KnownFailure:
    client: str
    scenario: str
    cluster: str
    reason: str
    line: int

    def matches(self, client: str, scenario: str, cluster: str) -> bool:
        return (self.client, self.scenario) == (client, scenario) and self.cluster in ("*", cluster)


@dataclass
class Matrix:
    """(client, scenario, cluster) -> outcome."""
    outcomes: dict[tuple[str, str, str], Outcome] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # One line per adapter killed at its timeout: what never reported and where it waited.
    killed: list[str] = field(default_factory=list)

    def put(self, client: str, scenario: str, cluster: str, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes[(client, scenario, cluster)] = outcome

    def counts(self, cluster: str) -> dict[str, int]:
        return {r: sum(1 for (_, _, cl), o in self.outcomes.items() if cl == cluster and o.result == r)
                for r in ("pass", "fail", "n/a")}


def load_clients() -> list[Client]:
    """Every client of compat/clients.json and compat/clients.*.json, in the table's order."""
    files = [ROOT / "compat/clients.json"] + sorted((ROOT / "compat").glob("clients.*.json"))
    clients: dict[str, Client] = {}
    for f in files:
        for entry in json.loads(f.read_text()):
            c = Client(entry["id"], entry["version"], entry["install"], entry["run"], float(entry["timeout_s"]))
            if c.id in clients:
                raise SystemExit(f"{f}: client {c.id} is already listed in another clients file; keep one entry")
            clients[c.id] = c
    rank = {c: i for i, c in enumerate(CLIENT_ORDER)}
    return sorted(clients.values(), key=lambda c: (rank.get(c.id, len(rank)), c.id))


def load_known_failures(path: Path) -> list[KnownFailure]:
    """Lines `client scenario cluster  # reason`; blank lines and whole-line comments are skipped."""
    known = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        body, _, reason = raw.partition("#")
        words = body.split()
        if not words:
            continue
        if len(words) != 3 or words[2] not in ("single", "three", "*") or words[1] not in SCENARIOS:
            raise SystemExit(f"{path}:{n}: expected `client scenario single|three|*  # reason`, got {raw!r}")
        known.append(KnownFailure(words[0], words[1], words[2], reason.strip(), n))
    return known


def install(client: Client, log_dir: Path) -> None:
    """Runs the client's install command from the repository root; a failure is recorded, and every
    scenario of that client then fails with it."""
    log = log_dir / f"install-{client.id}.log"
    t0 = time.monotonic()
    try:
        done = subprocess.run(client.install, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=INSTALL_TIMEOUT_S)
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            client.install_error = f"install: exit {done.returncode}" + (f": {tail}" if tail else "")
    except (OSError, subprocess.TimeoutExpired) as e:
        client.install_error = f"install: {e}"
    state = client.install_error or "ok"
    print(f"install {client.id}: {state} ({time.monotonic() - t0:.0f}s, log {log})", flush=True)


def run_adapter(client: Client, cluster: str, bootstrap: str, brokers: int, security: Path, matrix: Matrix,
                log_dir: Path) -> None:
    """One adapter process for all scenarios on one cluster; scenarios it does not report in time
    fail with `no result`."""
    if client.install_error:
        for s in SCENARIOS:
            matrix.put(client.id, s, cluster, Outcome("fail", client.install_error))
        return
    prefix = f"{client.id}-{secrets.token_hex(2)}-"
    argv = client.run + ["--bootstrap", bootstrap, "--brokers", str(brokers), "--prefix", prefix,
                         "--security", str(security), "--scenarios", ",".join(SCENARIOS)]
    stderr_path = log_dir / f"{cluster}-{client.id}.stderr"
    reported: set[str] = set()
    t0 = time.monotonic()
    with open(stderr_path, "w") as err:
        try:
            # A session of its own, so a timeout kills what the adapter started too (kcat
            # processes, tool JVMs), which would otherwise hold its stdout open.
            env = {**os.environ, DUMP_AFTER_ENV: f"{max(1.0, client.timeout_s - DUMP_LEAD_S):.0f}"}
            proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, text=True, start_new_session=True, env=env)
        except OSError as e:
            for s in SCENARIOS:
                matrix.put(client.id, s, cluster, Outcome("fail", f"cannot start the adapter {argv[0]}: {e}"))
            return
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(client.timeout_s, kill)
        timer.start()
        try:
            for line in proc.stdout:
                outcome = parse_result(line)
                if outcome is None:
                    err.write(f"[driver] not a result line on stdout: {line}")
                    continue
                scenario, o = outcome
                if scenario in SCENARIOS:
                    reported.add(scenario)
                    matrix.put(client.id, scenario, cluster, o)
            proc.wait()
        finally:
            timer.cancel()
    elapsed = time.monotonic() - t0
    why = f"no result (adapter killed after its {client.timeout_s:.0f}s timeout)" if killed.is_set() else \
        f"no result (adapter exited {proc.returncode})"
    for s in SCENARIOS:
        if s not in reported:
            matrix.put(client.id, s, cluster, Outcome("fail", why))
    print(f"  {cluster} {client.id}: {len(reported)}/{len(SCENARIOS)} reported, exit {proc.returncode}, "
          f"{elapsed:.0f}s (stderr {stderr_path})", flush=True)
    if killed.is_set():
        waits = [line[len(STILL_RUNNING):].strip()
                 for line in stderr_path.read_text(errors="replace").splitlines() if line.startswith(STILL_RUNNING)]
        matrix.killed.append(f"{cluster} {client.id} killed at its timeout; no result from "
                             f"{', '.join(s for s in SCENARIOS if s not in reported)}; "
                             + ("; ".join(waits) if waits else "it wrote no stacks before the kill"))


def parse_result(line: str) -> tuple[str, Outcome] | None:
    try:
        obj = json.loads(line)
        result = obj["result"]
        if result not in ("pass", "fail", "n/a"):
            return None
        return obj["scenario"], Outcome(result, " ".join(str(obj.get("detail") or "").split()))
    except (ValueError, KeyError, TypeError):
        return None


def make_security_material(log_dir: Path) -> dict:
    """Certificates, stores, the JWKS and a signed token (compat/security.py, which needs .venv's
    `cryptography`; the venv is made when missing)."""
    python = ROOT / ".venv/bin/python"
    probe = subprocess.run([str(python), "-c", "import cryptography"], capture_output=True) if python.exists() else None
    if probe is None or probe.returncode != 0:
        subprocess.run(["bash", "scripts/python-venv.sh"], cwd=ROOT, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=INSTALL_TIMEOUT_S)
    done = subprocess.run([str(python), "compat/security.py", str(log_dir / "security")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"compat/security.py exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def broker_security(material: dict) -> dict[str, str]:
    """The brokers' settings for the secured listeners: TLS with the test certificate on SSL and
    SASL_SSL (client certificates required on SSL), SCRAM-SHA-512/256, PLAIN and OAUTHBEARER on
    SASL_SSL, SCRAM-SHA-256 on SASL_PLAINTEXT; replication stays on PLAINTEXT."""
    return {
        "ssl.keystore.location": material["server_keystore"],
        "ssl.truststore.location": material["ca"],
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.oauthbearer.jwks.endpoint.url": material["jwks"],
        "sasl.oauthbearer.expected.audience": material["audience"],
        "sasl.oauthbearer.expected.issuer": material["issuer"],
        "inter.broker.listener.name": "PLAINTEXT",
    }


def rack_entry(nodes: list[SluiceNode]) -> dict:
    """fetch_from_follower's entry of the --security file: each node's rack and /metrics URL by
    node id (none on a single node, which has no followers)."""
    if len(nodes) < 2:
        return {"error": "one node has no followers"}
    return {"racks": {str(n.node_id): RACKS[n.node_id - 1] for n in nodes},
            "metrics": {str(n.node_id): f"{n.metrics_url}/metrics" for n in nodes}}


def security_file(material: dict | str, nodes: list[SluiceNode], path: Path) -> Path:
    """The adapters' --security file (its format is in compat/README.md): per security row, the
    bootstrap list of its listener and everything a client needs to log in there; `material` is
    the reason when there is none (the file's `error`, which the security rows fail with). Beside
    them, fetch_from_follower's racks and metrics URLs."""
    if not isinstance(material, dict):
        path.write_text(json.dumps({"error": material, "scenarios": {"fetch_from_follower": rack_entry(nodes)}},
                                   indent=2) + "\n")
        return path

    def bootstrap(listener: str) -> str:
        return ",".join(n.bootstrap_for(listener) for n in nodes)

    tls = {"ca": material["ca"], "truststore": material["truststore_p12"],
           "truststore_password": material["store_password"]}

    def sasl(listener: str, mechanism: str, user: tuple[str, str]) -> dict:
        return {"bootstrap": bootstrap(listener), "security_protocol": listener, "sasl_mechanism": mechanism,
                "username": user[0], "password": user[1], **(tls if listener == "SASL_SSL" else {})}

    scenarios = {
        "sasl_ssl_scram512": sasl("SASL_SSL", "SCRAM-SHA-512", USER),
        "sasl_ssl_plain": sasl("SASL_SSL", "PLAIN", USER),
        "sasl_plaintext_scram256": sasl("SASL_PLAINTEXT", "SCRAM-SHA-256", USER),
        "ssl_mtls": {"bootstrap": bootstrap("SSL"), "security_protocol": "SSL", **tls,
                     "client_cert": material["client_cert"], "client_key": material["client_key"],
                     "keystore": material["client_keystore_p12"], "keystore_password": material["store_password"]},
        "oauthbearer": {"bootstrap": bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
                        "sasl_mechanism": "OAUTHBEARER", **tls, "token": material["token"],
                        "token_file": material["token_file"], "token_principal": material["token_sub"],
                        "token_expires_ms": material["token_expires_s"] * 1000},
        "sasl_wrong_password": sasl("SASL_SSL", "SCRAM-SHA-512", (USER[0], WRONG_PASSWORD)),
        "tool_scram_users": sasl("SASL_SSL", "SCRAM-SHA-512", ADMIN),
        "fetch_from_follower": rack_entry(nodes),
    }
    path.write_text(json.dumps({"scenarios": scenarios}, indent=2) + "\n")
    return path


def wait_for_logins(nodes: list[SluiceNode], material: dict) -> None:
    """Waits until every node lets USER in on SASL_SSL (SCRAM-SHA-512) and SASL_PLAINTEXT
    (SCRAM-SHA-256): the --add-scram users are created through the quorum after the brokers
    answer, and reach each broker when it applies that record."""
    checks = [("SASL_SSL", {"security.protocol": "SASL_SSL", "ssl.ca.location": material["ca"],
                            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER[0], "sasl.password": USER[1]}),
              ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                  "sasl.username": USER[0], "sasl.password": USER[1]})]
    deadline = time.monotonic() + SECURITY_READY_TIMEOUT_S
    for node in nodes:
        for listener, security in checks:
            while True:
                try:
                    connect(HOST, node.ports[listener], security).close()
                    break
                except Exception as e:  # noqa: BLE001 - retried until the deadline
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"node {node.node_id} did not let {USER[0]} in on {listener} in "
                                           f"{SECURITY_READY_TIMEOUT_S}s: {e}") from e
                    time.sleep(0.2)


def start_nodes(size: int, material: dict | None) -> list[SluiceNode]:
    """A fresh single node or cluster; with security material, with the secured listeners beside
    PLAINTEXT and the --add-scram users. A cluster's nodes are in racks of their own, with the
    rack-aware replica selector and /metrics (fetch_from_follower)."""
    kwargs = {} if material is None else {"settings": broker_security(material), "listeners": LISTENERS,
                                          "extra_args": ADD_SCRAM}
    if size == 1:
        return [SluiceNode(**kwargs).start()]
    kwargs["settings"] = {**kwargs.get("settings", {}), **RACK_SELECTOR}
    return start_cluster(size, metrics=True, per_node=lambda i: {"broker.rack": RACKS[i - 1]}, **kwargs)


def run_cluster(cluster: str, clients: list[Client], matrix: Matrix, log_dir: Path, parallel: int,
                material: dict | str) -> None:
    """`material` is the security material, or why there is none (the nodes then have the
    PLAINTEXT listener only, and the --security file holds the reason the security rows fail
    with)."""
    size = CLUSTERS[cluster]
    t0 = time.monotonic()
    nodes: list[SluiceNode] = []
    try:
        nodes = start_nodes(size, material if isinstance(material, dict) else None)
        if isinstance(material, dict):
            wait_for_logins(nodes, material)
    except Exception as e:  # noqa: BLE001 - every scenario on this cluster fails with the reason
        reason = " ".join(str(e).split("\n")[0].split())
        print(f"{CLUSTER_TITLES[cluster]} did not start: {e}", flush=True)
        stop_nodes(cluster, nodes, log_dir)
        for c in clients:
            for s in SCENARIOS:
                matrix.put(c.id, s, cluster, Outcome("fail", f"the cluster did not start: {reason}"))
        return
    bootstrap = ",".join(n.bootstrap for n in nodes)
    print(f"{CLUSTER_TITLES[cluster]}: {bootstrap} (ready in {time.monotonic() - t0:.1f}s)", flush=True)
    security = security_file(material, nodes, log_dir / f"security-{cluster}.json")
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            for f in [pool.submit(run_adapter, c, cluster, bootstrap, size, security, matrix, log_dir)
                      for c in clients]:
                f.result()
    finally:
        stop_nodes(cluster, nodes, log_dir)


def stop_nodes(cluster: str, nodes: list[SluiceNode], log_dir: Path) -> None:
    for n in nodes:
        alive = n.is_running()
        n.kill()
        dest = log_dir / f"{cluster}-node{n.node_id}.log"
        if n.log_path.exists():
            shutil.copy(n.log_path, dest)
        if not alive:
            print(f"  node {n.node_id} had exited before the end of the run; its log: {dest}", flush=True)
        shutil.rmtree(n.work_dir, ignore_errors=True)


def judge(matrix: Matrix, known: list[KnownFailure]) -> list[str]:
    """The unexpected results: unlisted failures (one line per client, cluster and error, so a
    cluster that did not start is one line per client), and listed pairs that now pass."""
    unlisted: dict[tuple[str, str, str], list[str]] = {}
    problems = []
    in_table_order = sorted(matrix.outcomes.items(), key=lambda kv: (kv[0][0], kv[0][2], SCENARIOS.index(kv[0][1])))
    for (client, scenario, cluster), o in in_table_order:
        listed = [k for k in known if k.matches(client, scenario, cluster)]
        if o.result == "fail" and not listed:
            unlisted.setdefault((client, cluster, o.detail), []).append(scenario)
        elif o.result == "pass" and listed:
            problems.append(f"now passes, remove compat/known-failures.txt line {listed[0].line}: "
                            f"{client} {scenario} {cluster}")
    for (client, cluster, detail), scenarios in unlisted.items():
        which = scenarios[0] if len(scenarios) == 1 else f"{len(scenarios)} scenarios ({', '.join(scenarios[:3])}, ...)"
        problems.append(f"unexpected fail: {client} {which} {cluster}: {detail}")
    return problems


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def cell_text(o: Outcome | None) -> str:
    text = "fail: not run" if o is None else o.cell()
    if len(text) > CELL_MAX_CHARS:
        text = text[:CELL_MAX_CHARS - 1] + "…"
    return text.replace("|", "\\|")


def render(clients: list[Client], clusters: list[str], matrix: Matrix) -> str:
    # The table itself does not count: a run rewrites it, so the previous run always left it changed.
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs/compatibility.md")
    dirty = " (with uncommitted changes)" if changed else ""
    lines = [
        "# Client compatibility",
        "",
        "<!-- Generated by scripts/compat.sh (compat/run.py). Do not edit by hand: run the command. -->",
        "",
        "Generated by `scripts/compat.sh` on "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} "
        f"from sluice commit `{git('rev-parse', '--short=12', 'HEAD')}`{dirty}. Do not edit by hand.",
        "Each client runs every scenario against a fresh single node and then a fresh 3-node cluster of",
        "real `sluice` processes; what each scenario checks is described in compat/README.md. The",
        "security rows (`sasl_*`, `ssl_mtls`, `oauthbearer`, `tool_scram_users`) log in to SASL_SSL, SSL",
        "(mutual TLS) and SASL_PLAINTEXT listeners the nodes have beside the PLAINTEXT one the other rows",
        "use. A cell is `pass`, `fail: <error>` or `n/a: <why>`; long errors are cut, and the full text",
        "is in the per-cluster sections' details below each table.",
        "",
        "| client | pinned version |",
        "|---|---|",
        *[f"| {c.id} | {c.version} |" for c in clients],
    ]
    for cluster in clusters:
        counts = matrix.counts(cluster)
        lines += ["", f"## {CLUSTER_TITLES[cluster]}", "",
                  f"{counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a.", "",
                  "| scenario | " + " | ".join(c.id for c in clients) + " |",
                  "|---|" + "---|" * len(clients)]
        for s in SCENARIOS:
            cells = [cell_text(matrix.outcomes.get((c.id, s, cluster))) for c in clients]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        long_ones = [(c.id, s, matrix.outcomes[(c.id, s, cluster)]) for s in SCENARIOS for c in clients
                     if (c.id, s, cluster) in matrix.outcomes
                     and len(matrix.outcomes[(c.id, s, cluster)].cell()) > CELL_MAX_CHARS]
        if long_ones:
            lines += ["", "Full text of the cut cells:", ""]
            lines += [f"- {cid} / {s}: {o.cell()}" for cid, s, o in long_ones]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", help="comma-separated client ids to run (default: all); a partial run "
                   "writes no docs/compatibility.md unless --out is given")
    p.add_argument("--clusters", default="single,three", help="single, three or both (default)")
    p.add_argument("--parallel", type=int, default=3, help="adapters running at once against one cluster")
    p.add_argument("--out", help="where to write the tables (default docs/compatibility.md on a full run)")
    p.add_argument("--logs", help="directory for install and adapter logs (default: a fresh temporary one)")
    p.add_argument("--skip", help="comma-separated client ids to leave out")
    p.add_argument("--scenarios", help="comma-separated scenarios to run (default: all); a partial run writes "
                   "no docs/compatibility.md unless --out is given")
    p.add_argument("--install-only", action="store_true", help="install the clients (into their caches) "
                   "and stop: scripts/test.sh does this while the Rust tests run, so the matrix later finds "
                   "them installed")
    a = p.parse_args()

    t_start = time.monotonic()
    clients = load_clients()
    if a.clients:
        wanted = a.clients.split(",")
        unknown = set(wanted) - {c.id for c in clients}
        if unknown:
            raise SystemExit(f"unknown client ids {sorted(unknown)}; known: {[c.id for c in clients]}")
        clients = [c for c in clients if c.id in wanted]
    if a.skip:
        skipped = set(a.skip.split(","))
        unknown = skipped - {c.id for c in clients}
        if unknown:
            raise SystemExit(f"unknown client ids {sorted(unknown)} in --skip; known: {[c.id for c in clients]}")
        clients = [c for c in clients if c.id not in skipped]
    clusters = [c for c in a.clusters.split(",") if c]
    partial = a.clients or a.skip or a.scenarios or clusters != list(CLUSTERS)
    out = Path(a.out) if a.out else (None if partial else ROOT / "docs/compatibility.md")
    known = load_known_failures(ROOT / "compat/known-failures.txt")
    if a.scenarios:
        wanted = a.scenarios.split(",")
        unknown = set(wanted) - set(SCENARIOS)
        if unknown:
            raise SystemExit(f"unknown scenarios {sorted(unknown)}; known: {SCENARIOS}")
        SCENARIOS[:] = [s for s in SCENARIOS if s in wanted]
    log_dir = Path(a.logs) if a.logs else Path(subprocess.check_output(["mktemp", "-d", "/tmp/sluice-compat-XXXXXX"], text=True).strip())
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"compatibility matrix: {len(clients)} clients x {len(SCENARIOS)} scenarios; logs in {log_dir}", flush=True)

    for c in clients:
        install(c, log_dir)
    if a.install_only:
        failed = [c.id for c in clients if c.install_error]
        print(f"compatibility matrix: installed {len(clients) - len(failed)} of {len(clients)} clients"
              + (f"; failed: {', '.join(failed)} (the matrix retries them)" if failed else ""), flush=True)
        return 0
    material: dict | str
    if not any(s in SCENARIOS for s in [*SECURITY_SCENARIOS, "tool_scram_users"]):
        # Nodes with the PLAINTEXT listener only: nothing requested reaches the secured ones (and
        # Kafka run in sluice's place by scripts/kafka-as-sluice.py then starts too).
        material = "no requested scenario uses the secured listeners"
    else:
        try:
            material = make_security_material(log_dir)
        except Exception as e:  # noqa: BLE001 - the security rows fail with the reason
            material = " ".join(str(e).split())
            print(f"no security material, the security rows fail: {material}", flush=True)
    matrix = Matrix()
    for cluster in clusters:
        run_cluster(cluster, clients, matrix, log_dir, a.parallel, material)

    if out:
        out.write_text(render(clients, clusters, matrix))
        print(f"wrote {out}")
    problems = judge(matrix, [k for k in known if k.client in {c.id for c in clients}])
    for cluster in clusters:
        counts = matrix.counts(cluster)
        print(f"{CLUSTER_TITLES[cluster]}: {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a")
    for line in problems:
        print(line)
    for line in matrix.killed:
        print(line)
    verdict = "unexpected results" if problems else "all results as expected"
    print(f"compatibility matrix: {verdict} ({time.monotonic() - t_start:.0f}s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
