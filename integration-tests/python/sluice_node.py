"""Starts a real `sluice` broker for the Python client tests.

How a node is started (binary lookup, command line, default settings, environment, work dir and
log file, readiness deadline and probe, cluster flags) is read from integration-tests/node.json,
the description the Rust harness (integration-tests/src/node_spec.rs) reads too. This file holds
only the Python mechanics: processes, sockets, temporary directories.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parents[2]
SPEC = json.loads((WORKSPACE / "integration-tests/node.json").read_text())
HOST = SPEC["host"]


def fill(template: str, **values: str) -> str:
    """`template` with each {name} replaced; a KeyError names a placeholder without a value."""
    return template.format(**values)


def sluice_binary() -> Path:
    spec = SPEC["binary"]
    env = os.environ.get(spec["env"])
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"{spec['env']}={p} does not exist")
        return p
    target_dir = WORKSPACE / os.environ.get(spec["target_dir_env"], spec["default_target_dir"])
    candidates = [target_dir / c for c in spec["in_target_dir"]]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        f"no sluice binary: set {spec['env']} or run `cargo build --release -p sluice-broker` "
        f"(looked at {[str(c) for c in candidates]})"
    )


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-frame")
        buf += chunk
    return buf


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client_id = b"pytest"
    msg = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (length,) = struct.unpack(">i", _recv_exact(sock, 4))
    resp = _recv_exact(sock, length)
    (got,) = struct.unpack(">i", resp[:4])
    if got != corr:
        raise ValueError(f"correlation id {got} != {corr}")
    return resp[4:]


def probe(host: str, port: int) -> list[tuple[int, str, int]]:
    """Hand-encoded ApiVersions + brokers-only Metadata as node.json's `ready` says; returns the
    (node id, host, port) brokers listed. Readiness must not depend on one client library's
    quirks: client incompatibilities fail that client's tests instead."""
    spec = SPEC["ready"]
    if spec["api_versions_version"] != 0:
        raise ValueError(f"the probe speaks ApiVersions v0 only, node.json asks for v{spec['api_versions_version']}")
    lowest, highest = spec["metadata_versions"]
    with socket.create_connection((host, port), timeout=spec["connect_timeout_ms"] / 1000) as s:
        body = _request(s, 18, 0, 1, b"")
        err, n = struct.unpack(">hi", body[:6])
        if err != 0:
            raise RuntimeError(f"ApiVersions error {err}")
        ranges = {k: (lo, hi) for k, lo, hi in struct.iter_unpack(">hhh", body[6:6 + 6 * n])}
        lo, hi = ranges[3]
        version = max(lo, lowest)
        if version > min(hi, highest):
            raise RuntimeError(f"no Metadata version of {lowest}..={highest} in the advertised {lo}..={hi}")
        req = struct.pack(">i", 0)  # no topics: brokers only
        if version >= 4:
            req += b"\x00"  # allow_auto_topic_creation
        if version >= 8:
            req += b"\x00\x00"  # include cluster/topic authorized operations
        resp = _request(s, 3, version, 2, req)
    pos = 4 if version >= 3 else 0  # throttle_time_ms
    (count,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    brokers = []
    for _ in range(count):
        node_id, hlen = struct.unpack_from(">ih", resp, pos)
        pos += 6
        bhost = resp[pos:pos + hlen].decode()
        pos += hlen
        bport, rlen = struct.unpack_from(">ih", resp, pos)
        pos += 6 + max(rlen, 0)
        brokers.append((node_id, bhost, bport))
    return brokers


class SluiceNode:
    def __init__(self, settings: dict[str, str] | None = None, node_id: int = 1,
                 ready_timeout: float | None = None, extra_args: list[str] | None = None,
                 metrics: bool = False):
        self.settings = {**SPEC["settings"], **(settings or {})}
        # With `metrics`, the node serves /metrics and its console on a loopback port of its own.
        self.metrics = metrics
        self.metrics_port = 0
        self.node_id = node_id
        self.extra_args = list(extra_args or [])
        self.ready_timeout = SPEC["ready"]["timeout_ms"] / 1000 if ready_timeout is None else ready_timeout
        self.binary = sluice_binary()
        work = SPEC["work_dir"]
        self.work_dir = Path(tempfile.mkdtemp(prefix=work["prefix"]))
        self.data_dir = self.work_dir / work["data_dir"]
        self.log_path = self.work_dir / work["log_file"]
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        """Where this node's metrics and console are served, e.g. http://127.0.0.1:40123."""
        if not self.metrics:
            raise ValueError("this node was started without metrics=True")
        return f"http://{HOST}:{self.metrics_port}"

    def choose_metrics_port(self) -> None:
        if self.metrics:
            self.metrics_port = free_loopback_port()
            self.settings["metrics.listen"] = f"{HOST}:{self.metrics_port}"

    def start(self) -> "SluiceNode":
        last = None
        for _ in range(SPEC["start_attempts"]):  # a fresh port each, in case another process took ours
            self.port = free_loopback_port()
            self.choose_metrics_port()
            try:
                self._spawn_and_wait()
                return self
            except Exception as e:  # noqa: BLE001 - retried, then re-raised with the log
                last = e
                exited = self.proc is not None and self.proc.poll() is not None
                self.kill()
                if not exited:  # running but never ready: another port would not help
                    break
        raise RuntimeError(f"sluice did not start: {last}\n{self.log_tail()}")

    def _spawn_and_wait(self) -> None:
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Starts the process on `self.port` without waiting (cluster members need each other)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [str(self.binary)] + [
            fill(a, node_id=str(self.node_id), data_dir=str(self.data_dir), addr=self.bootstrap)
            for a in SPEC["args"]
        ]
        for k, v in self.settings.items():
            args += [SPEC["setting_flag"], fill(SPEC["setting"], key=k, value=v)]
        args += self.extra_args
        env = {**SPEC["env_if_unset"], **os.environ, **SPEC["env"]}
        with open(self.log_path, "ab") as log:
            note = fill(SPEC["log_note"], note=f"starting {' '.join(args)}")
            log.write(f"{note}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)

    def wait_ready(self) -> None:
        """Waits until the broker answers Metadata listing itself."""
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout
        last = "not probed"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} ({last})")
            try:
                brokers = probe(HOST, self.port)
                if any(b[0] == self.node_id and b[2] == self.port for b in brokers):
                    return
                last = f"metadata brokers {brokers}"
            except Exception as e:  # noqa: BLE001 - not ready yet; keep polling
                last = repr(e)
            time.sleep(SPEC["ready"]["poll_interval_ms"] / 1000)
        raise TimeoutError(f"broker not ready in {self.ready_timeout}s: {last}")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def start_cluster(size: int, settings: dict[str, str] | None = None,
                  metrics: bool = False, ready_timeout: float | None = None) -> list[SluiceNode]:
    """Starts `size` nodes (ids 1..size), each a broker and a metadata-quorum voter, and waits
    until every one lists itself (flags, secret and deadline as node.json's `cluster` says;
    `ready_timeout` in seconds overrides that deadline, e.g. for JVMs sharing two cores).
    With `metrics`, each node serves metrics and the console on its own port (`metrics_url`)."""
    spec = SPEC["cluster"]
    ports = [(free_loopback_port(), free_loopback_port()) for _ in range(size)]
    voters = spec["voters_separator"].join(
        fill(spec["voter"], node_id=str(i + 1), host=HOST, controller_port=str(controller))
        for i, (_, controller) in enumerate(ports))
    # The quorum's members authenticate each other with a secret shared by this cluster alone.
    secret_file = Path(tempfile.mkdtemp(prefix=spec["secret_dir_prefix"])) / spec["secret_file"]
    secret_file.write_text(secrets.token_hex(spec["secret_bytes"]) + "\n")
    cluster_args = [fill(a, voters=voters, secret_file=str(secret_file)) for a in spec["args"]]
    nodes = []
    for i, (port, _) in enumerate(ports):
        timeout = spec["ready_timeout_ms"] / 1000 if ready_timeout is None else ready_timeout
        node = SluiceNode(settings, node_id=i + 1, ready_timeout=timeout,
                          extra_args=cluster_args, metrics=metrics)
        node.port = port
        node.choose_metrics_port()
        nodes.append(node)
    try:
        for node in nodes:
            node.spawn()
        for node in nodes:
            node.wait_ready()
    except Exception as e:
        for node in nodes:
            node.kill()
        tails = "\n".join(f"--- node {n.node_id} ({n.log_path})\n{n.log_tail()}" for n in nodes)
        raise RuntimeError(f"the sluice cluster did not start: {e}\n{tails}") from e
    return nodes
