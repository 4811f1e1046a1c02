"""docker-compose.yml's cluster without Docker: each service's command (after the Dockerfile's
ENTRYPOINT) runs in its own network namespace on one bridge, resolving the others by service
name, with its published ports forwarded from the machine's loopback. Clients on the machine
use the EXTERNAL listener; the brokers must replicate through the INTERNAL one. Before named
listeners a follower dialled the leader's advertised `localhost:<port>` - itself - and never
replicated, which this test catches: min.insync.replicas=3 makes every acks=all write wait for
both followers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

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
    """ENTRYPOINT + command, with the container paths of volumes and secrets on the machine."""
    argv = [str(sluice_binary())] + entrypoint()[1:] + [str(a) for a in service["command"]]
    for container_path, path in sorted(mounts.items(), key=lambda m: -len(m[0])):
        argv = [path + a[len(container_path):] if a.startswith(container_path) else a for a in argv]
    return argv


@pytest.fixture
def network():
    # A run killed half-way leaves its namespaces and bridge; clear them first.
    for i in range(3):
        subprocess.run(["ip", "netns", "del", f"slcmp-sluice{i + 1}"], capture_output=True)
    subprocess.run(["ip", "link", "del", "slcmpbr"], capture_output=True)
    net = Network("cmp", 250)
    yield net
    net.close()


def test_the_compose_cluster_replicates_through_its_internal_listener(network, tmp_path, request):
    compose = yaml.safe_load((WORKSPACE / "docker-compose.yml").read_text())
    # `docker compose up` starts the services without a profile (the brokers).
    services = {name: s for name, s in compose["services"].items() if not s.get("profiles")}
    assert sorted(services) == ["sluice1", "sluice2", "sluice3"]
    secret = tmp_path / "cluster-secret"
    secret.write_text("compose-topology-test-secret-0123456789\n")
    procs, logs, published, consoles = {}, {}, [], {}
    for name in services:
        network.add_host(name)
    try:
        for name, service in services.items():
            mounts = {f"/run/secrets/{s}": str(secret) for s in service.get("secrets", [])}
            for volume in service.get("volumes", []):
                source, container_path = volume.split(":")[:2]
                (tmp_path / source).mkdir()
                mounts[container_path] = str(tmp_path / source)
            logs[name] = tmp_path / f"{name}.log"
            with open(logs[name], "wb") as log:
                procs[name] = network.run_in(name, service_argv(service, mounts), stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            for mapping in service.get("ports", []):
                machine_port, container_port = (int(p) for p in str(mapping).split(":"))
                network.publish(machine_port, name, container_port)
                if container_port == METRICS_PORT:
                    consoles[name] = machine_port
                else:
                    published.append(machine_port)
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
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=30)
        failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
        if failed:
            for name, log in logs.items():
                print(f"\n--- {name} ({log})\n{log.read_text(errors='replace')[-3000:]}")
