"""What an operator sees first: log colours only at a terminal (and never with NO_COLOR), node
ids (not the quorum's internal raft ids) in the quorum's log lines, and `sluice settings`."""

from __future__ import annotations

import os
import re
import select
import subprocess
import tempfile
import time

from sluice_node import free_loopback_port, sluice_binary

ESC = b"\x1b["


def first_log_bytes(env_extra: dict[str, str], terminal: bool) -> bytes:
    """Starts a single node with stderr on a pseudo-terminal or a pipe and returns what it
    wrote until it said it started."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(env_extra)
    with tempfile.TemporaryDirectory() as data_dir:
        args = [str(sluice_binary()), "--data-dir", data_dir, "--listen", f"127.0.0.1:{free_loopback_port()}"]
        if terminal:
            reader, writer = os.openpty()
        else:
            reader, writer = os.pipe()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=writer, env=env)
        os.close(writer)
        out = b""
        deadline = time.monotonic() + 30
        try:
            while b"sluice started" not in out and time.monotonic() < deadline:
                ready, _, _ = select.select([reader], [], [], 1.0)
                if ready:
                    try:
                        chunk = os.read(reader, 65536)
                    except OSError:  # the pty closed
                        break
                    if not chunk:
                        break
                    out += chunk
        finally:
            proc.kill()
            proc.wait(timeout=30)
            os.close(reader)
    assert b"sluice started" in out, f"the node never said it started: {out[-2000:]!r}"
    return out


def test_logs_are_coloured_only_at_a_terminal_without_no_color():
    assert ESC in first_log_bytes({}, terminal=True), "a person at a terminal gets colours"
    assert ESC not in first_log_bytes({"NO_COLOR": "1"}, terminal=True)
    assert ESC not in first_log_bytes({}, terminal=False)


def test_quorum_log_lines_name_node_ids(cluster):
    nodes = cluster({}, size=3)
    ids = {n.node_id for n in nodes}
    for node in nodes:
        others = ids - {node.node_id}

        def peers_seen() -> set[int]:
            text = node.log_path.read_text(errors="replace")
            return {int(p) for p in re.findall(r"connected to quorum peer peer=(\d+)", text)}
        # Peers are dialled when there is something to send, so a node may not dial them all.
        deadline = time.monotonic() + 30
        while not peers_seen() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert peers_seen() and peers_seen() <= others, (
            f"node {node.node_id} logged quorum peers {peers_seen()}; the other nodes are {others}")
        text = node.log_path.read_text(errors="replace")
        assert f"registered with the metadata quorum node_id={node.node_id}" in text
        # raft-rs's own lines carry this node's id too.
        raft_ids = set(re.findall(r" raft: .* node_id=(\d+)$", text, re.M))
        assert raft_ids == {str(node.node_id)}, raft_ids
        assert f"RawNode created with id {node.node_id}." in text
        voters = re.findall(r"voters: \{([\d, ]+)\}", text)
        assert voters and all(sorted(int(v) for v in vs.split(", ")) == sorted(ids) for vs in voters), voters


def test_sluice_settings_lists_every_setting_with_its_default():
    out = subprocess.run([str(sluice_binary()), "settings"], capture_output=True, text=True, check=True).stdout
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^  (\S+) .*\[default: (.*)\]$", out, re.M)}
    assert rows["connections.max.idle.ms"] == "600000"
    assert rows["log.retention.hours"] == "168"
    assert rows["log.retention.ms"] == "604800000"
    assert rows["inter.broker.listener.name"] == "(none)"
    assert len(rows) > 60
    help_text = subprocess.run([str(sluice_binary()), "--help"], capture_output=True, text=True, check=True).stdout
    assert "sluice settings" in help_text and "NO_COLOR" in help_text and "RUST_LOG" in help_text
    refused = subprocess.run([str(sluice_binary()), "--set", "no.such.setting=1"], capture_output=True, text=True)
    assert refused.returncode == 2 and "unknown setting" in refused.stderr
