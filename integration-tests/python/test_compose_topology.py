"""docker-compose.yml's cluster without Docker: each service's command (after the Dockerfile's
ENTRYPOINT) runs in its own network namespace on one bridge, resolving the others by service
name, with its published ports forwarded from the machine's loopback. Clients on the machine
use the EXTERNAL listener; the brokers must replicate through the INTERNAL one. Before named
listeners a follower dialled the leader's advertised `localhost:<port>` - itself - and never
replicated, which this test catches: min.insync.replicas=3 makes every acks=all write wait for
both followers.

The secured variant (docker-compose.secure.yml laid over docker-compose.yml, with the files
scripts/make-certs.sh writes) runs the same way: SASL_SSL on both listeners, SCRAM users from
the env file, ACLs, and the quorum over mutual TLS.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                  ResourcePatternType, ResourceType)

from netns import Network
from sluice_node import WORKSPACE, probe, sluice_binary

HERE = Path(__file__).resolve().parent
RECORDS = 2000
PARTITIONS = 6


# The container port every node serves metrics and the console on (docker-compose.yml).
METRICS_PORT = 9644


def wait_for(what: str, condition, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
            last = result
        except Exception as e:  # noqa: BLE001 - not there yet; keep polling
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def entrypoint() -> list[str]:
    for line in (WORKSPACE / "Dockerfile").read_text().splitlines():
        if line.startswith("ENTRYPOINT"):
            return json.loads(line.removeprefix("ENTRYPOINT"))
    raise AssertionError("the Dockerfile has no ENTRYPOINT")


def service_argv(service: dict, mounts: dict[str, str]) -> list[str]:
    """ENTRYPOINT + command, with the container paths of volumes and secrets on the machine
    (an argument that is the path, or a `key=<path>` setting)."""
    argv = [str(sluice_binary())] + entrypoint()[1:] + [str(a) for a in service["command"]]
    for container_path, path in sorted(mounts.items(), key=lambda m: -len(m[0])):
        pattern = re.compile(r"(^|=)" + re.escape(container_path))
        argv = [pattern.sub(lambda m: m.group(1) + path, a, count=1) for a in argv]
    return argv


def compose_services(*files: str) -> dict[str, dict]:
    """The services `docker compose -f A -f B ...` defines, merged as Compose merges them where
    these files use it: a later file's `command` replaces, its `volumes` (by container path),
    `env_file` and `environment` add to the earlier ones'."""
    services: dict[str, dict] = {}
    for name in files:
        for service_name, service in yaml.safe_load((WORKSPACE / name).read_text())["services"].items():
            merged = services.setdefault(service_name, {})
            for key, value in service.items():
                if key == "volumes":
                    by_target = {v.split(":")[1]: v for v in merged.get("volumes", []) + value}
                    merged["volumes"] = list(by_target.values())
                elif key == "env_file":
                    merged["env_file"] = merged.get("env_file", []) + list(value)
                elif key == "environment":
                    merged["environment"] = {**merged.get("environment", {}), **value}
                else:
                    merged[key] = value
    return services


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, `#` comments, as Compose's env_file reads the ones make-certs.sh writes."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value
    return env


