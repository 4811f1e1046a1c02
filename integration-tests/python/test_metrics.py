"""Prometheus metrics at GET /metrics (issue 13; the contract is the lead's metrics spec, the
names are Kafka's MBeans as the JMX exporter writes them, group lag as kafka-exporter does).

Every scrape goes through a strict parser of the text format (prometheus_text.py), so each test
also checks the format. Figures that settle asynchronously (follower offsets, gauges read at
scrape time, ISR changes) are polled with a deadline; a figure that settles on a wrong value
times out with the scrape lines that show it.

1. A produce workload moves the traffic counters by exactly what was sent, the offset gauges
   by exactly the records each partition holds, the request counter and latency histogram, and
   the cluster-shape gauges (leaders, controller, quorum leader, connections, memory pool) agree
   with Metadata.
2. Group lag (kafka-exporter's figures) is 0 after a group consumed everything, exactly M after
   M more records arrive while no member runs, and 0 again once a member catches up; the member
   gauge follows the member. An open transaction's records are not lag until committed.
3. A killed follower makes its partitions under-replicated (and under min ISR) on the leaders
   and counts ISR shrinks; once it is back, everything is in sync again and ISR expands counted.
4. The HTTP edges: content type, 404, 405, a 100 KB header line refused, Connection: close.
"""

from __future__ import annotations

import http.client
import math
import socket
import time
from collections import Counter
from urllib.parse import urlsplit

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from group_clients import Member, produce
from prometheus_text import Exposition, FormatError, family_of, parse

