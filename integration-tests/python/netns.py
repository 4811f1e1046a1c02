"""Hosts in network namespaces on one bridge, as Docker puts containers on a compose network.

Each host gets a namespace with a veth into the bridge, an address on the bridge's subnet and
its own /etc/hosts (`/etc/netns/NAME/hosts`, which `ip netns exec` mounts over /etc/hosts), so
the hosts resolve each other by name. Ports are published on the machine's loopback by a small
TCP forwarder, the way docker-proxy publishes a container's ports. Needs root (CAP_NET_ADMIN).
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Network:
    """A bridge named `sl<tag>br` on 172.31.<octet>.0/24 with the machine at .1."""

    def __init__(self, tag: str, octet: int):
        if os.geteuid() != 0:
            raise PermissionError("network namespaces need root (CAP_NET_ADMIN); run the tests as root, as CI does")
        self.tag = tag
        self.bridge = f"sl{tag}br"
        self.prefix = f"172.31.{octet}"
        self.hosts: dict[str, str] = {}  # name -> address
        self._forwarder: Forwarder | None = None
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def namespace(self, name: str) -> str:
        return f"sl{self.tag}-{name}"

    def add_host(self, name: str) -> str:
        """Adds a host (namespace) named `name` and returns its address."""
        address = f"{self.prefix}.{11 + len(self.hosts)}"
        ns, veth = self.namespace(name), f"sl{self.tag}v{len(self.hosts)}"
        ip("netns", "add", ns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        self.hosts[name] = address
        self._write_hosts_files()
        return address

    def _write_hosts_files(self) -> None:
        lines = ["127.0.0.1 localhost"] + [f"{a} {n}" for n, a in self.hosts.items()]
        for name in self.hosts:
            d = Path("/etc/netns") / self.namespace(name)
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text("\n".join(lines) + "\n")

    def run_in(self, name: str, args: list[str], **popen) -> subprocess.Popen:
        """Starts `args` inside host `name`'s namespace (and its /etc/hosts)."""
        return subprocess.Popen(["ip", "netns", "exec", self.namespace(name), *args], **popen)

    def publish(self, port: int, host: str, host_port: int) -> None:
        """Forwards 127.0.0.1:`port` on the machine to `host`:`host_port`."""
        if self._forwarder is None:
            self._forwarder = Forwarder()
        self._forwarder.add(port, self.hosts[host], host_port)

    def close(self) -> None:
        if self._forwarder is not None:
            self._forwarder.close()
        for name in self.hosts:
            subprocess.run(["ip", "netns", "del", self.namespace(name)], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / self.namespace(name), ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


# How long a published port that another process holds is waited for.
PORT_FREE_TIMEOUT_S = 30


class Forwarder:
    """TCP forwarding from loopback ports, on an asyncio loop in a daemon thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.servers: list[asyncio.base_events.Server] = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def add(self, port: int, to_host: str, to_port: int) -> None:
        """Published ports are fixed and lie in the ephemeral range, where another process's
        connection can hold one for a moment: a busy port is tried again for up to
        PORT_FREE_TIMEOUT_S before the bind error is raised."""
        async def start():
            deadline = time.monotonic() + PORT_FREE_TIMEOUT_S
            while True:
                try:
                    return await asyncio.start_server(
                        lambda r, w: self._pipe_both(r, w, to_host, to_port), "127.0.0.1", port, reuse_address=True)
                except OSError as e:
                    if e.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                        raise
                    await asyncio.sleep(0.2)
        future = asyncio.run_coroutine_threadsafe(start(), self.loop)
        self.servers.append(future.result(timeout=PORT_FREE_TIMEOUT_S + 10))

    async def _pipe_both(self, reader, writer, to_host: str, to_port: int) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, to_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def stop():
            for server in self.servers:
                server.close()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
