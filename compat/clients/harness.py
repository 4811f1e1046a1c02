"""What every Python adapter of the compatibility matrix shares: the command line, running the
requested scenarios side by side, one JSON result line per scenario on stdout, and the records
the produce scenarios send and compare.

The contract (compat/README.md): `adapter --bootstrap H:P[,..] --brokers N --prefix P
--security FILE --scenarios s1,s2`; for each scenario one line `{"scenario", "result", "detail"}`.
One scenario's
failure never stops another: each runs in its own try block, and its exception becomes its
`fail` detail.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

# Scenarios of one adapter run side by side: most of their time is waiting on the broker
# (group rebalance delays, metadata refreshes), and the driver's time budget is tight.
PARALLEL_SCENARIOS = 4

# Set by the driver (compat/run.py): seconds after which the adapter writes the stack of every
# scenario still running to stderr, a little before the driver kills it. Each starts with a line
# beginning STILL_RUNNING, which the driver looks for.
DUMP_AFTER_ENV = "SLUICE_COMPAT_DUMP_AFTER_S"
STILL_RUNNING = "[still running]"

# The scenario each worker thread is running (thread ident -> scenario, started).
_running: dict[int, tuple[str, float]] = {}
_running_lock = threading.Lock()

# The kafka-tools-only rows are named tool_*.
NOT_A_LIBRARY_FEATURE = "not a client-library feature (kafka-tools only)"


class NotApplicable(Exception):
    """Raised by a scenario the client cannot express; its message says why."""


class ScenarioFailed(AssertionError):
    """A check of a scenario did not hold; the message is the table cell's error."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailed(message)


# The security rows: log in as the --security file says, create a topic, produce SECURE_RECORDS
# records with acks=all, consume them all in a group and commit (sasl_wrong_password instead
# expects the login to be refused).
SECURE_ROUND_TRIPS = ("sasl_ssl_scram512", "sasl_ssl_plain", "sasl_plaintext_scram256", "ssl_mtls", "oauthbearer")
SECURE_RECORDS = 50
# What a refused SASL login must be reported as (the broker's SASL_AUTHENTICATION_FAILED message
# starts with it, for SCRAM and PLAIN alike).
AUTHENTICATION_FAILED = "Authentication failed"


@dataclass
class Context:
    """What one adapter run was given: where the cluster is, its size, the name prefix every
    topic and group it creates must start with, and the secured listeners' logins (the
    --security file: {"scenarios": {scenario: {...}}})."""
    bootstrap: str
    brokers: int
    prefix: str
    security: dict

    def name(self, suffix: str) -> str:
        return f"{self.prefix}{suffix}"

    def login(self, scenario: str) -> dict:
        """The --security file's entry for `scenario`: bootstrap, security_protocol and what
        that login needs (ca, client_cert/client_key, sasl_mechanism, username/password, token)."""
        entry = self.security.get("scenarios", {}).get(scenario)
        if entry is None:
            raise ScenarioFailed(f"the --security file has no login for {scenario}"
                                 + (f": {self.security['error']}" if "error" in self.security else ""))
        return entry

    @property
    def replication(self) -> int:
        return self.brokers


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    def describe(self) -> str:
        return f"key={self.key!r} value={self.value!r} headers={list(self.headers)!r} ts={self.timestamp}"


def now_ms() -> int:
    return int(time.time() * 1000)


def sample_records(count: int, t0: int | None = None, binary: bytes = b"\x00\xff\x80\x01") -> list[Record]:
    """`count` records with keys, two headers (the second binary) and CreateTime t0+i. t0 lies a
    minute in the past: explicit, distinct from the broker's clock, and inside every limit."""
    t0 = now_ms() - 60_000 if t0 is None else t0
    return [
        Record(key=f"key-{i}".encode(), value=f"value-{i}-".encode() * 3,
               headers=(("trace", f"t-{i}".encode()), ("bin", binary + bytes([i % 97 + 2]))),
               timestamp=t0 + i)
        for i in range(count)
    ]