# Quick failure detection (a follower leaves the ISR after 2 s, a silent broker is fenced after
# 3 s), no first-rebalance delay, and a small __consumer_offsets so a 2-core machine starts it fast.
SETTINGS = {
    "replica.lag.time.max.ms": "2000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}
QUEUED_MAX_REQUEST_BYTES = 209_715_200  # set explicitly, so memorypoolavailable has a known ceiling

MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
MESSAGES_OUT = "kafka_server_brokertopicmetrics_messagesout_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
PRODUCE_REQUESTS = "kafka_server_brokertopicmetrics_totalproducerequests_total"
FETCH_REQUESTS = "kafka_server_brokertopicmetrics_totalfetchrequests_total"
REPLICATION_BYTES_IN = "kafka_server_brokertopicmetrics_replicationbytesin_total"
REPLICATION_BYTES_OUT = "kafka_server_brokertopicmetrics_replicationbytesout_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"
TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"
ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
ISR_EXPANDS = "kafka_server_replicamanager_isrexpands_total"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount"
LEADER_COUNT = "kafka_server_replicamanager_leadercount"
PARTITION_COUNT = "kafka_server_replicamanager_partitioncount"
ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
OFFLINE_PARTITIONS = "kafka_controller_kafkacontroller_offlinepartitionscount"
GLOBAL_PARTITIONS = "kafka_controller_kafkacontroller_globalpartitioncount"
GLOBAL_TOPICS = "kafka_controller_kafkacontroller_globaltopiccount"
PARTITION_UNDER_REPLICATED = "kafka_cluster_partition_underreplicated"
LOG_SIZE = "kafka_log_log_size"
LOG_END = "kafka_log_log_logendoffset"
LOG_START = "kafka_log_log_logstartoffset"
CURRENT_OFFSET = "kafka_topic_partition_current_offset"
OLDEST_OFFSET = "kafka_topic_partition_oldest_offset"
GROUP_OFFSET = "kafka_consumergroup_current_offset"
GROUP_LAG = "kafka_consumergroup_lag"
GROUP_LAG_SUM = "kafka_consumergroup_lag_sum"
GROUP_MEMBERS = "kafka_consumergroup_members"
RAFT_LEADER = "kafka_server_raftmetrics_current_leader"
RAFT_EPOCH = "kafka_server_raftmetrics_current_epoch"
RAFT_HW = "kafka_server_raftmetrics_high_watermark"
RAFT_LEO = "kafka_server_raftmetrics_log_end_offset"
RAFT_STATE = "kafka_server_raftmetrics_current_state"
CONNECTIONS = "kafka_server_socket_server_metrics_connection_count"
POOL_USED = "kafka_network_socketserver_memorypoolused"
POOL_AVAILABLE = "kafka_network_socketserver_memorypoolavailable"
BUILD_INFO = "sluice_build_info"


# --- HTTP and scraping -------------------------------------------------------------------------

def http_request(url: str, method: str = "GET", path: str = "/metrics", timeout: float = 5.0):
    """(status, headers with lower-case names, body bytes) of one request."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def scrape(node) -> Exposition:
    status, headers, body = http_request(node.metrics_url)
    assert status == 200, f"node {node.node_id}: GET /metrics answered {status}: {body[:500]!r}"
    text = body.decode("utf-8")
    try:
        return parse(text)
    except FormatError as e:
        raise AssertionError(f"node {node.node_id}: /metrics is not valid Prometheus text: {e}") from None


def scrape_all(nodes) -> dict[int, Exposition]:
    return {n.node_id: scrape(n) for n in nodes}


def excerpt(scrapes: dict[int, Exposition], *prefixes: str) -> str:
    out = []
    for node_id, e in sorted(scrapes.items()):
        out.append(f"  node {node_id}:")
        for p in prefixes:
            lines = e.lines(p)
            out.extend(f"    {line}" for line in lines)
            if not lines:
                out.append(f"    (no {p}*)")
    return "\n".join(out)


def total(scrapes: dict[int, Exposition], name: str, **labels) -> float:
    return sum(e.total(name, **labels) for e in scrapes.values())


def per_partition(scrapes: dict[int, Exposition], name: str, **labels) -> dict[int, list[tuple[int, float]]]:
    """partition -> [(node id, value)] over every node's series `name{labels, partition}`."""
    out: dict[int, list[tuple[int, float]]] = {}
    for node_id, e in scrapes.items():
        for s in e.series(name, **labels):
            out.setdefault(int(s.label_dict["partition"]), []).append((node_id, s.value))
    return out


def eventually(what: str, check, timeout: float = 30.0, interval: float = 0.1):
    """Polls `check()` -> (problems, result) until `problems` is empty; returns `result`. On the
    deadline fails with the last problems (each should carry the scrape lines that show it). A
    scrape refused at the socket (a node still starting) counts as not yet."""
    deadline = time.monotonic() + timeout
    last: list[str] = ["never checked"]
    while True:
        try:
            problems, result = check()
            if not problems:
                return result
            last = problems
        except (OSError, http.client.HTTPException) as e:
            last = [f"scrape failed: {e!r}"]
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}:\n" + "\n".join(last))
        time.sleep(interval)


def cluster_metadata(admin: AdminClient):
    """(topics, partitions, replicas) of all topics, internal ones included, as Metadata says."""
    md = admin.list_topics(timeout=10)
    topics = len(md.topics)
    partitions = sum(len(t.partitions) for t in md.topics.values())
    replicas = sum(len(p.replicas) for t in md.topics.values() for p in t.partitions.values())
    return md, topics, partitions, replicas


def create(admin: AdminClient, name: str, partitions: int, rf: int, **config: str) -> None:
    admin.create_topics([NewTopic(name, partitions, rf, config=config)], request_timeout=30)[name].result(timeout=40)

    def led():
        t = admin.list_topics(name, timeout=10).topics[name]
        bad = [p for p in t.partitions.values() if p.leader < 0 or len(p.isrs) != rf]
        return ([f"{name}: {len(t.partitions)} partitions, not led or not fully in sync: "
                 f"{[(p.id, p.leader, p.isrs) for p in bad]}"] if bad or len(t.partitions) != partitions else []), t

    eventually(f"every partition of {name} has a leader and a full ISR", led)


def values(n: int, size: int, prefix: str) -> list[bytes]:
    return [f"{prefix}-{i:06d}-".encode().ljust(size, b"x") for i in range(n)]


# --- 1. the workload moves the figures ---------------------------------------------------------

