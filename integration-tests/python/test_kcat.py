"""kcat from Debian (librdkafka 2.0.2): its strict ApiVersions parsing makes it the canary for
handshake encoding bugs. Every command runs with a timeout and must exit 0."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed (scripts/test.sh installs it)")


def kcat(node, *args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [KCAT, "-b", node.bootstrap, "-X", "log_level=4", *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\nstderr:\n{p.stderr.decode(errors='replace')[-3000:]}"
    return p


def produce_lines(node, topic: str, lines: list[bytes], *extra: str) -> None:
    # -p 0: one partition, so consume order must equal produce order; acks=all.
    kcat(node, "-P", "-t", topic, "-p", "0", "-X", "acks=all", *extra, stdin=b"\n".join(lines) + b"\n")


def test_kcat_metadata_lists_broker_and_auto_created_topic(start_node):
    node = start_node({"num.partitions": "3"})
    produce_lines(node, "kcat-meta", [b"hello"])
    out = kcat(node, "-L").stdout.decode()
    assert f"broker {node.node_id} at {node.bootstrap}" in out, out
    assert 'topic "kcat-meta" with 3 partitions:' in out, out
    for p in range(3):
        assert f"partition {p}, leader {node.node_id}, replicas: {node.node_id}, isrs: {node.node_id}" in out, out


def test_kcat_metadata_json_parses_with_brokers_topics_and_partitions(start_node):
    node = start_node({"num.partitions": "2"})
    produce_lines(node, "kcat-json", [b"x"])
    md = json.loads(kcat(node, "-L", "-J").stdout)
    assert [(b["id"], b["name"]) for b in md["brokers"]] == [(node.node_id, node.bootstrap)]
    topics = {t["topic"]: t for t in md["topics"]}
    assert "kcat-json" in topics, md
    t = topics["kcat-json"]
    assert "error" not in t, t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1]
    for p in t["partitions"]:
        assert p["leader"] == node.node_id
        assert [r["id"] for r in p["replicas"]] == [node.node_id]
        assert [r["id"] for r in p["isrs"]] == [node.node_id]


def test_kcat_produces_and_consumes_10000_lines_identical_and_in_order(node):
    lines = [f"line-{i:05d} {'payload-' * (i % 7)}end".encode() for i in range(10_000)]
    produce_lines(node, "kcat-lines", lines)
    out = kcat(node, "-C", "-t", "kcat-lines", "-o", "beginning", "-e", "-q", "-f", "%p %o %s\n").stdout
    got = out.splitlines()
    assert len(got) == len(lines), f"read {len(got)} of {len(lines)} lines"
    for i, (row, want) in enumerate(zip(got, lines)):
        assert row == b"0 %d " % i + want, f"line {i}: {row[:80]!r}"


def test_kcat_keys_and_headers_round_trip(node):
    rows = [f"key-{i}:value-{i}".encode() for i in range(500)]
    produce_lines(node, "kcat-keyed", rows, "-K", ":", "-H", "origin=kcat", "-H", "kind=test")
    out = kcat(node, "-C", "-t", "kcat-keyed", "-o", "beginning", "-e", "-q", "-f", "%o|%k|%s|%h\n").stdout
    got = out.splitlines()
    assert len(got) == 500
    for i, row in enumerate(got):
        assert row == f"{i}|key-{i}|value-{i}|origin=kcat,kind=test".encode(), row


def test_kcat_consume_from_offset_and_tail_count(node):
    produce_lines(node, "kcat-offsets", [f"m{i}".encode() for i in range(100)])
    out = kcat(node, "-C", "-t", "kcat-offsets", "-p", "0", "-o", "90", "-e", "-q", "-f", "%o:%s\n").stdout
    assert out.splitlines() == [f"{i}:m{i}".encode() for i in range(90, 100)]
    # Negative offset: relative to the end (ListOffsets latest).
    out = kcat(node, "-C", "-t", "kcat-offsets", "-p", "0", "-o", "-3", "-e", "-q", "-f", "%o\n").stdout
    assert out.splitlines() == [b"97", b"98", b"99"]