def start_services(network: Network, tmp_path: Path, services: dict[str, dict], secret: Path,
                   files_dir: Path | None = None):
    """Starts each service's broker command in its namespace; returns (processes, logs,
    published Kafka ports, published console ports). Named volumes become directories under
    `tmp_path`; bind mounts of `./<dir>/...` are read from `files_dir`; env files are read
    from there too."""
    procs, logs, published, consoles = {}, {}, [], {}
    for name in services:
        network.add_host(name)
    for name, service in services.items():
        mounts = {f"/run/secrets/{s}": str(secret) for s in service.get("secrets", [])}
        for volume in service.get("volumes", []):
            source, container_path = volume.split(":")[:2]
            if source.startswith("./"):
                mounts[container_path] = str(files_dir / Path(source).name)
            else:
                (tmp_path / source).mkdir()
                mounts[container_path] = str(tmp_path / source)
        env = dict(os.environ)
        for env_file in service.get("env_file", []):
            env.update(read_env_file(files_dir / Path(env_file).name))
        logs[name] = tmp_path / f"{name}.log"
        with open(logs[name], "wb") as log:
            procs[name] = network.run_in(name, service_argv(service, mounts), stdout=log, env=env,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for mapping in service.get("ports", []):
            machine_port, container_port = (int(p) for p in str(mapping).split(":"))
            network.publish(machine_port, name, container_port)
            if container_port == METRICS_PORT:
                consoles[name] = machine_port
            else:
                published.append(machine_port)
    return procs, logs, published, consoles


def stop_services(procs: dict, logs: dict, request) -> None:
    for proc in procs.values():
        proc.kill()
        proc.wait(timeout=30)
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        for name, log in logs.items():
            print(f"\n--- {name} ({log})\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def network():
    # A run killed half-way leaves its namespaces and bridge; clear them first.
    for i in range(3):
        subprocess.run(["ip", "netns", "del", f"slcmp-sluice{i + 1}"], capture_output=True)
        # A namespace's veth can outlive its deletion for a moment (the kernel frees it later).
        subprocess.run(["ip", "link", "del", f"slcmpv{i}"], capture_output=True)
    subprocess.run(["ip", "link", "del", "slcmpbr"], capture_output=True)
    net = Network("cmp", 250)
    yield net
    net.close()


def test_the_compose_cluster_replicates_through_its_internal_listener(network, tmp_path, request):
    # `docker compose up` starts the services without a profile (the brokers).
    services = {name: s for name, s in compose_services("docker-compose.yml").items() if not s.get("profiles")}
    assert sorted(services) == ["sluice1", "sluice2", "sluice3"]
    secret = tmp_path / "cluster-secret"
    secret.write_text("compose-topology-test-secret-0123456789\n")
    procs, logs = {}, {}
    try:
        procs, logs, published, consoles = start_services(network, tmp_path, services, secret)
        bootstrap = ",".join(f"localhost:{p}" for p in published)

        # From the machine, the EXTERNAL listener names every broker by its published port.
        expected = sorted((i + 1, "localhost", p) for i, p in enumerate(published))
        wait_for("three brokers listed through the external listener",
                 lambda: sorted(probe("127.0.0.1", published[0])) == expected and all(
                     sorted(probe("127.0.0.1", p)) == expected for p in published))
        # Inside the network, the INTERNAL listener names them by service name.
        inside = network.run_in("sluice2", [sys.executable, "-c",
                                            "import json, sluice_node; print(json.dumps(sluice_node.probe('sluice1', 9092)))"],
                                cwd=HERE, stdout=subprocess.PIPE, text=True)
        out, _ = inside.communicate(timeout=30)
        assert sorted(tuple(b) for b in json.loads(out)) == [(1, "sluice1", 9092), (2, "sluice2", 9092), (3, "sluice3", 9092)]

        # Each node serves metrics and the console; any console reaches the others' through the
        # HTTP address they registered (the service name, as metrics.listen binds 0.0.0.0).
        assert sorted(consoles) == ["sluice1", "sluice2", "sluice3"], consoles
        def cluster_view():
            with urllib.request.urlopen(f"http://127.0.0.1:{consoles['sluice1']}/api/cluster", timeout=10) as r:
                return json.load(r)
        wait_for("the console to list all three brokers and reach their consoles",
                 lambda: [(b["node_id"], b["console"]) for b in cluster_view()["brokers"]]
                 == [(i, f"http://sluice{i}:{METRICS_PORT}/") for i in (1, 2, 3)]
                 and cluster_view()["unreachable"] == [])

        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic("orders", PARTITIONS, 3, config={"min.insync.replicas": "3"})
        admin.create_topics([topic])["orders"].result(timeout=30)

        failures = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 30000})
        for i in range(RECORDS):
            producer.produce("orders", key=str(i % 97), value=f"order-{i}",
                             on_delivery=lambda err, msg: err and failures.append(err))
            producer.poll(0)
        assert producer.flush(60) == 0, "records still in flight after 60 s"
        assert failures == [], f"acks=all with min.insync.replicas=3 failed: {failures[:3]}"

        def full_isr():
            partitions = admin.list_topics("orders", timeout=10).topics["orders"].partitions.values()
            return len(partitions) == PARTITIONS and all(sorted(p.isrs) == [1, 2, 3] for p in partitions)
        wait_for("every partition's ISR to hold all three brokers", full_isr, timeout=10)

        # A consumer group through the external listener: FindCoordinator answers with it too.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose-check",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.add(msg.value().decode())
        consumer.close()
        assert seen == {f"order-{i}" for i in range(RECORDS)}
        # Whichever broker coordinates the group, node 1's console shows it, fully caught up.
        wait_for("the console to show compose-check with no lag",
                 lambda: [(g["group_id"], g["total_lag"], sum(o["committed"] for o in g["offsets"]))
                          for g in cluster_view()["groups"]] == [("compose-check", 0, RECORDS)])
        for name, log in logs.items():
            text = log.read_text(errors="replace")
            assert "replica fetcher cannot connect" not in text, f"{name}: {text[-2000:]}"
    finally:
        stop_services(procs, logs, request)


def demo_binary() -> Path:
    """sluice-demo, beside the sluice binary."""
    path = sluice_binary().with_name("sluice-demo")
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: run `cargo build --release -p sluice-demo` (scripts/test.sh does)")
    return path


def login(secure_dir: Path, user: str) -> dict[str, str]:
    """`user`'s librdkafka login from make-certs.sh's properties file, trusting the CA where
    it is on this machine (the file names its path in the demo containers)."""
    settings = read_env_file(secure_dir / f"{user}.properties")
    settings["ssl.ca.location"] = str(secure_dir / "ca.pem")
    return settings