def test_metrics_move_with_the_workload(cluster):
    nodes = cluster({**SETTINGS, "queued.max.request.bytes": str(QUEUED_MAX_REQUEST_BYTES)}, metrics=True)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    ids = {n.node_id for n in nodes}
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    topic, n_records, payload = "metered", 300, 100
    create(admin, topic, 3, 3)

    before = scrape_all(nodes)
    produce_requests_before = total(before, REQUESTS, request="Produce")
    acked = produce(bootstrap, topic, values(n_records, payload, "m"), partitions=3, acks="all")
    held = Counter(p for p, _, _ in acked)  # records per partition
    assert sorted(held) == [0, 1, 2]

    def settled():
        s = scrape_all(nodes)
        md, n_topics, n_partitions, n_replicas = cluster_metadata(admin)
        problems = []

        def expect(ok: bool, what: str, *prefixes: str):
            if not ok:
                problems.append(f"{what}\n{excerpt(s, *prefixes)}")

        # Traffic: each record counted once, by its leader; followers' appends are replication.
        expect(total(s, MESSAGES_IN, topic=topic) == n_records,
               f"messagesin{{topic={topic}}} summed over nodes == {n_records}", MESSAGES_IN)
        expect(total(s, BYTES_IN, topic=topic) > n_records * payload,
               f"bytesin{{topic={topic}}} summed > {n_records * payload}", BYTES_IN)
        for node_id, e in s.items():
            for name in (MESSAGES_IN, BYTES_IN):
                all_topics = e.value(name)
                labelled = sum(x.value for x in e.series(name) if "topic" in x.label_dict)
                expect(all_topics is not None and all_topics >= labelled,
                       f"node {node_id}: unlabelled {name} present and >= its per-topic sum {labelled}", name)
        distinct_leaders = {p.leader for p in md.topics[topic].partitions.values()}
        expect(total(s, PRODUCE_REQUESTS, topic=topic) >= len(distinct_leaders),
               f"totalproducerequests{{topic={topic}}} >= one per leader ({len(distinct_leaders)})", PRODUCE_REQUESTS)
        # Nobody consumed: follower fetches are not consumer traffic.
        expect(total(s, BYTES_OUT, topic=topic) == 0 and total(s, MESSAGES_OUT, topic=topic) == 0,
               f"bytesout/messagesout{{topic={topic}}} are 0 with no consumer (replication is not bytes out)",
               BYTES_OUT, MESSAGES_OUT)
        expect(total(s, REPLICATION_BYTES_IN) >= 2 * n_records * payload,
               f"replicationbytesin summed >= 2 followers x {n_records * payload}", REPLICATION_BYTES_IN)
        expect(total(s, REPLICATION_BYTES_OUT) >= 2 * n_records * payload,
               f"replicationbytesout summed >= 2 followers x {n_records * payload}", REPLICATION_BYTES_OUT)

        # Offsets: every node hosts every partition; the high watermark is shown by leaders only.
        for node_id, e in s.items():
            leo = {int(x.label_dict["partition"]): x.value for x in e.series(LOG_END, topic=topic)}
            expect(leo == dict(held), f"node {node_id}: logendoffset{{topic={topic}}} per partition == {dict(held)}"
                   f" (sum {n_records})", LOG_END)
            start = {int(x.label_dict["partition"]): x.value for x in e.series(LOG_START, topic=topic)}
            expect(start == {0: 0, 1: 0, 2: 0}, f"node {node_id}: logstartoffset{{topic={topic}}} 0 for 0..2", LOG_START)
            size = {int(x.label_dict["partition"]): x.value for x in e.series(LOG_SIZE, topic=topic)}
            expect(sorted(size) == [0, 1, 2] and all(v >= held[p] * payload for p, v in size.items()),
                   f"node {node_id}: log size{{topic={topic}}} >= its records' payload for 0..2", LOG_SIZE)
        hw = per_partition(s, CURRENT_OFFSET, topic=topic)
        expect({p: [v for _, v in xs] for p, xs in hw.items()} == {p: [float(c)] for p, c in held.items()},
               f"current_offset{{topic={topic}}}: one series per partition (its leader's), == {dict(held)}, "
               f"sum {n_records}", CURRENT_OFFSET)
        leaders = {p.id: p.leader for p in md.topics[topic].partitions.values()}
        expect({p: xs[0][0] for p, xs in hw.items() if len(xs) == 1} == leaders,
               f"current_offset{{topic={topic}}} is shown by each partition's leader {leaders}", CURRENT_OFFSET)
        oldest = per_partition(s, OLDEST_OFFSET, topic=topic)
        expect({p: [v for _, v in xs] for p, xs in oldest.items()} == {0: [0.0], 1: [0.0], 2: [0.0]},
               f"oldest_offset{{topic={topic}}}: one series per partition, 0", OLDEST_OFFSET)

        # Requests and their latency.
        expect(total(s, REQUESTS, request="Produce") > produce_requests_before,
               f"requests{{request=Produce}} grew from {produce_requests_before}", REQUESTS)
        for api in ("Metadata", "ApiVersions", "CreateTopics"):
            expect(total(s, REQUESTS, request=api) > 0, f"requests{{request={api}}} > 0", REQUESTS)
        produce_counts = 0
        for node_id, e in s.items():
            buckets = sorted((float(x.label_dict["le"]), x.value) for x in e.series(TOTAL_TIME + "_bucket", request="Produce"))
            count = e.value(TOTAL_TIME + "_count", request="Produce")
            if not buckets and count is None:
                continue
            produce_counts += count or 0
            expect(bool(buckets) and buckets[-1][0] == math.inf and buckets[-1][1] == count,
                   f"node {node_id}: totaltimems_bucket{{request=Produce,le=+Inf}} == _count {count}", TOTAL_TIME)
            expect(all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])),
                   f"node {node_id}: Produce buckets non-decreasing in le", TOTAL_TIME)
            expect((e.value(TOTAL_TIME + "_sum", request="Produce") or -1) >= 0,
                   f"node {node_id}: totaltimems_sum{{request=Produce}} present, >= 0", TOTAL_TIME)
        expect(produce_counts >= len(distinct_leaders),
               f"totaltimems_count{{request=Produce}} summed >= {len(distinct_leaders)}", TOTAL_TIME + "_count")

        # Cluster shape, against Metadata.
        expect(total(s, LEADER_COUNT) == n_partitions,
               f"leadercount summed == {n_partitions} partitions of {sorted(md.topics)}", LEADER_COUNT)
        expect(total(s, PARTITION_COUNT) == n_replicas, f"partitioncount summed == {n_replicas} replicas", PARTITION_COUNT)
        expect(total(s, UNDER_REPLICATED) == 0, "underreplicatedpartitions 0 everywhere", UNDER_REPLICATED)
        up = per_partition(s, PARTITION_UNDER_REPLICATED, topic=topic)
        expect({p: [v for _, v in xs] for p, xs in up.items()} == {0: [0.0], 1: [0.0], 2: [0.0]},
               f"partition_underreplicated{{topic={topic}}}: one 0 per partition", PARTITION_UNDER_REPLICATED)
        active = {node_id: e.value(ACTIVE_CONTROLLER) for node_id, e in s.items()}
        expect(sorted(-1 if v is None else v for v in active.values()) == [0, 0, 1],
               f"activecontrollercount 1 on one node, 0 on the others: {active}", ACTIVE_CONTROLLER)
        raft_leaders = {node_id: e.value(RAFT_LEADER) for node_id, e in s.items()}
        leader = next(iter(raft_leaders.values()))
        expect(len(set(raft_leaders.values())) == 1 and leader in ids,
               f"raftmetrics_current_leader one node id on all: {raft_leaders}", RAFT_LEADER)
        expect(active.get(leader) == 1.0, f"the active controller is the quorum leader {leader}: {active}",
               ACTIVE_CONTROLLER, RAFT_LEADER)
        for node_id, e in s.items():
            states = {x.label_dict.get("state"): x.value for x in e.series(RAFT_STATE)}
            mine = "leader" if node_id == leader else "follower"
            expect(states.get(mine) == 1.0 and sum(states.values()) == 1,
                   f"node {node_id}: current_state{{state={mine}}} 1, the others 0", RAFT_STATE)
            hw_, leo_ = e.value(RAFT_HW), e.value(RAFT_LEO)
            expect(hw_ is not None and leo_ is not None and 0 < hw_ <= leo_,
                   f"node {node_id}: 0 < raft high_watermark <= log_end_offset", RAFT_HW, RAFT_LEO)
        epochs = {node_id: e.value(RAFT_EPOCH) for node_id, e in s.items()}
        expect(len(set(epochs.values())) == 1 and (next(iter(epochs.values())) or 0) > 0,
               f"raft current_epoch one value > 0 on all: {epochs}", RAFT_EPOCH)
        expect(total(s, GLOBAL_PARTITIONS) == n_partitions and total(s, GLOBAL_TOPICS) == n_topics,
               f"globalpartitioncount summed == {n_partitions}, globaltopiccount == {n_topics}",
               GLOBAL_PARTITIONS, GLOBAL_TOPICS)
        expect(total(s, OFFLINE_PARTITIONS) == 0, "offlinepartitionscount 0", OFFLINE_PARTITIONS)
        # The admin client holds connections to the brokers while this is scraped.
        expect(total(s, CONNECTIONS) > 0 and all("listener" in x.label_dict for e in s.values() for x in e.series(CONNECTIONS)),
               "connection_count{listener} > 0 somewhere while a client is connected", CONNECTIONS)
        for node_id, e in s.items():
            avail, used = e.value(POOL_AVAILABLE), e.value(POOL_USED)
            expect(avail is not None and 0 < avail <= QUEUED_MAX_REQUEST_BYTES and used is not None and used >= 0,
                   f"node {node_id}: 0 < memorypoolavailable <= queued.max.request.bytes, memorypoolused >= 0",
                   "kafka_network_socketserver_memorypool")
            build = e.series(BUILD_INFO)
            expect(len(build) == 1 and build[0].value == 1 and build[0].label_dict.get("version"),
                   f"node {node_id}: one sluice_build_info{{version}} 1", BUILD_INFO)
        return problems, s

    s = eventually("the figures show the produced records", settled, timeout=30)

    # The families are typed as the spec groups them.
    e = s[min(s)]
    kinds = {name: e.types.get(family_of(name, e.types)) for name in
             (MESSAGES_IN, BYTES_IN, REQUESTS, ISR_SHRINKS, TOTAL_TIME + "_bucket", LEADER_COUNT, LOG_END,
              ACTIVE_CONTROLLER, RAFT_LEADER, CONNECTIONS)}
    assert kinds == {MESSAGES_IN: "counter", BYTES_IN: "counter", REQUESTS: "counter", ISR_SHRINKS: "counter",
                     TOTAL_TIME + "_bucket": "histogram", LEADER_COUNT: "gauge", LOG_END: "gauge",
                     ACTIVE_CONTROLLER: "gauge", RAFT_LEADER: "gauge", CONNECTIONS: "gauge"}, kinds


