#!/usr/bin/env python3
"""Records real Kafka client requests as fuzz seeds.

  capture-frames.py proxy --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092 --out DIR
      A TCP proxy that forwards every byte unchanged in both directions and writes each
      client->broker frame body (without its 4-byte size prefix) to DIR, one file per frame,
      named <api key>-<api name>-v<version>-<hash>. The hash skips the correlation id, so the
      same request sent again (heartbeats, metadata refreshes) lands in the same file, and at
      most --max-per-kind distinct frames are kept per API version (per codec for Produce).
      Start the broker with its advertised address set to the proxy's, or clients will
      follow Metadata to the broker and bypass the proxy.

  capture-frames.py extract-records FRAMES_DIR OUT_DIR
      Writes the `records` of every captured Produce request (v3-v13), one file per
      partition's records, named records-<codec>-<hash>: seeds for the validate_batch target.

Only the standard library; used to build fuzz/corpus/ (see docs/fuzzing.md).
"""

import argparse
import asyncio
import hashlib
import signal
import struct
import sys
from pathlib import Path

# The API keys real clients send; anything else is named by number only.
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit",
    29: "DescribeAcls", 32: "DescribeConfigs", 33: "AlterConfigs", 35: "DescribeLogDirs",
    36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups", 44: "IncrementalAlterConfigs",
    47: "OffsetDelete", 48: "DescribeClientQuotas", 50: "DescribeUserScramCredentials",
    55: "DescribeQuorum", 60: "DescribeCluster", 61: "DescribeProducers", 65: "DescribeTransactions",
    66: "ListTransactions", 68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 75: "DescribeTopicPartitions",
}

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
MAX_FRAME_BYTES = 100 * 1024 * 1024


def frame_name(body: bytes) -> str:
    api_key, version = struct.unpack_from(">hh", body, 0) if len(body) >= 4 else (-1, -1)
    # Hash everything but the correlation id (bytes 4..8), so resent requests collapse.
    digest = hashlib.sha1(body[:4] + body[8:]).hexdigest()[:16]
    name = API_NAMES.get(api_key, f"api{api_key}")
    return f"{api_key:02d}-{name}-v{version}-{digest}"


async def pipe(reader, writer, on_frame=None):
    """Copies reader to writer. With on_frame, also cuts the stream into size-prefixed frames."""
    pending = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
            if on_frame is None:
                continue
            pending += chunk
            while len(pending) >= 4:
                (size,) = struct.unpack_from(">i", pending, 0)
                if size < 0 or size > MAX_FRAME_BYTES:
                    on_frame = None  # not Kafka framing any more: keep forwarding, stop recording
                    break
                if len(pending) < 4 + size:
                    break
                on_frame(pending[4:4 + size])
                pending = pending[4 + size:]
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def seed_kind(body: bytes) -> str:
    """What --max-per-kind counts against: the API and version, plus the codec for Produce."""
    name = frame_name(body).rsplit("-", 1)[0]
    if name.startswith("00-"):
        try:
            codecs = {codec_of(blob) for blob in produce_records(body)}
        except (IndexError, struct.error):
            codecs = {"unparsed"}
        name += "-" + "+".join(sorted(codecs))
    return name


async def proxy(listen: str, upstream: str, out: Path, max_per_kind: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    up_host, up_port = upstream.rsplit(":", 1)
    seen = {"frames": 0, "new": 0}
    per_kind = {}
    for existing in out.iterdir():
        kind = seed_kind(existing.read_bytes())
        per_kind[kind] = per_kind.get(kind, 0) + 1

    def save(body: bytes) -> None:
        seen["frames"] += 1
        path = out / frame_name(body)
        kind = seed_kind(body)
        if path.exists() or per_kind.get(kind, 0) >= max_per_kind:
            return
        path.write_bytes(body)
        per_kind[kind] = per_kind.get(kind, 0) + 1
        seen["new"] += 1

    async def on_client(client_reader, client_writer):
        try:
            broker_reader, broker_writer = await asyncio.open_connection(up_host, int(up_port))
        except OSError as e:
            print(f"upstream {upstream} unreachable: {e}", file=sys.stderr)
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, broker_writer, save),
            pipe(broker_reader, client_writer),
        )

    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(on_client, host, int(port))
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"proxy {listen} -> {upstream}, frames to {out}", flush=True)
    async with server:
        await stop.wait()
    print(f"{seen['frames']} frames, {seen['new']} new files", flush=True)


class Reader:
    """Kafka primitive types over a byte string; raises IndexError/struct.error past the end."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise IndexError("short frame")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int(self, fmt: str):
        (value,) = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return value

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    def string(self, compact: bool):
        n = self.uvarint() - 1 if compact else self.int(">h")
        return None if n < 0 else self.take(n)

    def array_len(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.int(">i")

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def produce_records(body: bytes):
    """Yields the records blob of every partition of a Produce v3-v13 frame body."""
    r = Reader(body)
    api_key, version = r.int(">h"), r.int(">h")
    if api_key != 0 or version < 3:
        return
    flexible = version >= 9
    r.int(">i")  # correlation id
    r.string(False)  # client id: a classic string even in header v2
    if flexible:
        r.tagged_fields()
    r.string(flexible)  # transactional id
    r.int(">h")  # acks
    r.int(">i")  # timeout
    for _ in range(r.array_len(flexible)):
        if version >= 13:
            r.take(16)  # topic id
        else:
            r.string(flexible)
        for _ in range(r.array_len(flexible)):
            r.int(">i")  # partition index
            n = r.uvarint() - 1 if flexible else r.int(">i")
            if n >= 0:
                yield r.take(n)
            if flexible:
                r.tagged_fields()
        if flexible:
            r.tagged_fields()


def codec_of(blob: bytes) -> str:
    """The codec named by the first batch's attributes."""
    return CODECS.get(struct.unpack_from(">h", blob, 21)[0] & 7, "bad") if len(blob) >= 23 else "short"


def extract_records(frames: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted(frames.iterdir()):
        if not path.name.startswith("00-Produce-"):
            continue
        try:
            blobs = list(produce_records(path.read_bytes()))
        except (IndexError, struct.error) as e:
            print(f"{path.name}: cannot parse ({e})", file=sys.stderr)
            continue
        for blob in blobs:
            target = out / f"records-{codec_of(blob)}-{hashlib.sha1(blob).hexdigest()[:16]}"
            if not target.exists():
                target.write_bytes(blob)
                written += 1
    print(f"{written} new records files in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("proxy", help="forward and record client frames")
    p.add_argument("--listen", required=True, help="host:port to accept clients on")
    p.add_argument("--upstream", required=True, help="host:port of the broker")
    p.add_argument("--out", required=True, type=Path, help="directory for frame files")
    p.add_argument("--max-per-kind", type=int, default=16,
                   help="frames kept per API version (per codec for Produce); default 16")
    e = sub.add_parser("extract-records", help="write the records of captured Produce frames")
    e.add_argument("frames", type=Path)
    e.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "proxy":
        asyncio.run(proxy(args.listen, args.upstream, args.out, args.max_per_kind))
    else:
        extract_records(args.frames, args.out)


if __name__ == "__main__":
    main()
