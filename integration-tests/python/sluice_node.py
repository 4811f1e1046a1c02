"""Starts a real `sluice` broker for the Python client tests.

How a node is started (binary lookup, command line, default settings, environment, work dir and
log file, readiness deadline and probe, cluster flags) is read from integration-tests/node.json,
the description the Rust harness (integration-tests/src/node_spec.rs) reads too. This file holds
only the Python mechanics: processes, sockets, temporary directories.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

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


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes,
             flexible: bool = False) -> bytes:
    """One request and its response body. `flexible`: request header v2 and response header v1
    (each with an empty tagged-field section), for the flexible versions of an API."""
    client_id = b"pytest"
    msg = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    msg += (b"\x00" if flexible else b"") + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (length,) = struct.unpack(">i", _recv_exact(sock, 4))
    resp = _recv_exact(sock, length)
    (got,) = struct.unpack(">i", resp[:4])
    if got != corr:
        raise ValueError(f"correlation id {got} != {corr}")
    if flexible:
        if resp[4] != 0:
            raise ValueError("the probe does not read tagged fields in a response header")
        return resp[5:]
    return resp[4:]


# --- TLS and SASL for the probe and raw-socket tests ----------------------------------------
#
# A node's `client_security` uses librdkafka's property names, so the same dict configures
# confluent-kafka: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ssl.ca.location,
# ssl.certificate.location + ssl.key.location (PEM files), sasl.mechanism (PLAIN, SCRAM-SHA-256,
# SCRAM-SHA-512), sasl.username, sasl.password.

class SaslError(Exception):
    """The broker refused a SASL step: its error code and message."""

    def __init__(self, code: int, message: str | None):
        super().__init__(f"SASL error {code}: {message}")
        self.code = code
        self.message = message


def _uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def sasl_handshake(sock: socket.socket, mechanism: str, corr: int = 100) -> list[str]:
    """SaslHandshake v1; returns the enabled mechanisms the broker lists, raising SaslError if
    it refuses `mechanism`."""
    name = mechanism.encode()
    body = _request(sock, 17, 1, corr, struct.pack(">h", len(name)) + name)
    err, n = struct.unpack_from(">hi", body)
    pos, enabled = 6, []
    for _ in range(n):
        (length,) = struct.unpack_from(">h", body, pos)
        enabled.append(body[pos + 2:pos + 2 + length].decode())
        pos += 2 + length
    if err:
        raise SaslError(err, f"mechanism {mechanism} refused; enabled: {enabled}")
    return enabled


def sasl_authenticate(sock: socket.socket, token: bytes, corr: int) -> tuple[bytes, int]:
    """SaslAuthenticate v2 (flexible) with one token; returns (the broker's token, session
    lifetime ms), raising SaslError with the broker's message on an error code."""
    body = _request(sock, 36, 2, corr, _uvarint(len(token) + 1) + token + b"\x00", flexible=True)
    (err,) = struct.unpack_from(">h", body)
    length, pos = _read_uvarint(body, 2)
    message = None
    if length:
        message = body[pos:pos + length - 1].decode(errors="replace")
        pos += length - 1
    length, pos = _read_uvarint(body, pos)
    auth = body[pos:pos + length - 1]
    pos += length - 1
    (lifetime_ms,) = struct.unpack_from(">q", body, pos)
    if err:
        raise SaslError(err, message)
    return auth, lifetime_ms