# --- 2. group lag ------------------------------------------------------------------------------

def test_group_lag_rises_while_stopped_and_falls_after(cluster):
    nodes = cluster(SETTINGS, metrics=True)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    topic, group, first, more, payload = "lagged", "laggards", 60, 45, 50
    create(admin, topic, 3, 3)
    produce(bootstrap, topic, values(first, payload, "a"), partitions=3)

    def group_state(lag: int, committed: int, members: str):
        """A check: the group's series sit on one node, the coordinator; lag summed over its
        partitions == `lag`, spread evenly (records go to partition i % 3); committed offsets sum
        to `committed`; the member gauge is `members` ("0" or ">=1")."""
        def check():
            s = scrape_all(nodes)
            problems = []
            show = excerpt(s, "kafka_consumergroup_")
            holders = {node_id for node_id, e in s.items() if e.series(GROUP_LAG, consumergroup=group)
                       or e.series(GROUP_MEMBERS, consumergroup=group)}
            if len(holders) != 1:
                problems.append(f"the group's series on exactly one node (its coordinator), not {sorted(holders)}")
            lags = per_partition(s, GROUP_LAG, consumergroup=group, topic=topic)
            got = {p: [v for _, v in xs] for p, xs in lags.items()}
            if got != {p: [lag / 3] for p in range(3)}:
                problems.append(f"lag{{consumergroup={group},topic={topic}}} == {lag / 3} on each of 0..2 "
                                f"(sum {lag}), got {got}")
            lag_sum = [x.value for e in s.values() for x in e.series(GROUP_LAG_SUM, consumergroup=group, topic=topic)]
            if lag_sum != [lag]:
                problems.append(f"lag_sum{{consumergroup={group},topic={topic}}} == [{lag}], got {lag_sum}")
            offsets = total(s, GROUP_OFFSET, consumergroup=group, topic=topic)
            if offsets != committed or len(per_partition(s, GROUP_OFFSET, consumergroup=group, topic=topic)) != 3:
                problems.append(f"current_offset{{consumergroup={group}}} over 3 partitions sums to {committed}, got {offsets}")
            m = [x.value for e in s.values() for x in e.series(GROUP_MEMBERS, consumergroup=group)]
            if not (m == [0.0] if members == "0" else len(m) == 1 and m[0] >= 1):
                problems.append(f"members{{consumergroup={group}}} {members}, got {m}")
            return [f"{p}\n{show}" for p in problems], (s, holders)
        return check

    member = Member(bootstrap, group, topic, "lag-1")
    try:
        eventually(f"the member receives the first {first}", lambda: (
            [] if member.snapshot()[1] >= first else [f"received {member.snapshot()[1]}; errors {member.errors[-3:]}"], None), 60)
        s, holders = eventually("lag 0 while the member consumes", group_state(0, first, ">=1"), 30)
        # The series are on the coordinator.
        described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert holders == {described.coordinator.id}, (
            f"group series on {holders}, coordinator {described.coordinator.id}\n{excerpt(s, 'kafka_consumergroup_')}")
    finally:
        member.stop()
    assert member.commit_errors == [], member.commit_errors

    eventually("members 0 once the member left, lag still 0", group_state(0, first, "0"), 30)
    produce(bootstrap, topic, values(more, payload, "b"), partitions=3)
    eventually(f"lag == {more} while no member runs", group_state(more, first, "0"), 30)

    member = Member(bootstrap, group, topic, "lag-2")
    try:
        eventually(f"the new member receives the {more} new records", lambda: (
            [] if member.snapshot()[1] >= more else [f"received {member.snapshot()[1]}; errors {member.errors[-3:]}"], None), 60)
        s, _ = eventually("lag back to 0 once it caught up", group_state(0, first + more, ">=1"), 30)
        assert member.snapshot()[1] == more, "the new member re-read records before the committed offset"
    finally:
        member.stop()

    # Consumer traffic was counted (at least what was received), replication was not needed for that.
    assert total(s, MESSAGES_OUT, topic=topic) >= first + more, excerpt(s, MESSAGES_OUT)
    assert total(s, BYTES_OUT, topic=topic) >= (first + more) * payload, excerpt(s, BYTES_OUT)
    assert total(s, FETCH_REQUESTS, topic=topic) > 0, excerpt(s, FETCH_REQUESTS)
    for api in ("FindCoordinator", "JoinGroup", "SyncGroup", "OffsetCommit", "OffsetFetch", "Fetch"):
        assert total(s, REQUESTS, request=api) > 0, f"requests{{request={api}}}\n{excerpt(s, REQUESTS)}"


