"""kcat (Debian's, librdkafka 2.0.2 inside) in the compatibility matrix, driven through its
command line. kcat has no admin API: topics come from auto-creation (a producer's Metadata
request), and the admin scenarios are n/a. It cannot set a record's timestamp either: the
produce scenarios check the CreateTime librdkafka stamps instead (inside the produce window)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from harness import Context, Record, check, compare_records, wait_for  # noqa: E402

TIMEOUT_S = 30
KCAT = os.environ.get("KCAT", "kcat")
# Records are framed by ASCII record/unit separators, which no key, value or header here holds.
RS, US = b"\x1e", b"\x1f"
FORMAT = r"%o\x1f%T\x1f%k\x1f%s\x1f%h\x1e"
HEADERS = (("trace", b"kcat"), ("bin", b"\x01\xfe\xff\x80"))  # argv cannot carry a NUL byte
NO_ADMIN = "kcat has no admin API"


def kcat(ctx: Context, *args: str | bytes, stdin: bytes | None = None, timeout_s: float = TIMEOUT_S) -> bytes:
    """Runs kcat to completion; fails with its stderr on a non-zero exit."""
    cmd = [KCAT, "-b", ctx.bootstrap, *args]
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise harness.ScenarioFailed(f"kcat {' '.join(map(str, args[:6]))} did not finish in {timeout_s}s "
                                     f"(fewer records than expected?)") from e
    if done.returncode != 0:
        raise harness.ScenarioFailed(f"kcat {' '.join(map(str, args[:6]))} exited {done.returncode}: "
                                     f"{done.stderr.decode(errors='replace').strip()[-300:]}")
    return done.stdout


def produce(ctx: Context, topic: str, records: list[tuple[bytes, bytes]], *conf: str) -> tuple[int, int]:
    """Produces (key, value) pairs with HEADERS; returns the wall-clock window it ran in (ms)."""
    payload = b"".join(k + US + v + RS for k, v in records)
    headers = [a for name, value in HEADERS for a in ("-H", name.encode() + b"=" + value)]
    before = harness.now_ms()
    kcat(ctx, "-P", "-t", topic, "-D", r"\x1e", "-K", r"\x1f", *headers,
         *[a for c in conf for a in ("-X", c)], stdin=payload)
    return before, harness.now_ms()


def parse(out: bytes) -> list[tuple[int, Record]]:
    """(offset, record) pairs of kcat output in FORMAT."""
    rows = []
    for frame in out.split(RS)[:-1]:
        offset, ts, key, value, headers = frame.split(US)
        pairs = tuple((h.split(b"=", 1)[0].decode(), h.split(b"=", 1)[1]) for h in headers.split(b",") if h)
        rows.append((int(offset), Record(key, value, pairs, int(ts))))
    return rows


def consume(ctx: Context, topic: str, count: int) -> list[tuple[int, Record]]:
    # No -e: an acks=0 producer exits before the followers have the records, so the high
    # watermark may still be short of `count`; kcat waits for the records (TIMEOUT_S at most).
    out = kcat(ctx, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(count), "-q", "-f", FORMAT)
    return parse(out)


def create_by_metadata(ctx: Context, topic: str) -> str:
    """kcat -L -t asks Metadata for the topic with auto-creation allowed, which creates it."""
    def led() -> bool:
        md = json.loads(kcat(ctx, "-L", "-t", topic, "-J"))
        return any(t["topic"] == topic and t.get("partitions") and all(p["leader"] >= 0 for p in t["partitions"])
                   for t in md["topics"])

    wait_for(led, TIMEOUT_S, f"{topic} to be created with a leader")
    return topic


def round_trip(ctx: Context, name: str, count: int = 100, *conf: str) -> str:
    topic = ctx.name(name)
    if "acks=0" in conf:
        # An acks=0 producer never hears that a record was refused: sent to a leader that has
        # not yet applied the auto-created topic (brokers learn of it one after another, as in
        # Kafka), the first records are lost by design. Create the topic first, as users of
        # acks=0 do.
        create_by_metadata(ctx, topic)
    pairs = [(f"key-{i}".encode(), f"value-{i}-".encode() * 3) for i in range(count)]
    before, after = produce(ctx, topic, pairs, *conf)
    got = consume(ctx, topic, count)
    check([o for o, _ in got] == list(range(count)), "offsets are not 0..n-1 in order")
    stamps = [r.timestamp for _, r in got]
    check(all(before <= t <= after for t in stamps), f"timestamps {stamps[:2]}... outside the produce window "
                                                     f"[{before}, {after}]")
    sent = [Record(k, v, HEADERS, t) for (k, v), t in zip(pairs, stamps)]
    compare_records(sent, [r for _, r in got])
    return "CreateTime stamped by librdkafka (kcat sets none)"


def metadata(ctx: Context) -> None:
    topic = ctx.name("metadata")
    produce(ctx, topic, [(b"k", b"v")])
    # Brokers learn of a new topic one after another, as in Kafka: poll.
    md = wait_for(lambda: listing_with(ctx, topic), TIMEOUT_S, f"{topic} in an all-topics metadata request")
    brokers = sorted(b["name"] for b in md["brokers"])
    check(brokers == sorted(ctx.bootstrap.split(",")), f"brokers {brokers}, expected {ctx.bootstrap}")
    listed = {t["topic"]: t for t in md["topics"]}
    check(topic in listed and len(listed[topic]["partitions"]) == 1, f"topic {topic} listed as {listed.get(topic)}")


def listing_with(ctx: Context, topic: str) -> dict | None:
    md = json.loads(kcat(ctx, "-L", "-J"))
    return md if any(t["topic"] == topic for t in md["topics"]) else None


def group_read(ctx: Context, topic: str, group: str, *args: str) -> list[int]:
    out = kcat(ctx, "-G", ctx.name(group), "-X", "auto.offset.reset=earliest", "-q", "-f", r"%o\n", *args, topic,
               timeout_s=TIMEOUT_S * 2)
    return [int(line) for line in out.split()]


def fill(ctx: Context, name: str, count: int = 100) -> str:
    topic = ctx.name(name)
    produce(ctx, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(count)])
    return topic


def group_resume(ctx: Context) -> None:
    topic = fill(ctx, "resume")
    # kcat stores the offset of each record it prints and commits on exit (enable.auto.commit).
    first = group_read(ctx, topic, "resume", "-c", "50")
    check(first == list(range(50)), f"first consumer read offsets {first[:3]}..{first[-1:]}")
    second = group_read(ctx, topic, "resume", "-e")
    check(second == list(range(50, 100)), f"second consumer read {len(second)} offsets from {second[:1]}, "
                                          "expected 50..99")


def two_groups(ctx: Context) -> None:
    topic = fill(ctx, "twogroups")
    harness.each_group_reads_all(("group-a", "group-b"), lambda g: group_read(ctx, topic, g, "-e"), 100)


def offsets_for_times(ctx: Context) -> str:
    topic = ctx.name("times")
    stamps = []
    for i in range(3):  # one record at a time, each at least a second after the previous one
        if stamps:
            wait_for(lambda: harness.now_ms() >= stamps[-1] + 1000, 5, "the clock", interval_s=0.05)
        produce(ctx, topic, [(b"k", f"v{i}".encode())])
        stamps.append(consume(ctx, topic, i + 1)[i][1].timestamp)

    def lookup(ts: int) -> int:
        out = kcat(ctx, "-Q", "-t", f"{topic}:0:{ts}").decode()
        return int(out.split("offset")[1].split()[0])

    t0 = stamps[0]
    got = [lookup(t0 + 500), lookup(stamps[2]), lookup(stamps[2] + 1000)]
    check(got == [1, 2, -1], f"offsets for t0+500, t2, t2+1000: {got}, expected [1, 2, -1]")
    return f"records stamped by librdkafka at t0, t0+{stamps[1] - t0}, t0+{stamps[2] - t0} ms"


def empty_topic(ctx: Context) -> None:
    topic = create_by_metadata(ctx, ctx.name("empty"))
    readers = {where: subprocess.Popen([KCAT, "-b", ctx.bootstrap, "-C", "-t", topic, "-p", "0", "-o", where,
                                        "-c", "1", "-f", r"%s\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for where in ("beginning", "end")}
    try:
        for where, p in readers.items():
            # Without -q kcat reports "Reached end of topic ... at offset 0": positioned, nothing read.
            line = read_line(p, p.stderr, TIMEOUT_S).decode(errors="replace")
            check("Reached end of topic" in line and "offset 0" in line,
                  f"the consumer from the {where} reported {line.strip()!r} instead of reaching the end at 0")
            check(p.poll() is None, f"the consumer from the {where} exited {p.returncode}")
        produce(ctx, topic, [(b"k", b"only")])
        for where, p in readers.items():
            out, err = p.communicate(timeout=TIMEOUT_S)
            check(out == b"only\n", f"the consumer from the {where} read {out!r} (stderr {err[-200:]!r})")
    finally:
        for p in readers.values():
            p.kill()
            p.wait()


def regex_subscribe(ctx: Context) -> str:
    early, late = ctx.name("regex-early"), ctx.name("regex-late")
    # kcat (librdkafka 2.0.2) exits on "Subscribed topic not available: <pattern>" when the pattern
    # matches nothing yet, so one matching topic exists first; its record shows the consumer is in.
    produce(ctx, early, [(b"k", b"early")])
    reader = subprocess.Popen(
        [KCAT, "-b", ctx.bootstrap, "-G", ctx.name("regex"), "-X", "auto.offset.reset=earliest",
         "-X", "topic.metadata.refresh.interval.ms=2000", "-c", "2", "-u", "-f", r"%t %s\n",
         f"^{ctx.prefix}regex-.*"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = read_line(reader, reader.stdout, TIMEOUT_S)
        check(first == f"{early} early\n".encode(), f"first record {first!r}, expected the one in {early}")
        produce(ctx, late, [(b"k", b"late")])
        second = read_line(reader, reader.stdout, TIMEOUT_S)
        check(second == f"{late} late\n".encode(), f"then {second!r}, expected the record in {late}")
        return "subscribed while one matching topic existed (see the adapter)"
    finally:
        reader.kill()
        reader.wait()


def read_line(p: subprocess.Popen, stream, timeout_s: float) -> bytes:
    """One line of kcat's `stream`, or a failure with what kcat said when none comes in time."""
    box: list[bytes] = []
    t = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout_s)
    if not box or not box[0]:
        p.kill()
        said = (p.stderr.read() if stream is not p.stderr else b"").decode(errors="replace")
        raise harness.ScenarioFailed(f"no line from kcat in {timeout_s}s (exit {p.poll()}, stderr: {said.strip()[-300:]!r})")
    return box[0]


