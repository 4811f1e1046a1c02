"""KIP-932 share groups (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, ShareGroupDescribe,
DescribeShareGroupOffsets, ...) with Kafka's own KafkaShareConsumer and kafka-share-groups:

- members of one share group share a single partition: three members split 300 records, each
  processed once, and kafka-share-groups describes three members, Stable, nothing left to deliver
  (with Kafka 4.1's KafkaShareConsumer, the first preview, and with the newest, 4.4);
- a member that crashes (SIGKILL) holding acquired records loses them when their acquisition
  lock expires (group.share.record.lock.duration.ms), and another member gets them with
  delivery count 2;
- a member renewing its records' locks (RENEW, Kafka 4.2+ clients) keeps them past the lock
  duration, and with share.acquire.mode=record_limit a fetch takes no more than max.poll.records
  records, so two members share one batch;
- a RELEASEd record is redelivered with its delivery count raised, a REJECTed one never again,
  and one released on its last allowed delivery (group.share.delivery.count.limit) is archived;
- with share.isolation.level=read_committed only committed transactional records are delivered,
  none of an aborted transaction, nothing past an open one until it commits;
- kafka-share-groups lists the group, refuses to delete it or its offsets while it has members,
  resets an empty group to the earliest offset (a new member re-reads everything), deletes its
  offsets (the next member starts from share.auto.offset.reset) and deletes it;
- ten members on three partitions process 10,000 records exactly once;
- with the authorizer on, a member needs READ on its group and on the topic;
- on three nodes, members fetch each partition from its leader and get every record once;
- on three nodes, the partition's leader or the group's coordinator SIGKILLed mid-stream loses no
  acknowledgement: a record acknowledged before the kill is never delivered again, only records
  in flight are, and kafka-share-groups then shows nothing left to deliver;
- the console's /api/cluster lists a share group with its members, start offset and lag.

Each test starts its own node through `share_node`: a sluice node by default, or real Apache
Kafka 4.4 (scripts/kafka-as-sluice.py) with SHARE_AGAINST_KAFKA=1, where these tests were
validated; what they expect is what Kafka 4.4 does:

    SHARE_AGAINST_KAFKA=1 .venv/bin/python -m pytest integration-tests/python/test_share_groups.py

Kafka 4.4 needs no switch for share groups (share.version is finalized at 2 when the storage is
formatted). Share groups begin at the latest offset (share.auto.offset.reset, a group config);
each test sets its group to `earliest` with kafka-configs before the first member starts."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from group_clients import create_topic, wait_until
from share_clients import (JAVA_LIB_4_1, ShareMember, delete_group, describe_offsets, describe_state, list_share_groups,
                           produce_values, reset_to_earliest, share_groups, share_groups_ok, start_from_earliest,
                           start_members, stop_members, wait_for_members, wait_for_total)
from test_java_cli import JAVA_LIB
from test_java_groups import table

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "scripts" / "kafka-as-sluice.py"

# Broker settings of every share_node, by Kafka's names (sluice must accept the same names):
SHARE_SETTINGS = {
    # The acquisition lock of a delivered record (Kafka's default 30 s), short so that a crashed
    # member's records come back within a test. Kafka bounds it by the next setting (default
    # 15000, itself at least 1000).
    "group.share.record.lock.duration.ms": "5000",
    "group.share.min.record.lock.duration.ms": "1000",
    # Deliveries of a record before it is archived (Kafka's default 5, at least 2).
    "group.share.delivery.count.limit": "2",
}

# Kafka alone: its share-group state topic (__share_group_state) defaults to 3 replicas and
# min.isr 2, which a single node cannot host (kafka-as-sluice.py lowers only the offsets and
# transaction topics).
KAFKA_ONLY_SETTINGS = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


@pytest.fixture
def share_node(start_node, monkeypatch):
    """Factory: share_node(settings) -> a ready single node with SHARE_SETTINGS plus `settings`:
    sluice, or Apache Kafka 4.4 when SHARE_AGAINST_KAFKA=1 (stopped after the test either way,
    its log kept and printed if the test failed)."""
    against_kafka = os.environ.get("SHARE_AGAINST_KAFKA") == "1"

    def start(settings: dict[str, str] | None = None):
        wanted = {**SHARE_SETTINGS, **(settings or {})}
        if not against_kafka:
            return start_node(wanted)
        monkeypatch.setenv("SLUICE_BIN", str(KAFKA))
        return start_node({**KAFKA_ONLY_SETTINGS, **wanted}, ready_timeout=120)

    return start


def values(n: int, start: int = 0) -> list[str]:
    return [str(i) for i in range(start, start + n)]


def wait_for_lag(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 60.0
                 ) -> list[dict[str, str]]:
    """Waits until --describe --offsets shows every partition of `topic` with LAG 0: every
    record up to the end of the log acknowledged or archived, none left to deliver."""
    def settled():
        rows = [r for r in describe_offsets(bootstrap, group) if r["TOPIC"] == topic]
        return rows if len(rows) == partitions and all(r["LAG"] == "0" for r in rows) else None
    return wait_until(f"{group} to have nothing left to deliver on {topic}", settled, timeout, interval=1.0)


# --- a. members share one partition -----------------------------------------------------------

# Kafka 4.1's KafkaShareConsumer (a preview) and the newest, as the issue asks: each speaks
# ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1.
CLIENTS = {"4.4": JAVA_LIB, "4.1": JAVA_LIB_4_1}


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_share_one_partition_and_each_record_is_processed_once(share_node, client):
    node = share_node()
    topic, group = f"share-one-partition-{client}", f"share-one-partition-{client}-g"
    create_topic(node.bootstrap, topic, 1)
    start_from_earliest(node.bootstrap, group)
    # At most 10 records a poll (one produced batch) and 2 ms of processing per record, so that
    # while one member works through what it acquired the others fetch the next records.
    members = start_members(3, node.bootstrap, topic, group, sleep_ms=2, client_lib=CLIENTS[client],
                            **{"max.poll.records": "10"})
    try:
        # All three are assigned the one partition before any record exists to be taken.
        rows = wait_for_members(node.bootstrap, group, 3)
        assert sorted(r["ASSIGNMENT"] for r in rows) == [f"{topic}:0"] * 3, rows
        produce_values(node.bootstrap, topic, values(300), batch=10)
        wait_for_total(members, 300)
        settled = wait_for_lag(node.bootstrap, group, topic, 1)

        # With nothing left to deliver (LAG 0), the deliveries are final.
        got = [d for m in members for d in m.deliveries()]
        assert sorted(int(d.value) for d in got) == list(range(300)), Counter(d.value for d in got).most_common(3)
        assert sorted(d.offset for d in got) == list(range(300))
        assert {d.delivery_count for d in got} == {1}
        per_member = [len(m.deliveries()) for m in members]
        assert sum(1 for n in per_member if n > 0) > 1, f"one member took every record: {per_member}"

        state = describe_state(node.bootstrap, group)
        assert (state["STATE"], state["#MEMBERS"]) == ("Stable", "3"), state
        # Kafka 4.4 reports the share-partition start offset as persisted by the share coordinator,
        # which trails the acknowledgements, so only "at most the log end" holds while LAG is 0.
        [row] = settled
        assert row["PARTITION"] == "0" and 0 <= int(row["START-OFFSET"]) <= 300, row
    finally:
        stop_members(members)
    for m in members:
        assert not m.errors(), (m.name, m.errors())


# --- b. a crashed member's records come back ---------------------------------------------------

@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_records_held_by_a_killed_or_hung_member_are_redelivered_with_delivery_count_2(share_node, fault):
    """A member SIGKILLed holding records: its connection closes and (on Kafka 4.4 as on sluice)
    the records go to another member at once. A member SIGSTOPped holding them keeps its
    connection: they come back when the acquisition lock (5 s here) runs out."""
    node = share_node()
    topic, group = f"share-{fault}", f"share-{fault}-g"
    create_topic(node.bootstrap, topic, 1)
    start_from_earliest(node.bootstrap, group)
    produce_values(node.bootstrap, topic, values(10), batch=10)  # one batch, acquired whole

    holder = ShareMember(node.bootstrap, topic, group, ack="hold", client_id="holder")
    taker = None
    try:
        held = holder.wait_for(10)
        assert sorted((d.offset, d.delivery_count) for d in held) == [(i, 1) for i in range(10)], held
        # Crashed or hung: no acknowledgement, no leaving the group.
        if fault == "killed":
            holder.kill()
        else:
            holder.freeze()
        faulted = time.monotonic()

        taker = ShareMember(node.bootstrap, topic, group, count=10, timeout_ms=60_000, client_id="taker")
        got = taker.wait_for(10)
        if fault == "hung":
            waited = time.monotonic() - faulted
            assert waited >= 4.0, f"records held by a hung member came back after {waited:.1f} s, before the lock ran out"
        assert sorted((d.offset, d.delivery_count, d.value) for d in got) == \
            [(i, 2, str(i)) for i in range(10)], got
        assert taker.wait() == 0, taker.stderr_tail()
    finally:
        stop_members([holder] + ([taker] if taker else []))
    wait_for_lag(node.bootstrap, group, topic, 1)


# --- b2. ShareFetch/ShareAcknowledge v2 (Kafka 4.2+ clients): renewals and record_limit ----------

def test_a_member_renewing_its_locks_keeps_its_records_past_the_lock_duration(share_node):
    """KIP-1222: a member working on records for 10 s, twice the acquisition lock, renews their
    locks (AcknowledgeType.RENEW, committed every 1.5 s) and then accepts them: another member
    polling all the while never gets them, every record is delivered once, no renewal fails."""
    node = share_node()
    topic, group = "share-renew", "share-renew-g"
    create_topic(node.bootstrap, topic, 1)
    start_from_earliest(node.bootstrap, group)
    produce_values(node.bootstrap, topic, values(10), batch=10)  # one batch, acquired whole

    worker = ShareMember(node.bootstrap, topic, group, renew_ms=10_000, client_id="renewer")
    other = None
    try:
        held = worker.wait_for(10)
        assert sorted((d.offset, d.delivery_count) for d in held) == [(i, 1) for i in range(10)], held
        other = ShareMember(node.bootstrap, topic, group, client_id="other")
        wait_until("the renewer to accept after renewing",
                   lambda: "COMMITTED" in worker.output() or None, timeout=60, interval=0.2)
        renewals = [line for line in worker.output() if line.startswith("RENEWED")]
        assert len(renewals) >= 5, f"{len(renewals)} renewals in 10 s"
        # The client presents renewed records again (as on Kafka 4.4), all ten each round.
        assert set(renewals) == {"RENEWED 10"}, renewals
        wait_for_lag(node.bootstrap, group, topic, 1)
        assert other.deliveries() == [], f"records renewed by their member went to another: {other.deliveries()}"
        assert worker.deliveries() == held, "no record came back to the renewer either"
    finally:
        stop_members([worker] + ([other] if other else []))
    for m in [worker] + ([other] if other else []):
        assert not m.errors(), (m.name, m.errors())


def test_record_limit_mode_acquires_no_more_than_max_poll_records_so_members_share_a_batch(share_node):
    """KIP-1206: with share.acquire.mode=record_limit a fetch acquires at most max.poll.records
    records, splitting a batch, so two members slowly working through one batch of 12 records
    both get some of it (in the default batch_optimized mode the first fetch takes the batch
    whole); every record is delivered once."""
    node = share_node()
    topic, group = "share-record-limit", "share-record-limit-g"
    create_topic(node.bootstrap, topic, 1)
    start_from_earliest(node.bootstrap, group)
    members = start_members(2, node.bootstrap, topic, group, sleep_ms=300,
                            **{"share.acquire.mode": "record_limit", "max.poll.records": "3"})
    try:
        wait_for_members(node.bootstrap, group, 2)
        produce_values(node.bootstrap, topic, values(12), batch=12)
        wait_for_total(members, 12)
        wait_for_lag(node.bootstrap, group, topic, 1)
        got = [d for m in members for d in m.deliveries()]
        assert sorted((d.offset, d.delivery_count) for d in got) == [(i, 1) for i in range(12)], got
        per_member = [len(m.deliveries()) for m in members]
        assert all(per_member), f"one member took the whole batch: {per_member}"
    finally:
        stop_members(members)
    for m in members:
        assert not m.errors(), (m.name, m.errors())


# --- c. RELEASE, REJECT and the delivery count limit -------------------------------------------

def test_released_records_are_redelivered_rejected_ones_are_not_and_the_delivery_limit_archives(share_node):
    node = share_node()  # group.share.delivery.count.limit=2
    topic, group = "share-ack-types", "share-ack-types-g"
    create_topic(node.bootstrap, topic, 1)
    start_from_earliest(node.bootstrap, group)
    produce_values(node.bootstrap, topic, values(10), batch=10)

    # Rejects 3; releases 5 and 7 on every delivery; accepts the rest.
    member = ShareMember(node.bootstrap, topic, group, reject="3", release="5|7")
    try:
        member.wait_for(12)
        # LAG 0: 5 and 7 released on their second (last) delivery were archived, not made
        # available again, so no further delivery can follow.
        wait_for_lag(node.bootstrap, group, topic, 1)
        got = Counter((d.value, d.delivery_count) for d in member.deliveries())
    finally:
        stop_members([member])
    assert not member.errors(), member.errors()
    expected = Counter({(str(i), 1): 1 for i in range(10)})
    expected.update({("5", 2): 1, ("7", 2): 1})
    assert got == expected, sorted(got.items())


def test_read_committed_delivers_committed_records_only_and_nothing_past_an_open_transaction(share_node):
    """share.isolation.level=read_committed (a group config): 10 committed records, 10 of an
    aborted transaction, 10 committed, then 5 of a transaction left open. The member gets the 20
    committed records and none of the aborted ones (archived, with the transaction markers), and
    nothing of the open transaction until it commits; then those 5, and nothing is left to
    deliver."""
    from confluent_kafka import Producer

    from share_clients import set_group_config

    node = share_node()
    b = node.bootstrap
    topic, group = "share-read-committed", "share-read-committed-g"
    create_topic(b, topic, 1)
    set_group_config(b, group, **{"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": b, "transactional.id": "share-rc-tx", "log_level": 3, "linger.ms": 0})
    producer.init_transactions(30)

    def transaction(prefix: str, start: int, end: int, commit: bool | None) -> None:
        producer.begin_transaction()
        for i in range(start, end):
            producer.produce(topic, value=f"{prefix}{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        if commit is True:
            producer.commit_transaction(30)
        elif commit is False:
            producer.abort_transaction(30)

    transaction("c", 0, 10, True)
    transaction("a", 0, 10, False)
    transaction("c", 10, 20, True)
    transaction("p", 0, 5, None)  # left open
    member = ShareMember(b, topic, group)
    try:
        first = member.wait_for(20)
        assert sorted(d.value for d in first) == sorted(f"c{i}" for i in range(20)), first
        # The open transaction's records are past the last stable offset: none delivered yet.
        assert not [d for d in member.deliveries() if not d.value.startswith("c")], member.deliveries()
        producer.commit_transaction(30)
        member.wait_for(25)
        wait_for_lag(b, group, topic, 1)
        got = Counter(d.value for d in member.deliveries())
    finally:
        stop_members([member])
    assert not member.errors(), member.errors()
    assert got == Counter([f"c{i}" for i in range(20)] + [f"p{i}" for i in range(5)]), sorted(got)


# --- d. kafka-share-groups: list, delete, reset ------------------------------------------------

def rereads_all_20(bootstrap: str, topic: str, group: str, client_id: str) -> None:
    """A new member gets the topic's 20 records again, each as a fresh delivery (count 1)."""
    member = ShareMember(bootstrap, topic, group, count=20, timeout_ms=60_000, client_id=client_id)
    try:
        got = member.wait_for(20)
        assert member.wait() == 0, member.stderr_tail()
    finally:
        stop_members([member])
    assert sorted((d.offset, d.delivery_count) for d in got) == [(i, 1) for i in range(20)], got