def test_group_lag_ends_at_the_last_stable_offset_while_a_transaction_is_open(start_node):
    """An open transaction's records are not lag: a read_committed consumer cannot read them until
    the commit. A committed offset inside the open transaction (only a read_uncommitted consumer
    gets there) is measured to the high watermark."""

    node = start_node({"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"},
                      metrics=True)
    admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})
    topic, group, first, open_records = "stable", "stable-readers", 10, 6
    create(admin, topic, 1, 1)
    produce(node.bootstrap, topic, values(first, 20, "a"), partitions=1)

    def commit(offset: int):
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])
        admin.alter_consumer_group_offsets([request], request_timeout=10)[group].result(timeout=15)

    def lag_is(expected: int):
        def check():
            e = scrape(node)
            got = [x.value for x in e.series(GROUP_LAG, consumergroup=group, topic=topic, partition="0")]
            return ([] if got == [expected] else
                    [f"lag == {expected}, got {got}\n{excerpt({node.node_id: e}, 'kafka_consumergroup_', LOG_END)}"]), None
        return check

    commit(first)
    eventually("lag 0 with everything committed", lag_is(0))

    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "stable-writer", "log_level": 3})
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in values(open_records, 20, "t"):
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0, "the transaction's records were not all acknowledged"
    eventually("the high watermark takes in the open transaction", lambda: (
        [] if [x.value for x in scrape(node).series(LOG_END, topic=topic, partition="0")] == [first + open_records]
        else ["log end offset not yet at the open transaction's end"], None))
    eventually("lag still 0: the open transaction is past the last stable offset", lag_is(0))

    commit(first + 2)
    eventually("a committed offset inside the open transaction is measured to the high watermark",
               lag_is(open_records - 2))

    commit(first)
    producer.commit_transaction(30)
    # The records and the commit marker are now below the last stable offset.
    eventually("lag takes in the committed transaction and its marker", lag_is(open_records + 1))