def compare_records(sent: list[Record], got: list[Record], what: str = "records") -> None:
    """Fails with the first difference between what was sent and what was read back, in order."""
    for i, (s, g) in enumerate(zip(sent, got)):
        if s != g:
            raise ScenarioFailed(f"{what}: record {i} read back as {g.describe()}, sent {s.describe()}")
    check(len(got) == len(sent), f"{what}: read back {len(got)} records, sent {len(sent)}")


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.2):
    """Polls `condition` until it returns something truthy (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - retried until the deadline, then reported
            last_error = e
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last_error})" if last_error else ""
            raise ScenarioFailed(f"timed out after {timeout_s:.0f}s waiting for {what}{suffix}")
        time.sleep(interval_s)


def each_group_reads_all(groups: tuple[str, ...], drain: Callable[[str], list[int]], count: int) -> None:
    """Runs `drain(group)` for every group at once (each a consumer of its own group, returning
    the offsets it read) and fails unless every group read offsets 0..count-1."""
    outcomes: dict[str, object] = {}

    def run(group: str) -> None:
        try:
            outcomes[group] = drain(group)
        except Exception as e:  # noqa: BLE001 - reported below with the group's name
            outcomes[group] = e

    threads = [threading.Thread(target=run, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g in groups:
        o = outcomes.get(g)
        check(o == list(range(count)), f"{g}: {o if isinstance(o, Exception) else f'offsets not 0..{count - 1}'}")


Scenario = Callable[[Context], "str | None"]

# group_kip848 and group_migration: a topic of SPREAD_PARTITIONS partitions, each record's value
# `<topic>-<partition>-<i>`; fetch_from_follower reads FOLLOWER_RECORDS records; share_group's
# members together receive SHARE_RECORDS.
SPREAD_PARTITIONS = 3
FOLLOWER_RECORDS = 100
SHARE_RECORDS = 100
ONE_NODE = "one node has no followers"


def spread_values(topic: str, start: int, end: int) -> dict[int, list[bytes]]:
    """The values of offsets start..end-1 of each partition of a spread topic, by partition."""
    return {p: [f"{topic}-{p}-{i}".encode() for i in range(start, end)] for p in range(SPREAD_PARTITIONS)}


class Reads:
    """What group members read: each partition's offsets in the order read (a record read twice
    fails at once) and how many records each member got."""

    def __init__(self) -> None:
        self.offsets: dict[int, list[int]] = {}
        self.per_member: dict[int, int] = {}
        self.total = 0

    def add(self, member: int, partition: int, offset: int) -> None:
        seen = self.offsets.setdefault(partition, [])
        check(offset not in seen, f"partition {partition} offset {offset} was read twice")
        seen.append(offset)
        self.per_member[member] = self.per_member.get(member, 0) + 1
        self.total += 1

    def expect(self, start: int, end: int) -> None:
        """Fails unless each partition's offsets are exactly start..end-1, in order."""
        for p in range(SPREAD_PARTITIONS):
            got = self.offsets.get(p, [])
            check(got == list(range(start, end)), f"partition {p} read offsets {got}, expected {start}..{end - 1}")


def follower_entry(ctx: Context) -> dict:
    """fetch_from_follower's racks and /metrics URLs by node id (the --security file); n/a on one node."""
    if ctx.brokers < 2:
        raise NotApplicable(ONE_NODE)
    entry = ctx.security.get("scenarios", {}).get("fetch_from_follower") or {}
    check("racks" in entry and "metrics" in entry, f"the --security file has no racks for fetch_from_follower: {entry}")
    return entry


def sent_by_node(entry: dict, topic: str) -> dict[int, int]:
    """Records of `topic` each node sent to consumers, from its /metrics."""
    import urllib.request
    out = {}
    for node, url in entry["metrics"].items():
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read().decode()
        out[int(node)] = sum(int(float(line.rsplit(" ", 1)[1])) for line in body.splitlines()
                             if line.startswith("kafka_server_brokertopicmetrics_messagesout")
                             and f'topic="{topic}"' in line)
    return out


def served_by_follower(entry: dict, topic: str, leader: int, follower: int, count: int = FOLLOWER_RECORDS) -> str:
    """Fails unless the follower sent every record of `topic` to consumers and the leader none."""
    sent = sent_by_node(entry, topic)
    rack = entry["racks"][str(follower)]
    check(sent.get(follower, 0) >= count and sent.get(leader, 0) == 0,
          f"records sent to consumers by node {sent}: expected all {count} from follower {follower} ({rack}) "
          f"and none from leader {leader}")
    return f"client.rack={rack}: follower {follower} sent the records, leader {leader} none"

# The transaction rows (compat/README.md): how many records each transaction holds, and how long
# a read_committed consumer is watched for records of an open transaction it must not deliver.
TX_COMMITTED_1, TX_ABORTED, TX_COMMITTED_2 = 10, 10, 5
OPEN_TX_WATCH_S = 3.0
CTP_INPUTS, CTP_TX_SIZE, CTP_ABORTED = 20, 10, 5


def tx_values(tag: str, count: int) -> list[bytes]:
    """The values of one transaction of the transaction rows: `tag`-0 .. `tag`-(count-1)."""
    return [f"{tag}-{i}".encode() for i in range(count)]


def secure_values(topic: str, count: int = SECURE_RECORDS) -> list[bytes]:
    """The values a security row produces and must read back, in order."""
    return [f"{topic}-{i}".encode() for i in range(count)]