def test_kafka_share_groups_lists_refuses_to_delete_a_busy_group_resets_to_earliest_and_deletes(share_node):
    node = share_node()
    b = node.bootstrap
    topic, group = "share-admin", "share-admin-g"
    create_topic(b, topic, 1)
    start_from_earliest(b, group)
    produce_values(b, topic, values(20), batch=10)

    first = ShareMember(b, topic, group, client_id="first")
    try:
        first.wait_for(20)
        assert group in list_share_groups(b)
        busy = delete_group(b, group)
        # Kafka's tool reports this refusal on stdout and still exits 0.
        assert f"Group '{group}' could not be deleted due to: " \
               "org.apache.kafka.common.errors.GroupNotEmptyException" in busy.stdout, busy
        # ... and this one on stderr, exiting 1.
        busy = share_groups(b, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert busy.returncode == 1 and f"Share group '{group}' is not empty." in busy.stderr, busy
        # --delete-offsets too (NON_EMPTY_GROUP; the tool prints the error per topic, exiting 0).
        busy = share_groups(b, "--delete-offsets", "--group", group, "--topic", topic)
        assert busy.returncode == 0 and re.search(rf"\n{topic} +Error: ", busy.stdout), busy
        first.terminate()  # closes: leaves the group
    finally:
        stop_members([first])
    assert not first.errors(), first.errors()
    wait_until("the group to be empty", lambda: describe_state(b, group)["STATE"] == "Empty", timeout=30)
    wait_for_lag(b, group, topic, 1)

    reset = table(reset_to_earliest(b, group, topic))
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in reset] == [(topic, "0", "0")], reset
    [row] = describe_offsets(b, group)
    assert (row["START-OFFSET"], row["LAG"]) == ("0", "20"), row
    rereads_all_20(b, topic, group, "second")

    # --delete-offsets: the topic's state goes; the next member starts from share.auto.offset.reset
    # (earliest here) and gets everything once more.
    wait_until("the group to be empty", lambda: describe_state(b, group)["STATE"] == "Empty", timeout=30)
    wait_for_lag(b, group, topic, 1)
    dropped = share_groups(b, "--delete-offsets", "--group", group, "--topic", topic)
    assert dropped.returncode == 0 and re.search(rf"\n{topic} +Successful\n", dropped.stdout), dropped
    after = share_groups_ok(b, "--describe", "--group", group, "--offsets")
    assert f"Share group '{group}' has no offset information." in after, after
    rereads_all_20(b, topic, group, "third")

    wait_until("the group to be empty", lambda: describe_state(b, group)["STATE"] == "Empty", timeout=30)
    deleted = delete_group(b, group)
    assert deleted.returncode == 0 and "Error" not in deleted.stdout, deleted
    assert group not in list_share_groups(b)
    gone = share_groups(b, "--describe", "--group", group)
    assert "GroupIdNotFoundException" in gone.stdout + gone.stderr, gone