# --- 3. a follower down ------------------------------------------------------------------------

def test_under_replicated_while_a_follower_is_down(cluster):
    nodes = cluster(SETTINGS, metrics=True)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    topic = "fragile"
    # min.insync.replicas 3: with one replica down every partition is under min ISR as well.
    create(admin, topic, 3, 3, **{"min.insync.replicas": "3"})
    produce(bootstrap, topic, values(30, 50, "f"), partitions=3)

    def healthy(on):
        def check():
            s = scrape_all(on)
            problems = []
            if total(s, UNDER_REPLICATED) != 0 or total(s, UNDER_MIN_ISR) != 0:
                problems.append("underreplicatedpartitions and underminisrpartitioncount 0 everywhere\n"
                                + excerpt(s, UNDER_REPLICATED, UNDER_MIN_ISR))
            up = per_partition(s, PARTITION_UNDER_REPLICATED, topic=topic)
            if {p: [v for _, v in xs] for p, xs in up.items()} != {0: [0.0], 1: [0.0], 2: [0.0]}:
                problems.append(f"partition_underreplicated{{topic={topic}}} one 0 per partition\n"
                                + excerpt(s, PARTITION_UNDER_REPLICATED))
            return problems, s
        return check

    s = eventually("all in sync", healthy(nodes), 30)
    controller = next(node_id for node_id, e in s.items() if e.value(ACTIVE_CONTROLLER) == 1)
    md = admin.list_topics(topic, timeout=10).topics[topic]
    led = Counter(p.leader for p in md.partitions.values())
    # Not the controller (the quorum keeps its leader), and leading as few partitions as possible,
    # so most of its partitions lose a follower under a leader that stays.
    victim = min((n for n in nodes if n.node_id != controller), key=lambda n: led[n.node_id])
    assert any(p.leader != victim.node_id for p in md.partitions.values())
    survivors = [n for n in nodes if n is not victim]
    # Partitions of every topic with a replica on the victim (__consumer_offsets too, if it exists).
    all_md = admin.list_topics(timeout=10)
    hosted = sum(victim.node_id in p.replicas for t in all_md.topics.values() for p in t.partitions.values())
    assert hosted >= 3
    shrinks_before = total({k: v for k, v in s.items() if k != victim.node_id}, ISR_SHRINKS)

    victim.kill()

    def degraded():
        s = scrape_all(survivors)
        problems = []
        if total(s, UNDER_REPLICATED) != hosted:
            problems.append(f"underreplicatedpartitions summed over the live nodes == {hosted} (every partition "
                            f"with a replica on node {victim.node_id})\n" + excerpt(s, UNDER_REPLICATED))
        up = per_partition(s, PARTITION_UNDER_REPLICATED, topic=topic)
        if {p: [v for _, v in xs] for p, xs in up.items()} != {0: [1.0], 1: [1.0], 2: [1.0]}:
            problems.append(f"partition_underreplicated{{topic={topic}}} one 1 per partition on the live leaders\n"
                            + excerpt(s, PARTITION_UNDER_REPLICATED))
        if total(s, UNDER_MIN_ISR) != 3:
            problems.append("underminisrpartitioncount summed == 3 (ISR 2 < min.insync.replicas 3)\n"
                            + excerpt(s, UNDER_MIN_ISR))
        if total(s, ISR_SHRINKS) <= shrinks_before:
            problems.append(f"isrshrinks_total summed over the live nodes grew from {shrinks_before}\n"
                            + excerpt(s, ISR_SHRINKS))
        _, _, n_partitions, _ = cluster_metadata(admin)
        if total(s, LEADER_COUNT) != n_partitions:
            problems.append(f"leadercount summed over the live nodes == all {n_partitions} partitions\n"
                            + excerpt(s, LEADER_COUNT))
        if total(s, OFFLINE_PARTITIONS) != 0:
            problems.append("offlinepartitionscount 0 (2 replicas of 3 remain)\n" + excerpt(s, OFFLINE_PARTITIONS))
        return problems, s

    s = eventually(f"node {victim.node_id}'s partitions show under-replicated", degraded, 30)
    expands_before = total(s, ISR_EXPANDS)

    victim.spawn()
    victim.wait_ready()
    s = eventually(f"node {victim.node_id} back in every ISR", healthy(nodes), 40)

    def expanded():
        s = scrape_all(nodes)
        ok = total(s, ISR_EXPANDS) > expands_before
        return ([] if ok else [f"isrexpands_total summed grew from {expands_before}\n{excerpt(s, ISR_EXPANDS)}"]), s

    eventually("isrexpands_total counted the return", expanded, 10)