def check_values(sent: list[bytes], got: list[bytes]) -> None:
    for i, (s, g) in enumerate(zip(sent, got)):
        check(s == g, f"record {i} read back as {g!r}, sent {s!r}")
    check(len(got) == len(sent), f"read back {len(got)} records, sent {len(sent)}")


def refused_as_expected(reported: str) -> str:
    """The pass note for sasl_wrong_password (what the client reported, `reported`); fails when that
    is not an authentication failure."""
    text = " ".join(reported.split())
    check(AUTHENTICATION_FAILED in text, f"expected {AUTHENTICATION_FAILED!r}, the client reported: {text}")
    # Shorter for the table: without librdkafka's log-line prefix, broker address and timing.
    text = re.sub(r"^%\d\|.*?\]: ", "", text)
    text = re.sub(r"\b(sasl_ssl|sasl_plaintext)://\S+: ", "", text)
    text = re.sub(r" \(after \d+ms in state \w+\)$", "", text)
    return text


def parse_args(argv: list[str] | None = None) -> tuple[Context, list[str]]:
    p = argparse.ArgumentParser(description="compatibility-matrix adapter (see compat/README.md)")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--brokers", type=int, required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--security", help="the secured listeners' logins (JSON); without it the security rows fail")
    p.add_argument("--scenarios", required=True)
    a = p.parse_args(argv)
    security = {"error": "no --security file given"}
    if a.security:
        with open(os.path.expanduser(a.security)) as f:
            security = json.load(f)
    return Context(a.bootstrap, a.brokers, a.prefix, security), [s for s in a.scenarios.split(",") if s]


_out_lock = threading.Lock()


def emit(scenario: str, result: str, detail: str = "") -> None:
    line = json.dumps({"scenario": scenario, "result": result, "detail": detail})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}" if not isinstance(e, ScenarioFailed) else str(e)
    return " ".join(text.split())


def dump_running() -> None:
    """Writes where each scenario still running waits: its name, how long it has run, and its
    thread's stack."""
    frames = sys._current_frames()
    with _running_lock:
        running = list(_running.items())
    for ident, (scenario, started) in running:
        stack = traceback.extract_stack(frames[ident]) if ident in frames else []
        # From the scenario's own code inward, on one line: CI shows only the output's tail.
        inner = [f for f in stack if f.name != "run_one"]
        first = next((i for i, f in enumerate(stack) if f.name == "run_one"), -1) + 1
        inner = stack[first:] or inner
        path = " > ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in inner)
        print(f"{STILL_RUNNING} {scenario} after {time.monotonic() - started:.0f}s: {path or '(no stack)'}",
              file=sys.stderr, flush=True)
        print("".join(traceback.format_list(stack)), file=sys.stderr, flush=True)


def run_one(ctx: Context, scenario: str, table: dict[str, Scenario], not_applicable: dict[str, str]) -> None:
    started = time.monotonic()
    with _running_lock:
        _running[threading.get_ident()] = (scenario, started)
    try:
        if scenario in not_applicable:
            emit(scenario, "n/a", not_applicable[scenario])
            return
        if scenario.startswith("tool_"):
            emit(scenario, "n/a", NOT_A_LIBRARY_FEATURE)
            return
        fn = table.get(scenario)
        if fn is None:
            emit(scenario, "fail", "this adapter does not know the scenario")
            return
        note = fn(ctx)
        emit(scenario, "pass", note or "")
    except NotApplicable as e:
        emit(scenario, "n/a", str(e))
    except BaseException as e:  # noqa: BLE001 - one scenario's failure never stops the others
        print(f"[{scenario}] failed:\n{traceback.format_exc()}", file=sys.stderr)
        emit(scenario, "fail", one_line(e))
    finally:
        with _running_lock:
            _running.pop(threading.get_ident(), None)
        print(f"[{scenario}] {time.monotonic() - started:.1f}s", file=sys.stderr)


def main(table: dict[str, Scenario], not_applicable: dict[str, str] | None = None,
         argv: list[str] | None = None) -> int:
    """Runs the requested scenarios of `table` (name -> function), up to PARALLEL_SCENARIOS at a
    time; `not_applicable` maps scenarios the client cannot express to the reason."""
    ctx, scenarios = parse_args(argv)
    # The driver kills an adapter at its timeout; shortly before, the stacks of the scenarios
    # still running go to stderr, so a hung one shows where it waits (the driver prints them).
    dump_after = os.environ.get(DUMP_AFTER_ENV)
    if dump_after:
        watchdog = threading.Timer(float(dump_after), dump_running)
        watchdog.daemon = True
        watchdog.start()
    with ThreadPoolExecutor(max_workers=PARALLEL_SCENARIOS) as pool:
        for s in scenarios:
            pool.submit(run_one, ctx, s, table, not_applicable or {})
    return 0