# --- e. ten members, three partitions ----------------------------------------------------------

def test_ten_members_on_three_partitions_process_ten_thousand_records_exactly_once(share_node):
    node = share_node()
    topic, group = "share-ten", "share-ten-g"
    count = 10_000
    create_topic(node.bootstrap, topic, 3)
    start_from_earliest(node.bootstrap, group)
    members = start_members(10, node.bootstrap, topic, group)
    try:
        rows = wait_for_members(node.bootstrap, group, 10, timeout=90)
        assigned = Counter(p for r in rows for p in r["ASSIGNMENT"].split(":", 1)[1].split(","))
        assert sorted(assigned) == ["0", "1", "2"], rows
        produce_values(node.bootstrap, topic, values(count), partitions=3, batch=100)
        wait_for_total(members, count, timeout=240)
        wait_for_lag(node.bootstrap, group, topic, 3)
        got = [d for m in members for d in m.deliveries()]
    finally:
        stop_members(members)
    for m in members:
        assert not m.errors(), (m.name, m.errors())
    assert sorted(int(d.value) for d in got) == list(range(count)), \
        Counter(d.value for d in got).most_common(3)
    assert sorted((d.partition, d.offset) for d in got) == \
        sorted((p, o) for p in range(3) for o in range((count - p + 2) // 3))
    assert {d.delivery_count for d in got} == {1}


def properties(path: Path) -> dict[str, str]:
    """A Java client properties file as key=value settings (ShareMember takes them so)."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_share_member_needs_read_on_its_group_and_on_the_topic(start_node, tmp_path):
    """As test_security_acls.py: StandardAuthorizer, deny by default, SCRAM users. `reader` has
    READ on the topic and only DESCRIBE on the group: ShareGroupHeartbeat refuses it
    (GroupAuthorizationException), and so does AlterShareGroupOffsets (kafka-share-groups
    --reset-offsets needs READ on the group). `peeker` has READ on the group and only DESCRIBE on
    the topic: it joins, and ShareFetch refuses it the topic's records
    (TopicAuthorizationException). Once `reader` is granted READ on the group it gets every
    record; kafka-share-groups --delete-offsets then needs DELETE on the group too, and READ on
    the topic (peeker, with DELETE on the group, is refused the topic). Sluice only:
    the ACL fixtures are sluice's."""
    from confluent_kafka.admin import AclOperation, ResourceType

    from test_security_acls import AUTHORIZER, MECHANISM, binding, create_topics, grant, login
    from test_security_acls import produce as produce_as

    settings = {**SHARE_SETTINGS, "authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
                "sasl.enabled.mechanisms": MECHANISM}
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM, "sasl.username": "admin",
                "sasl.password": "admin-secret"}
    scram = [arg for user in ("admin", "reader", "peeker") for arg in
             ("--add-scram", f"{MECHANISM}=[name={user},password={user}-secret]")]
    node = start_node(settings, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, client_security=security,
                      extra_args=scram)
    topic, group = "share-secured", "share-secured-g"
    create_topics(node, topic)
    admin_config = login(node, "admin").java_properties(tmp_path / "admin.properties")
    start_from_earliest(node.bootstrap, group, "--command-config", str(admin_config))
    assert produce_as(node, "admin", topic, 5) == list(range(5))
    grant(node, binding("reader", ResourceType.TOPIC, topic, AclOperation.READ),
          binding("reader", ResourceType.GROUP, group, AclOperation.DESCRIBE),
          binding("peeker", ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
          binding("peeker", ResourceType.GROUP, group, AclOperation.READ))
    reader = properties(login(node, "reader").java_properties(tmp_path / "reader.properties"))
    peeker = properties(login(node, "peeker").java_properties(tmp_path / "peeker.properties"))

    refused = ShareMember(node.bootstrap, topic, group, count=5, timeout_ms=30_000, **reader)
    assert refused.wait(timeout=90) == 2, refused.output()
    [error] = refused.errors()
    assert error.startswith("ERROR org.apache.kafka.common.errors.GroupAuthorizationException"), error
    assert refused.deliveries() == []
    reset = share_groups(node.bootstrap, "--command-config", str(tmp_path / "reader.properties"), "--reset-offsets",
                         "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert "GroupAuthorizationException" in reset.stdout + reset.stderr, reset

    peeking = ShareMember(node.bootstrap, topic, group, count=5, timeout_ms=30_000, **peeker)
    assert peeking.wait(timeout=90) == 2, peeking.output()
    [error] = peeking.errors()
    assert error.startswith("ERROR org.apache.kafka.common.errors.TopicAuthorizationException"), error
    assert topic in error, error
    assert peeking.deliveries() == []

    grant(node, binding("reader", ResourceType.GROUP, group, AclOperation.READ))
    granted = ShareMember(node.bootstrap, topic, group, count=5, timeout_ms=60_000, **reader)
    assert granted.wait(timeout=120) == 0, (granted.output(), granted.stderr_tail())
    assert sorted(d.value for d in granted.deliveries()) == [f"{topic}-{i}" for i in range(5)]

    # --delete-offsets needs DELETE on the group: READ is not enough, and nothing is deleted.
    reader_config = str(tmp_path / "reader.properties")
    wait_until("the group to be empty", lambda: describe_state(node.bootstrap, group, "--command-config",
                                                               str(admin_config))["STATE"] == "Empty", timeout=30)
    delete = share_groups(node.bootstrap, "--command-config", reader_config, "--delete-offsets", "--group", group,
                          "--topic", topic)
    assert re.search(rf"\n{topic} +Error: Group authorization failed\.\n", delete.stdout), delete
    kept = share_groups_ok(node.bootstrap, "--command-config", str(admin_config), "--describe", "--group", group,
                           "--offsets")
    assert re.search(rf"\n{group} +{topic} +0 +5 ", kept), kept
    # DELETE on the group without READ on the topic (peeker has DESCRIBE only): that topic is
    # refused, and its offsets stay.
    grant(node, binding("peeker", ResourceType.GROUP, group, AclOperation.DELETE))
    peeker_config = str(tmp_path / "peeker.properties")
    no_read = wait_until("peeker's DELETE to apply", lambda: (lambda d: d if "Group authorization" not in d.stdout
                                                               else None)(
        share_groups(node.bootstrap, "--command-config", peeker_config, "--delete-offsets", "--group", group,
                     "--topic", topic)), timeout=30)
    assert re.search(rf"\n{topic} +Error: Topic authorization failed\.\n", no_read.stdout), no_read
    kept = share_groups_ok(node.bootstrap, "--command-config", str(admin_config), "--describe", "--group", group,
                           "--offsets")
    assert re.search(rf"\n{group} +{topic} +0 +5 ", kept), kept
    grant(node, binding("reader", ResourceType.GROUP, group, AclOperation.DELETE))
    deleted = wait_until("reader's DELETE to apply", lambda: (lambda d: d if "Successful" in d.stdout else None)(
        share_groups(node.bootstrap, "--command-config", reader_config, "--delete-offsets", "--group", group,
                     "--topic", topic)), timeout=30)
    assert re.search(rf"\n{topic} +Successful\n", deleted.stdout), deleted


def test_on_three_nodes_members_fetch_from_each_partitions_leader_and_process_every_record_once(cluster):
    """A 3-node cluster, a 3-partition topic at RF 3 whose leaders are spread over the nodes:
    the members heartbeat with the group's coordinator and fetch each partition from its leader
    (a node that does not lead a partition answers NOT_LEADER_OR_FOLLOWER with the leader's
    endpoint), and 3,000 records are each delivered once. Sluice only (the cluster fixture)."""
    nodes = cluster(SHARE_SETTINGS)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    topic, group = "share-three-nodes", "share-three-nodes-g"
    count = 3_000
    create_topic(bootstrap, topic, 3, replication_factor=3)
    start_from_earliest(bootstrap, group)
    members = start_members(4, bootstrap, topic, group)
    try:
        rows = wait_for_members(bootstrap, group, 4, timeout=90)
        assigned = Counter(p for r in rows for p in r["ASSIGNMENT"].split(":", 1)[1].split(","))
        assert sorted(assigned) == ["0", "1", "2"], rows
        produce_values(bootstrap, topic, values(count), partitions=3, batch=100)
        wait_for_total(members, count, timeout=180)
    finally:
        stop_members(members)
    got = [d for m in members for d in m.deliveries()]
    for m in members:
        assert not m.errors(), (m.name, m.errors())
    assert sorted(int(d.value) for d in got) == list(range(count)), Counter(d.value for d in got).most_common(3)
    assert {d.delivery_count for d in got} == {1}
    metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(topic, timeout=10)
    leaders = {p.leader for p in metadata.topics[topic].partitions.values()}
    assert len(leaders) == 3, f"the partitions' leaders are {leaders}: the members fetched from fewer nodes"


def java_hash_partition(group: str, partitions: int = 50) -> int:
    """The __consumer_offsets partition of `group` (Kafka's abs(String.hashCode) % partitions)."""
    h = 0
    for unit in group.encode("utf-16-be").hex(" ", 2).split():
        h = (h * 31 + int(unit, 16)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@pytest.mark.parametrize("victim", ["partition leader", "group coordinator"])
def test_a_killed_leader_or_coordinator_loses_no_acknowledgement_and_redelivers_only_records_in_flight(
        cluster, victim):
    """A 3-node cluster, one partition at RF 3, 3,000 records; one member acknowledges each
    record (commitSync after each poll). Mid-stream the partition's leader, or the node
    coordinating the group (chosen apart from the leader), is SIGKILLed. Every record is then
    delivered; none acknowledged before the kill comes again (the acknowledgements were stored
    with the group's coordinator before the member was answered), so the records delivered
    twice are among those in flight at the kill; and --describe --offsets, answered by the
    surviving coordinator, shows nothing left to deliver."""
    nodes = cluster({**SHARE_SETTINGS, "broker.session.timeout.ms": "3000"})
    bootstrap = ",".join(n.bootstrap for n in nodes)
    topic, count = "share-failover", 3_000
    create_topic(bootstrap, topic, 1, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    produce_values(bootstrap, topic, values(count), batch=50)
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    # FindCoordinator creates __consumer_offsets; its 50 partitions' leaders say who coordinates.
    def offsets_leaders():
        found = admin.list_topics("__consumer_offsets", timeout=10).topics.get("__consumer_offsets")
        ok = found is not None and len(found.partitions) == 50 and all(p.leader >= 0 for p in found.partitions.values())
        if ok:
            return {i: p.leader for i, p in found.partitions.items()}
        try:
            admin.describe_consumer_groups(["share-failover-probe"], request_timeout=10)["share-failover-probe"].result(15)
        except KafkaException:
            pass  # NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets is made
        return None

    leaders = wait_until("__consumer_offsets to have its leaders", offsets_leaders, timeout=30)
    # A group whose coordinator is not the partition's leader, so each kill hits one role only.
    group = next(g for g in (f"share-failover-{i}" for i in range(100)) if leaders[java_hash_partition(g)] != leader)
    start_from_earliest(bootstrap, group)
    killed = leader if victim == "partition leader" else leaders[java_hash_partition(group)]

    member = ShareMember(bootstrap, topic, group, sleep_ms=2, timeout_ms=170_000, client_id="survivor",
                         **{"max.poll.records": "200"})
    try:
        wait_until("a third of the records acknowledged", lambda: len(member.acknowledged()) >= count // 3 or None,
                   timeout=90, interval=0.1)
        acked_before = {d.value for d in member.acknowledged()}
        printed_before = len(member.deliveries())
        next(n for n in nodes if n.node_id == killed).kill()

        def all_delivered():
            fatal = [e for e in member.errors() if e.startswith("ERROR ")]
            assert not fatal, fatal
            return {d.value for d in member.deliveries()} >= set(values(count)) or None

        wait_until(f"every record delivered after the {victim} was killed", all_delivered, timeout=150, interval=0.2)
    finally:
        member.terminate()
    got = member.deliveries()
    times = Counter(d.value for d in got)
    again = sorted((v for v, n in times.items() if n > 1), key=int)
    assert not acked_before & set(again), \
        f"records acknowledged before the kill were delivered again: {sorted(acked_before & set(again), key=int)[:20]}"
    # In flight at the kill: at most group.share.partition.max.record.locks (2,000 by default).
    assert len(again) <= 2_000, f"{len(again)} records delivered twice"
    print(f"{victim} killed after {len(acked_before)} acknowledgements and {printed_before} deliveries; "
          f"{len(again)} records delivered twice")
    survivors = ",".join(n.bootstrap for n in nodes if n.node_id != killed)

    def described():
        try:
            rows = [r for r in describe_offsets(survivors, group) if r["TOPIC"] == topic]
        except AssertionError:
            return None  # the tool failed: a coordinator still moving after the kill; ask again
        return rows if len(rows) == 1 and rows[0]["LAG"] == "0" else None

    rows = wait_until(f"{group} to have nothing left to deliver, as the survivors describe it", described, timeout=90,
                      interval=1.0)
    assert rows[0]["START-OFFSET"] == str(count), rows


def test_the_console_shows_a_share_group_with_its_members_and_start_offset(start_node):
    """/api/cluster (the console's data) lists a share group as it lists consumer groups: its
    members with their partitions, and per partition the share-partition start offset with the
    records not yet done as lag. Sluice only."""
    from test_console import get_json

    node = start_node(SHARE_SETTINGS, metrics=True)
    topic, group = "share-console", "share-console-g"
    create_topic(node.bootstrap, topic, 1)
    start_from_earliest(node.bootstrap, group)
    produce_values(node.bootstrap, topic, values(50), batch=10)
    members = start_members(2, node.bootstrap, topic, group)
    try:
        wait_for_total(members, 50)

        def shown():
            groups = {g["group_id"]: g for g in get_json(f"{node.metrics_url}/api/cluster")["groups"]}
            view = groups.get(group)
            if view is None or len(view["members"]) != 2 or view["total_lag"] != 0:
                return None
            return view
        view = wait_until("the console to show the share group done", shown, 30, 0.5)
    finally:
        stop_members(members)
    assert (view["state"], view["protocol"]) == ("Stable", "share"), view
    assert [m["assignment"] for m in view["members"]] == [[{"topic": topic, "partitions": [0]}]] * 2, view
    [offset] = view["offsets"]
    assert (offset["topic"], offset["partition"], offset["committed"], offset["lag"]) == (topic, 0, 50, 0), offset