# --- 4. HTTP edges -----------------------------------------------------------------------------

def raw_exchange(host: str, port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, str]:
    """Sends `data` and reads until the server closes; (bytes received, how it ended:
    'eof', 'reset' or 'timeout'). A reset while sending counts as the server closing."""
    received = b""
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        deadline = time.monotonic() + timeout
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return received, "reset"
            except socket.timeout:
                return received, "timeout"
            if not chunk:
                return received, "eof"
            received += chunk


def test_http_edges(start_node):
    node = start_node(metrics=True)
    u = urlsplit(node.metrics_url)

    # The HTTP server may bind a moment after the Kafka listener answers.
    status, headers, body = eventually("the metrics server answers", lambda: ([], http_request(node.metrics_url)), 10)
    assert status == 200
    assert headers.get("content-type", "").startswith("text/plain; version=0.0.4"), headers
    assert headers.get("connection", "").lower() == "close", headers
    expo = parse(body.decode("utf-8"))
    assert expo.series(BUILD_INFO), body[:2000]

    status, _, body = http_request(node.metrics_url, path="/nope")
    assert status == 404, (status, body[:200])
    status, _, body = http_request(node.metrics_url, method="POST", path="/metrics")
    assert status == 405, (status, body[:200])

    # Connection: close is kept even when the client asks for keep-alive: the server closes.
    received, end = raw_exchange(u.hostname, u.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 200") and end == "eof", (received[:200], end)

    # A 100 KB header line: refused with a 4xx, or the connection closed without an answer.
    big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    received, end = raw_exchange(u.hostname, u.port, big)
    status_line = received.split(b"\r\n", 1)[0]
    refused = (status_line.startswith(b"HTTP/1.") and status_line[9:10] == b"4") or (received == b"" and end != "timeout")
    assert refused, f"a 100 KB header line got {status_line!r} ({len(received)} bytes, then {end})"

    # The node still serves /metrics afterwards.
    status, _, body = http_request(node.metrics_url)
    assert status == 200
    parse(body.decode("utf-8"))


def test_the_parser_refuses_malformed_text():
    """prometheus_text checks itself on import with canned text; this is that check, run as a test."""
    from prometheus_text import _self_check
    _self_check()
    try:
        parse('kafka_x{topic="a"} 1\nkafka_x{topic="a"} 1\n')
    except FormatError:
        return
    raise AssertionError("a duplicate series parsed")
