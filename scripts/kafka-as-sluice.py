#!/usr/bin/env python3
"""Apache Kafka 4.1 in sluice's clothes: accepts the `sluice` command line the test harnesses
use (--node-id, --data-dir, --listen, --advertise, --voters, --controller-listen, --set k=v;
--cluster-secret-file is accepted and ignored: this KRaft controller listener is plaintext) and
runs a KRaft broker+controller from the jars in .java-lib instead. Point a test at it to see
what Kafka itself does:

    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py .venv/bin/python -m pytest integration-tests/python/test_groups.py
    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py <test executable> --test-threads 1

--set values are passed through as Kafka properties. Secured nodes as the harnesses start them:
`--set listeners=NAME://host:port,...` with `listener.security.protocol.map` instead of
--listen (the first listener is also the inter-broker one), SCRAM users from `--add-scram` or
the SLUICE_ADD_SCRAM environment variable (space-separated entries, as sluice reads it) given
to `kafka-storage format --add-scram`. On a SASL listener the brokers log in to each other
with SCRAM as the first of those users (`sasl.mechanism.inter.broker.protocol` is the first of
`sasl.enabled.mechanisms`, which a secured node must set); make it a super user. Internal topics get min(3, nodes)
replicas, as sluice lowers them on a small cluster (Kafka's default of 3 would leave a single
node without a group coordinator). The JVM exits with 143 after SIGTERM.

JVM options: KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS, as kafka-server-start.sh reads them,
replace the defaults here, which are sized for tests (small heap, serial GC, C1 only: quick to
start, not fast). scripts/bench_against_kafka.py sets Kafka's own production defaults
(-Xmx1g -Xms1g, G1)."""
import base64
import glob
import hashlib
import os
import re
import socket
import subprocess
import sys

args = sys.argv[1:]
opts = {"settings": [], "add-scram": []}
i = 0
while i < len(args):
    a = args[i]
    if a == "--set":
        opts["settings"].append(args[i + 1]); i += 2
    elif a == "--add-scram":
        opts["add-scram"].append(args[i + 1]); i += 2
    elif a.startswith("--"):
        opts[a[2:]] = args[i + 1]; i += 2
    else:
        sys.exit(f"unexpected arg {a}")
node_id = opts.get("node-id", "1")
data = opts["data-dir"]
os.makedirs(data, exist_ok=True)
settings = dict(kv.split("=", 1) for kv in opts["settings"])
# Named listeners (`--set listeners=...`) replace --listen / --advertise.
named = settings.pop("listeners", None)
protocol_map = settings.pop("listener.security.protocol.map", None)
listen = opts.get("listen")
if named is None and listen is None:
    sys.exit("--listen or --set listeners=... is required")
adv = opts.get("advertise", listen)
voters = opts.get("voters")
if voters:
    ctrl = opts.get("controller-listen") or [v.split("@")[1] for v in voters.split(",") if v.split("@")[0] == node_id][0]
    n = len(voters.split(","))
    cid = base64.urlsafe_b64encode(hashlib.md5(voters.encode()).digest()).decode().rstrip("=")
else:
    cfile = os.path.join(data, "shim-controller")
    if os.path.exists(cfile):
        ctrl = open(cfile).read().strip()
    else:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); ctrl = f"127.0.0.1:{s.getsockname()[1]}"; s.close()
        open(cfile, "w").write(ctrl)
    voters = f"{node_id}@{ctrl}"
    n = 1
    cid = base64.urlsafe_b64encode(hashlib.md5(data.encode()).digest()).decode().rstrip("=")
rf = min(3, n)
props = {
    "process.roles": "broker,controller",
    "node.id": node_id,
    "listeners": f"PLAINTEXT://{listen},CONTROLLER://{ctrl}",
    "advertised.listeners": f"PLAINTEXT://{adv}",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "controller.quorum.voters": voters,
    "log.dirs": os.path.join(data, "kafka-logs"),
    "default.replication.factor": str(rf),
    "offsets.topic.replication.factor": str(rf),
    "transaction.state.log.replication.factor": str(rf),
    "transaction.state.log.min.isr": "1",
    "num.partitions": "1",
}
scram_users = opts["add-scram"] + os.environ.get("SLUICE_ADD_SCRAM", "").split()
if named is not None:
    first = named.split(",")[0].split("://")[0]
    protocols = dict(p.split(":", 1) for p in (protocol_map or f"{first}:{first}").split(","))
    props["listeners"] = f"{named},CONTROLLER://{ctrl}"
    props["advertised.listeners"] = named
    props["inter.broker.listener.name"] = first
    props["listener.security.protocol.map"] = ",".join(f"{k}:{v}" for k, v in protocols.items()) + ",CONTROLLER:PLAINTEXT"
    if protocols[first].startswith("SASL_"):
        mechanism = settings.get("sasl.enabled.mechanisms", "SCRAM-SHA-512").split(",")[0]
        login = re.search(r"name=([^,\]]+),password=([^,\]]+)", scram_users[0]) if scram_users else None
        if login is None:
            sys.exit("a SASL inter-broker listener needs an --add-scram / SLUICE_ADD_SCRAM user to log in as")
        props["sasl.mechanism.inter.broker.protocol"] = mechanism
        props[f"listener.name.{first.lower()}.{mechanism.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{login.group(1)}" password="{login.group(2)}";')
props.update(settings)
cfg = os.path.join(data, "server.properties")
with open(cfg, "w") as f:
    for k, v in props.items():
        f.write(f"{k}={v}\n")
lib = os.environ.get("SLUICE_JAVA_LIB", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".java-lib"))
cp = ":".join(sorted(glob.glob(os.path.join(lib, "*.jar"))))
if not os.path.exists(os.path.join(data, "kafka-logs", "meta.properties")):
    scram_args = [arg for user in scram_users for arg in ("--add-scram", user)]
    subprocess.run(["java", "-cp", cp, "kafka.tools.StorageTool", "format", f"--cluster-id={cid}", "-c", cfg, "-g",
                    *scram_args], check=True, stdout=sys.stderr)
heap = os.environ.get("KAFKA_HEAP_OPTS", "-Xmx768m").split()
jvm = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1").split()
os.execvp("java", ["java", *heap, *jvm, "-cp", cp, "kafka.Kafka", cfg])