# --- the security rows ---------------------------------------------------------------------

def secured(ctx: Context, scenario: str) -> tuple[Context, list[str]]:
    """A context on the scenario's listener and kcat's -X settings for its login."""
    login = ctx.login(scenario)
    conf = {"security.protocol": login["security_protocol"]}
    if "ca" in login:
        conf["ssl.ca.location"] = login["ca"]
    if "client_cert" in login:
        conf["ssl.certificate.location"] = login["client_cert"]
        conf["ssl.key.location"] = login["client_key"]
    if login.get("sasl_mechanism"):
        conf.update({"sasl.mechanisms": login["sasl_mechanism"], "sasl.username": login["username"],
                     "sasl.password": login["password"]})
    args = [a for k, v in conf.items() for a in ("-X", f"{k}={v}")]
    return Context(login["bootstrap"], ctx.brokers, ctx.prefix, ctx.security), args


def secure_round_trip(ctx: Context, scenario: str) -> str:
    """kcat has no admin API: the producer's Metadata request auto-creates the topic. The group
    member (-G) commits what it printed as it closes at the end (-e); a second member of the
    group then finds nothing left to read."""
    sctx, login = secured(ctx, scenario)
    topic = ctx.name(scenario.replace("_", "-"))
    values = harness.secure_values(topic)
    kcat(sctx, *login, "-P", "-t", topic, "-X", "acks=all", stdin=b"\n".join(values) + b"\n")
    group = ctx.name(f"{scenario}-group")

    def member() -> list[bytes]:
        out = kcat(sctx, *login, "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", r"%s\n", topic,
                   timeout_s=TIMEOUT_S * 2)
        return out.splitlines()

    harness.check_values(values, member())
    left = member()
    check(not left, f"the group's next member read {len(left)} records: the first one's commit is missing")
    return "topic auto-created by the producer (kcat has no admin API)"