def _scram_escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def sasl_login(sock: socket.socket, mechanism: str, username: str, password: str) -> int:
    """Authenticates the connection (SaslHandshake v1 + SaslAuthenticate v2) with PLAIN or
    SCRAM-SHA-256/512 (RFC 5802, the server signature checked); returns the session lifetime
    in ms the broker gave. Raises SaslError when refused."""
    sasl_handshake(sock, mechanism)
    if mechanism == "PLAIN":
        _, lifetime = sasl_authenticate(sock, f"\0{username}\0{password}".encode(), 101)
        return lifetime
    if mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise ValueError(f"the probe speaks PLAIN and SCRAM, not {mechanism}")
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    nonce = base64.b64encode(secrets.token_bytes(18)).decode()
    client_first_bare = f"n={_scram_escape(username)},r={nonce}"
    server_first, _ = sasl_authenticate(sock, f"n,,{client_first_bare}".encode(), 101)
    fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
    if not fields["r"].startswith(nonce):
        raise ValueError("the server's SCRAM nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    server_final, lifetime = sasl_authenticate(sock, final, 102)
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    if server_final.decode() != f"v={expected}":
        raise ValueError(f"the server's SCRAM signature is wrong: {server_final!r}")
    return lifetime


def tls_context(security: dict[str, str]) -> ssl.SSLContext:
    """A client TLS context trusting ssl.ca.location, presenting ssl.certificate.location and
    ssl.key.location when given, checking the host name."""
    context = ssl.create_default_context(cafile=security.get("ssl.ca.location"))
    if security.get("ssl.certificate.location"):
        context.load_cert_chain(security["ssl.certificate.location"], security.get("ssl.key.location"))
    return context


def connect(host: str, port: int, security: dict[str, str] | None = None,
            timeout: float = 10.0) -> socket.socket:
    """A connection ready for Kafka requests: TLS and SASL as `security` (librdkafka names)
    says; plain TCP without it."""
    security = security or {}
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    sock: socket.socket = socket.create_connection((host, port), timeout=timeout)
    try:
        if protocol in ("SSL", "SASL_SSL"):
            sock = tls_context(security).wrap_socket(sock, server_hostname=host)
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            sasl_login(sock, security.get("sasl.mechanism", "PLAIN"), security["sasl.username"],
                       security["sasl.password"])
    except BaseException:
        sock.close()
        raise
    return sock


def probe(host: str, port: int, security: dict[str, str] | None = None) -> list[tuple[int, str, int]]:
    """Hand-encoded ApiVersions + brokers-only Metadata as node.json's `ready` says, after TLS
    and SASL when `security` asks for them; returns the (node id, host, port) brokers listed.
    Readiness must not depend on one client library's quirks: client incompatibilities fail
    that client's tests instead."""
    spec = SPEC["ready"]
    if spec["api_versions_version"] != 0:
        raise ValueError(f"the probe speaks ApiVersions v0 only, node.json asks for v{spec['api_versions_version']}")
    lowest, highest = spec["metadata_versions"]
    with connect(host, port, security, timeout=spec["connect_timeout_ms"] / 1000) as s:
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
    """One broker process. By default it has node.json's single PLAINTEXT listener (`--listen`).

    Secured nodes: `listeners` ({"SASL_SSL": "SASL_SSL", "SSL": "SSL", ...}: name -> security
    protocol, a port each, in Kafka's `listeners` setting instead of --listen) and
    `client_security` (librdkafka property names, see `connect`): how the readiness probe, and
    `client_config()`, reach the first listener. `env` adds to the process environment."""

    def __init__(self, settings: dict[str, str] | None = None, node_id: int = 1,
                 ready_timeout: float | None = None, extra_args: list[str] | None = None,
                 metrics: bool = False, listeners: dict[str, str] | None = None,
                 client_security: dict[str, str] | None = None, env: dict[str, str] | None = None):
        self.settings = {**SPEC["settings"], **(settings or {})}
        self.listeners = dict(listeners or {})
        self.ports: dict[str, int] = {}
        self.client_security = dict(client_security or {})
        self.extra_env = dict(env or {})
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

    def bootstrap_for(self, listener: str) -> str:
        """The address of one of the named `listeners`."""
        return f"{HOST}:{self.ports[listener]}"

    def client_config(self, **extra: str) -> dict[str, str]:
        """A librdkafka (confluent-kafka) configuration reaching the first listener as the probe
        does, plus `extra`."""
        return {"bootstrap.servers": self.bootstrap, **self.client_security, **extra}

    def choose_ports(self) -> None:
        """A fresh port for the node (each named listener gets one; the first is `port`)."""
        if self.listeners:
            self.ports = {name: free_loopback_port() for name in self.listeners}
            self.port = next(iter(self.ports.values()))
        else:
            self.port = free_loopback_port()

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
            self.choose_ports()
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
        settings = self.settings
        spec_args = SPEC["args"]
        if self.listeners:
            named = SPEC["named_listeners"]
            spec_args = named["args"]
            listeners = named["separator"].join(
                fill(named["listener"], name=name, host=HOST, port=str(self.ports[name])) for name in self.listeners)
            protocol_map = named["separator"].join(
                fill(named["protocol"], name=name, protocol=protocol) for name, protocol in self.listeners.items())
            settings = {**{k: fill(v, listeners=listeners, protocol_map=protocol_map)
                           for k, v in named["settings"].items()}, **settings}
        args = [str(self.binary)] + [
            fill(a, node_id=str(self.node_id), data_dir=str(self.data_dir), addr=self.bootstrap)
            for a in spec_args
        ]
        for k, v in settings.items():
            args += [SPEC["setting_flag"], fill(SPEC["setting"], key=k, value=v)]
        args += self.extra_args
        env = {**SPEC["env_if_unset"], **os.environ, **SPEC["env"], **self.extra_env}
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
                brokers = probe(HOST, self.port, self.client_security)
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


def wait_lists_every_broker(node: "SluiceNode", size: int) -> None:
    """A node is ready once it lists itself, but may not yet have applied the others'
    registrations: a client whose first Metadata comes from it is told a controller it cannot
    find. A fresh cluster is handed over once every node lists brokers 1..`size`."""
    wanted = set(range(1, size + 1))
    deadline = time.monotonic() + node.ready_timeout
    last = "not probed"
    while time.monotonic() < deadline:
        try:
            listed = {b[0] for b in probe(HOST, node.port, node.client_security)}
            if listed == wanted:
                return
            last = f"lists brokers {sorted(listed)}"
        except Exception as e:  # noqa: BLE001 - a moment between registrations; keep polling
            last = repr(e)
        time.sleep(SPEC["ready"]["poll_interval_ms"] / 1000)
    raise TimeoutError(f"node {node.node_id} did not list all {size} brokers in {node.ready_timeout}s: {last}")


def start_cluster(size: int, settings: dict[str, str] | None = None,
                  metrics: bool = False, ready_timeout: float | None = None,
                  listeners: dict[str, str] | None = None, client_security: dict[str, str] | None = None,
                  extra_args: list[str] | None = None, env: dict[str, str] | None = None,
                  per_node: Callable[[int], dict[str, str]] | None = None) -> list[SluiceNode]:
    """Starts `size` nodes (ids 1..size), each a broker and a metadata-quorum voter, and waits
    until every one lists itself (flags, secret and deadline as node.json's `cluster` says;
    `ready_timeout` in seconds overrides that deadline, e.g. for JVMs sharing two cores).
    With `metrics`, each node serves metrics and the console on its own port (`metrics_url`).
    `listeners`, `client_security`, `extra_args` and `env` are SluiceNode's, for every node
    (each named listener gets a port of its own on each node). `per_node(id)` adds settings of
    node `id` alone (e.g. its `broker.rack`)."""
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
        own = {**(settings or {}), **(per_node(i + 1) if per_node else {})}
        node = SluiceNode(own, node_id=i + 1, ready_timeout=timeout,
                          extra_args=cluster_args + list(extra_args or []), metrics=metrics,
                          listeners=listeners, client_security=client_security, env=env)
        if node.listeners:
            node.ports = {name: port if j == 0 else free_loopback_port() for j, name in enumerate(node.listeners)}
        node.port = port
        node.choose_metrics_port()
        nodes.append(node)
    try:
        for node in nodes:
            node.spawn()
        for node in nodes:
            node.wait_ready()
        for node in nodes:
            wait_lists_every_broker(node, size)
    except Exception as e:
        for node in nodes:
            node.kill()
        tails = "\n".join(f"--- node {n.node_id} ({n.log_path})\n{n.log_tail()}" for n in nodes)
        raise RuntimeError(f"the sluice cluster did not start: {e}\n{tails}") from e
    return nodes
