"""Starts a real `sluice` broker for the Python client tests.

Mirrors the Rust harness (integration-tests/src/node.rs): binary from $SLUICE_BIN, else
<workspace>/target/release/sluice, else target/debug/sluice; a free loopback port; a temporary
data dir; stdout/stderr captured to a log file; readiness awaited by polling hand-encoded
ApiVersions and Metadata round-trips until a deadline.
"""

from __future__ import annotations

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


def sluice_binary() -> Path:
    env = os.environ.get("SLUICE_BIN")
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"SLUICE_BIN={p} does not exist")
        return p
    for c in (WORKSPACE / "target/release/sluice", WORKSPACE / "target/debug/sluice"):
        if c.is_file():
            return c
    raise FileNotFoundError(
        "no sluice binary: set SLUICE_BIN or run `cargo build --release -p sluice-broker`"
    )


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
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


def probe(host: str, port: int, timeout: float = 2.0) -> list[tuple[int, str, int]]:
    """Hand-encoded ApiVersions v0 + brokers-only Metadata (a non-flexible version the broker
    advertises); returns the (node id, host, port) brokers listed. Readiness must not depend on
    one client library's quirks: client incompatibilities fail that client's tests instead."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        body = _request(s, 18, 0, 1, b"")
        err, n = struct.unpack(">hi", body[:6])
        if err != 0:
            raise RuntimeError(f"ApiVersions error {err}")
        ranges = {k: (lo, hi) for k, lo, hi in struct.iter_unpack(">hhh", body[6:6 + 6 * n])}
        lo, hi = ranges[3]
        version = max(lo, 1)
        if version > min(hi, 8):
            raise RuntimeError(f"no non-flexible Metadata version in {lo}..={hi}")
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
                 ready_timeout: float = 20.0, extra_args: list[str] | None = None):
        self.settings = dict(settings or {})
        self.node_id = node_id
        self.extra_args = list(extra_args or [])
        self.ready_timeout = ready_timeout
        self.binary = sluice_binary()
        self.work_dir = Path(tempfile.mkdtemp(prefix="sluice-pytest-"))
        self.data_dir = self.work_dir / "data"
        self.log_path = self.work_dir / "sluice.log"
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "SluiceNode":
        last = None
        for _ in range(3):  # a fresh port per attempt, in case another process took ours
            self.port = free_loopback_port()
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
        args = [str(self.binary), "--node-id", str(self.node_id), "--data-dir", str(self.data_dir),
                "--listen", self.bootstrap, "--advertise", self.bootstrap, *self.extra_args]
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env["NO_COLOR"] = "1"  # plain text in the captured log
        with open(self.log_path, "ab") as log:
            log.write(f"=== harness: starting {' '.join(args)} ===\n".encode())
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
                brokers = probe("127.0.0.1", self.port)
                if any(b[0] == self.node_id and b[2] == self.port for b in brokers):
                    return
                last = f"metadata brokers {brokers}"
            except Exception as e:  # noqa: BLE001 - not ready yet; keep polling
                last = repr(e)
            time.sleep(0.05)
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


def start_cluster(size: int, settings: dict[str, str] | None = None) -> list[SluiceNode]:
    """Starts `size` nodes (ids 1..size), each a broker and a metadata-quorum voter, and waits
    until every one lists itself. Ports are picked up front so every node gets the same
    --voters list, and every node reads the same fresh --cluster-secret-file."""
    ports = [(free_loopback_port(), free_loopback_port()) for _ in range(size)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports))
    # The quorum's members authenticate each other with a secret shared by this cluster alone.
    secret_file = Path(tempfile.mkdtemp(prefix="sluice-pytest-secret-")) / "cluster-secret"
    secret_file.write_text(secrets.token_hex(32) + "\n")
    nodes = []
    for i, (port, controller) in enumerate(ports):
        node = SluiceNode(settings, node_id=i + 1, ready_timeout=30.0,
                          extra_args=["--voters", voters, "--controller-listen", f"127.0.0.1:{controller}",
                                      "--cluster-secret-file", str(secret_file)])
        node.port = port
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