def sasl_wrong_password(ctx: Context) -> str:
    sctx, login = secured(ctx, "sasl_wrong_password")
    # -m: kcat waits this long for metadata before it exits; the refusal is logged within ~0.1 s.
    done = subprocess.run([KCAT, "-b", sctx.bootstrap, *login, "-L", "-m", "3"], capture_output=True,
                          timeout=TIMEOUT_S)
    err = done.stderr.decode(errors="replace")
    check(done.returncode != 0, f"kcat -L exited 0 with a wrong password: {done.stdout[:200]!r}")
    said = [line for line in err.splitlines() if "SASL" in line] or err.strip().splitlines()[-1:]
    return harness.refused_as_expected(said[0] if said else f"exit {done.returncode}, nothing on stderr")


def fetch_from_follower(ctx: Context) -> str:
    """The producer auto-creates the topic (RF 3, default.replication.factor) with acks=all; kcat
    reads it with -X client.rack set to a follower's rack."""
    entry = harness.follower_entry(ctx)
    topic = ctx.name("follower")
    produce(ctx, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(harness.FOLLOWER_RECORDS)], "acks=all")
    md = json.loads(kcat(ctx, "-L", "-t", topic, "-J"))
    p = next(t for t in md["topics"] if t["topic"] == topic)["partitions"][0]
    follower = next(r["id"] for r in p["replicas"] if r["id"] != p["leader"])
    out = kcat(ctx, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(harness.FOLLOWER_RECORDS), "-q",
               "-f", r"%o\n", "-X", f"client.rack={entry['racks'][str(follower)]}")
    got = [int(line) for line in out.split()]
    check(got == list(range(harness.FOLLOWER_RECORDS)), f"offsets read {got[:3]}..., expected 0..99")
    return harness.served_by_follower(entry, topic, p["leader"], follower)


