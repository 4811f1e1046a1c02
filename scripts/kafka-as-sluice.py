#!/usr/bin/env python3
"""Apache Kafka 4.4 in sluice's clothes: accepts the `sluice` command line the test harnesses
use (--node-id, --data-dir, --listen, --advertise, --voters, --controller-listen, --set k=v;
--cluster-secret-file is accepted and ignored: this KRaft controller listener is plaintext) and
runs a KRaft broker+controller from the jars in .java-lib instead. Point a test at it to see
what Kafka itself does:

    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py .venv/bin/python -m pytest integration-tests/python/test_groups.py
    SLUICE_BIN=$PWD/scripts/kafka-as-sluice.py <test executable> --test-threads 1

--set values are passed through as Kafka properties. Secured single nodes work too: Kafka's
`listeners` and `listener.security.protocol.map` given with --set (the harness's named listeners)
replace --listen, each SASL listener gets SCRAM's server JAAS line (sasl.enabled.mechanisms
defaults to sluice's SCRAM-SHA-256,SCRAM-SHA-512), `--add-scram` users are formatted into the
storage as `kafka-storage format --add-scram` does, and the node's own traffic (controller and
an internal PLAINTEXT inter-broker listener) runs as User:ANONYMOUS, made a super user when
an authorizer is set. TLS keystores are not translated. SCRAM users also come from the
SLUICE_ADD_SCRAM environment variable (space-separated entries, as sluice reads it), which keeps
passwords off command lines. `--set inter.broker.listener.name=NAME` naming one of the SASL
listeners puts the brokers' own traffic on it instead of the internal PLAINTEXT one (as a
sluice node with that one listener replicates over it): they log in to each other with SCRAM as
the first of those users, by `sasl.mechanism.inter.broker.protocol` (the first SCRAM mechanism
enabled); make that user a super user if an authorizer is set. Internal topics get min(3, nodes)
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
    if a in ("--set", "--add-scram"):
        opts["settings" if a == "--set" else "add-scram"].append(args[i + 1]); i += 2
    elif a.startswith("--"):
        opts[a[2:]] = args[i + 1]; i += 2
    else:
        sys.exit(f"unexpected arg {a}")
node_id = opts.get("node-id", "1")
data = opts["data-dir"]
os.makedirs(data, exist_ok=True)
settings = dict(kv.split("=", 1) for kv in opts["settings"])
named = "listeners" in settings  # the harness's named listeners instead of --listen
listen = opts.get("listen")
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
props.update(settings)
scram_users = opts["add-scram"] + os.environ.get("SLUICE_ADD_SCRAM", "").split()
if named:
    protocols = dict(e.split(":", 1) for e in settings["listener.security.protocol.map"].split(","))
    # The brokers' own traffic on one of the named SASL listeners, if the caller names it.
    chosen = settings.get("inter.broker.listener.name")
    own_listener = chosen in protocols and protocols[chosen].startswith("SASL_")
    if own_listener:
        props["listeners"] = f"{settings['listeners']},CONTROLLER://{ctrl}"
        props["advertised.listeners"] = settings["listeners"]
        props["listener.security.protocol.map"] = f"{settings['listener.security.protocol.map']},CONTROLLER:PLAINTEXT"
    else:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); internal = f"127.0.0.1:{s.getsockname()[1]}"; s.close()
        props["listeners"] = f"{settings['listeners']},INTERNAL://{internal},CONTROLLER://{ctrl}"
        props["advertised.listeners"] = f"{settings['listeners']},INTERNAL://{internal}"
        props["listener.security.protocol.map"] = (f"{settings['listener.security.protocol.map']},"
                                                   "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT")
        props["inter.broker.listener.name"] = "INTERNAL"
    props.setdefault("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512")
    for name, protocol in protocols.items():
        if protocol.startswith("SASL_"):
            prefix = f"listener.name.{name.lower()}."
            mechanisms = props.get(prefix + "sasl.enabled.mechanisms", props["sasl.enabled.mechanisms"])
            for mechanism in mechanisms.split(","):
                if mechanism.startswith("SCRAM-"):
                    props.setdefault(f"{prefix}{mechanism.lower()}.sasl.jaas.config",
                                     "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    if own_listener:
        mechanism = next(m for m in props["sasl.enabled.mechanisms"].split(",") if m.startswith("SCRAM-"))
        login = re.search(r"name=([^,\]]+),password=([^,\]]+)", scram_users[0]) if scram_users else None
        if login is None:
            sys.exit("a SASL inter-broker listener needs an --add-scram / SLUICE_ADD_SCRAM user to log in as")
        props["sasl.mechanism.inter.broker.protocol"] = mechanism
        props[f"listener.name.{chosen.lower()}.{mechanism.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{login.group(1)}" password="{login.group(2)}";')
    if props.get("authorizer.class.name"):
        props["super.users"] = ";".join(filter(None, [props.get("super.users"), "User:ANONYMOUS"]))
cfg = os.path.join(data, "server.properties")
with open(cfg, "w") as f:
    for k, v in props.items():
        f.write(f"{k}={v}\n")
lib = os.environ.get("SLUICE_JAVA_LIB", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".java-lib"))
cp = ":".join(sorted(glob.glob(os.path.join(lib, "*.jar"))))
if not os.path.exists(os.path.join(data, "kafka-logs", "meta.properties")):
    scram = [arg for user in scram_users for arg in ("--add-scram", user)]
    subprocess.run(["java", "-cp", cp, "kafka.tools.StorageTool", "format", f"--cluster-id={cid}", "-c", cfg, "-g",
                    *scram], check=True, stdout=sys.stderr)
heap = os.environ.get("KAFKA_HEAP_OPTS", "-Xmx768m").split()
jvm = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1").split()
os.execvp("java", ["java", *heap, *jvm, "-cp", cp, "kafka.Kafka", cfg])