def test_the_secured_compose_cluster_replicates_and_serves_over_sasl_ssl(network, tmp_path, request):
    """docker-compose.secure.yml over docker-compose.yml, with scripts/make-certs.sh's files:
    the brokers replicate through the INTERNAL SASL_SSL listener (acks=all with
    min.insync.replicas=3), the quorum forms over mutual TLS, the users of users.env log in
    with SCRAM-SHA-512, and the demo's users work within the ACLs the `acls` service grants."""
    secure_dir = tmp_path / "secure"
    subprocess.run(["bash", str(WORKSPACE / "scripts" / "make-certs.sh"), str(secure_dir)], check=True,
                   capture_output=True, timeout=60)
    compose = compose_services("docker-compose.yml", "docker-compose.secure.yml")
    services = {name: s for name, s in compose.items() if not s.get("profiles")}
    assert sorted(services) == ["sluice1", "sluice2", "sluice3"]
    assert all("sasl.enabled.mechanisms=SCRAM-SHA-512" in s["command"] for s in services.values())
    secret = tmp_path / "cluster-secret"
    secret.write_text("compose-topology-test-secret-0123456789\n")
    admin, producer_login, sink_login = (login(secure_dir, u) for u in ("admin", "orders-producer", "orders-sink"))
    procs, logs = {}, {}
    try:
        procs, logs, published, _ = start_services(network, tmp_path, services, secret, secure_dir)
        bootstrap = ",".join(f"localhost:{p}" for p in published)
        # The probe logs in as admin: the listener is up and the users exist.
        probe_login = {**admin, "sasl.mechanism": admin["sasl.mechanisms"]}
        expected = sorted((i + 1, "localhost", p) for i, p in enumerate(published))
        wait_for("three brokers listed over SASL_SSL, admin logged in",
                 lambda: all(sorted(probe("localhost", p, probe_login)) == expected for p in published))

        admin_client = AdminClient({"bootstrap.servers": bootstrap, **admin})
        topic = NewTopic("orders", PARTITIONS, 3, config={"min.insync.replicas": "3"})
        admin_client.create_topics([topic])["orders"].result(timeout=30)

        # The demo profile's `acls` service, as admin through the INTERNAL listener (its
        # certificate checked against the service name), with its login as mounted there.
        acls_service = compose["acls"]
        mounted = dict(v.split(":")[:2] for v in acls_service["volumes"])
        admin_file = secure_dir / Path(next(s for s, t in mounted.items() if t.endswith("login.properties"))).name
        host_login = tmp_path / "acls-login.properties"
        host_login.write_text(admin_file.read_text().replace("/etc/sluice-demo/ca.pem", str(secure_dir / "ca.pem")))
        env = {**os.environ, **acls_service["environment"], "SLUICE_DEMO_SECURITY_CONFIG": str(host_login)}
        grant = network.run_in("sluice1", [str(demo_binary())] + [str(a) for a in acls_service["command"]], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = grant.communicate(timeout=90)
        assert grant.returncode == 0, out
        bindings = admin_client.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                                               None, AclOperation.ANY,
                                                               AclPermissionType.ANY)).result(timeout=30)
        granted = sorted((b.principal, b.operation.name, b.restype.name, b.name) for b in bindings)
        assert granted == sorted([("User:orders-producer", op, "TOPIC", "orders") for op in ("WRITE", "DESCRIBE", "CREATE")]
                                 + [(f"User:{u}", op, "TOPIC", "orders") for u in ("orders-sink", "analytics")
                                    for op in ("READ", "DESCRIBE")]
                                 + [("User:orders-sink", "READ", "GROUP", "orders-sink"),
                                    ("User:analytics", "READ", "GROUP", "analytics")]), granted

        failures = []
        producer = Producer({"bootstrap.servers": bootstrap, **producer_login, "acks": "all",
                             "enable.idempotence": True, "message.timeout.ms": 30000})
        for i in range(RECORDS):
            producer.produce("orders", key=str(i % 97), value=f"order-{i}",
                             on_delivery=lambda err, msg: err and failures.append(err))
            producer.poll(0)
        assert producer.flush(60) == 0, "records still in flight after 60 s"
        assert failures == [], f"acks=all with min.insync.replicas=3 over SASL_SSL failed: {failures[:3]}"

        def full_isr():
            partitions = admin_client.list_topics("orders", timeout=10).topics["orders"].partitions.values()
            return len(partitions) == PARTITIONS and all(sorted(p.isrs) == [1, 2, 3] for p in partitions)
        wait_for("every partition's ISR to hold all three brokers", full_isr, timeout=10)

        consumer = Consumer({"bootstrap.servers": bootstrap, **sink_login, "group.id": "orders-sink",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.add(msg.value().decode())
        consumer.close()
        assert seen == {f"order-{i}" for i in range(RECORDS)}
        for name, log in logs.items():
            text = log.read_text(errors="replace")
            assert "replica fetcher cannot connect" not in text, f"{name}: {text[-2000:]}"
            assert "--add-scram: created the SCRAM user" in text or "left it unchanged" in text, f"{name}: {text[-2000:]}"
            for user in ("admin", "orders-producer", "orders-sink", "analytics"):
                assert login(secure_dir, user)["sasl.password"] not in text, f"{name} logged a password"
    finally:
        stop_services(procs, logs, request)