SCENARIOS = {
    "metadata": metadata,
    "produce_acks0": lambda ctx: round_trip(ctx, "acks0", 100, "acks=0"),
    "produce_acks1": lambda ctx: round_trip(ctx, "acks1", 100, "acks=1"),
    "produce_acksall": lambda ctx: round_trip(ctx, "acksall", 100, "acks=all"),
    "compression_gzip": lambda ctx: round_trip(ctx, "gzip", 100, "acks=all", "compression.codec=gzip"),
    "compression_snappy": lambda ctx: round_trip(ctx, "snappy", 100, "acks=all", "compression.codec=snappy"),
    "compression_lz4": lambda ctx: round_trip(ctx, "lz4", 100, "acks=all", "compression.codec=lz4"),
    "compression_zstd": lambda ctx: round_trip(ctx, "zstd", 100, "acks=all", "compression.codec=zstd"),
    "idempotent_produce": lambda ctx: round_trip(ctx, "idempotent", 1000, "acks=all", "enable.idempotence=true"),
    "group_resume": group_resume,
    "two_groups": two_groups,
    "offsets_for_times": offsets_for_times,
    "empty_topic": empty_topic,
    "regex_subscribe": regex_subscribe,
    **{s: (lambda ctx, s=s: secure_round_trip(ctx, s)) for s in harness.SECURE_ROUND_TRIPS if s != "oauthbearer"},
    "sasl_wrong_password": sasl_wrong_password,
    "fetch_from_follower": fetch_from_follower,
}
NOT_APPLICABLE = {
    **{s: "kcat 1.7.1's librdkafka 2.0.2 has no group.protocol=consumer (KIP-848 consumer groups came in "
          "librdkafka 2.4 as a preview, generally available in 2.10)" for s in ("group_kip848", "group_migration")},
    "share_group": "kcat 1.7.1 (librdkafka 2.0.2) has no share consumer (KIP-932)",
    "oauthbearer": "kcat 1.7.1 has no token callback, and its librdkafka 2.0.2 makes only unsigned OAUTHBEARER "
                   "tokens itself (sasl.oauthbearer.config, alg none), which Sluice refuses as Kafka's signed-token "
                   "validator does; its other token source, an OIDC token endpoint, needs an identity provider",
    "admin_topics": f"{NO_ADMIN} (create/describe/alter/delete topics)",
    "groups_describe_lag": f"{NO_ADMIN} (list/describe groups, committed offsets)",
    "delete_records": f"{NO_ADMIN} (DeleteRecords)",
    "many_topics": f"{NO_ADMIN}: it cannot create topics in a batch",
    **{s: "kcat 1.7.1 has no transactions: no transactional.id producer API (begin/commit/abort) on its command "
          "line" + {"consume_transform_produce": ", and no consumer group offsets to send to one",
                    "read_committed": " to leave one open (its consumer takes -X isolation.level, but the row "
                                      "needs the client's own transaction)"}.get(s, "")
       for s in ("transactions_commit_abort", "read_committed", "consume_transform_produce")},
}

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIOS, NOT_APPLICABLE))
