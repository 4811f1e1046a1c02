#!/usr/bin/env python3
"""Apache Kafka 4.1 in sluice's clothes: accepts the `sluice` command line the test harnesses
use (--node-id, --data-dir, --listen, --advertise, --voters, --controller-listen, --set k=v;
--cluster-secret-file is accepted and ignored: this KRaft controller listener is plaintext) and
runs a KRaft broker+controller from the jars in .java-lib instead. Point a test at it to see
what Kafka itself does:

    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py .venv/bin/python -m pytest integration-tests/python/test_groups.py
    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py <test executable> --test-threads 1

--set values are passed through as Kafka properties. Internal topics get min(3, nodes)
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
import socket
import subprocess
import sys

args = sys.argv[1:]
opts = {"settings": []}
i = 0
while i < len(args):
    a = args[i]
    if a == "--set":
        opts["settings"].append(args[i + 1]); i += 2
    elif a.startswith("--"):
        opts[a[2:]] = args[i + 1]; i += 2
    else:
        sys.exit(f"unexpected arg {a}")
node_id = opts.get("node-id", "1")
data = opts["data-dir"]
os.makedirs(data, exist_ok=True)
listen = opts["listen"]
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
for kv in opts["settings"]:
    k, v = kv.split("=", 1)
    props[k] = v
cfg = os.path.join(data, "server.properties")
with open(cfg, "w") as f:
    for k, v in props.items():
        f.write(f"{k}={v}\n")
lib = os.environ.get("SLUICE_JAVA_LIB", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".java-lib"))
cp = ":".join(sorted(glob.glob(os.path.join(lib, "*.jar"))))
if not os.path.exists(os.path.join(data, "kafka-logs", "meta.properties")):
    subprocess.run(["java", "-cp", cp, "kafka.tools.StorageTool", "format", f"--cluster-id={cid}", "-c", cfg, "-g"],
                   check=True, stdout=sys.stderr)
heap = os.environ.get("KAFKA_HEAP_OPTS", "-Xmx768m").split()
jvm = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1").split()
os.execvp("java", ["java", *heap, *jvm, "-cp", cp, "kafka.Kafka", cfg])
