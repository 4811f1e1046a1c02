"""ACLs end to end: one broker with Kafka's StandardAuthorizer on (`super.users=User:admin`,
deny by default) and a SASL_PLAINTEXT listener whose SCRAM-SHA-512 users come from
`--add-scram`, driven by Kafka's `kafka-acls` tool, confluent-kafka and kafka-python. Each test
has users of its own, so the tests share the broker; each asserts the error its client reports:
`kafka-acls` adding, listing and removing a binding (and refused for a user without ALTER on the
cluster); a user without ACLs (no produce, no topics listed, no group); DENY over ALLOW;
PREFIXED bindings; the super user; auto-creation needing CREATE; an idempotent producer with
WRITE alone (KIP-679); authorized operations (KIP-430); refusals in the broker log; a group
member with and without READ on its group.

The expectations were checked against Kafka 4.1 (SLUICE_BIN=scripts/kafka-as-sluice.py) except
the log line, which is Sluice's own target (docs/security.md, "Refusals are logged")."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType,
                                   ResourceType)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from security_clients import JAVA_LIB, Login, java, wait_for_log, wait_until
from sluice_node import SluiceNode

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
MECHANISM = "SCRAM-SHA-512"
# One user per test (and the admin), so that no test's ACLs change another's outcome.
USERS = ["admin", "alice", "nobody", "lurker", "fickle", "orders", "writer", "creator", "idem", "ops", "member",
         "outsider", "tuner"]
ON_KAFKA = os.environ.get("SLUICE_BIN", "").endswith("kafka-as-sluice.py")

TOPIC_AUTHORIZATION_FAILED = KafkaError.TOPIC_AUTHORIZATION_FAILED
GROUP_AUTHORIZATION_FAILED = KafkaError.GROUP_AUTHORIZATION_FAILED
CLUSTER_AUTHORIZATION_FAILED = KafkaError.CLUSTER_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def node(start_module_node) -> SluiceNode:
    settings = {"authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
                "sasl.enabled.mechanisms": MECHANISM, "group.initial.rebalance.delay.ms": "0"}
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM, "sasl.username": "admin",
                "sasl.password": "admin-secret"}
    scram = [arg for user in USERS for arg in ("--add-scram", f"{MECHANISM}=[name={user},password={user}-secret]")]
    return start_module_node(settings, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, client_security=security,
                             extra_args=scram, env={"RUST_LOG": "info,authorizer=debug"})


def login(node: SluiceNode, user: str) -> Login:
    return Login("SASL_PLAINTEXT", node.bootstrap, MECHANISM, user, f"{user}-secret")


def admin(node: SluiceNode, user: str = "admin") -> AdminClient:
    return AdminClient(login(node, user).confluent())


def binding(principal: str, resource: ResourceType, name: str, operation: AclOperation,
            permission: AclPermissionType = AclPermissionType.ALLOW,
            pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource, name, pattern, f"User:{principal}", "*", operation, permission)


def grant(node: SluiceNode, *bindings: AclBinding) -> None:
    """Creates the bindings as the admin and waits until DescribeAcls lists each."""
    client = admin(node)
    for future in client.create_acls(list(bindings)).values():
        future.result(timeout=30)
    for b in bindings:
        match = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                 b.permission_type)
        wait_until(f"{b} listed", lambda: client.describe_acls(match).result(timeout=30), timeout=15)


def create_topics(node: SluiceNode, *names: str) -> None:
    client = admin(node)
    for future in client.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=30)
    wait_until(f"{names} listed", lambda: set(names) <= set(client.list_topics(timeout=10).topics), timeout=15)


def topic_names(node: SluiceNode, user: str) -> set[str]:
    """The topics a Metadata request for all topics shows `user`."""
    return set(admin(node, user).list_topics(timeout=10).topics)


def produce(node: SluiceNode, user: str, topic: str, count: int = 1, **conf) -> list:
    """confluent-kafka: sends `count` records to partition 0 as `user`; per record its offset,
    or the KafkaError its delivery failed with."""
    producer = Producer(login(node, user).confluent(**{"message.timeout.ms": 15000, **conf}))
    outcomes = []
    for i in range(count):
        producer.produce(topic, f"{topic}-{i}".encode(), partition=0,
                         on_delivery=lambda err, msg: outcomes.append(err or msg.offset()))
    assert producer.flush(30) == 0, "records still queued"
    return outcomes


def consume(node: SluiceNode, user: str, topic: str, count: int, group: str, subscribe: bool,
            timeout: float = 20) -> tuple[list[bytes], KafkaError | None, Consumer]:
    """confluent-kafka as `user`: subscribed in `group`, or assigned partition 0 from the start;
    polls until `count` records or the first error. Returns the values, the error and the open
    consumer (the caller closes it)."""
    consumer = Consumer(login(node, user).confluent(**{"group.id": group, "auto.offset.reset": "earliest",
                                                       "enable.auto.commit": False}))
    if subscribe:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, 0)])
    values, deadline = [], time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            return values, msg.error(), consumer
        values.append(msg.value())
    return values, None, consumer


def consume_and_close(node, user, topic, count, group, subscribe=False) -> tuple[list[bytes], KafkaError | None]:
    values, error, consumer = consume(node, user, topic, count, group, subscribe)
    consumer.close()
    return values, error


def code(error: KafkaError | None) -> int | None:
    return None if error is None else error.code()


# --- kafka-acls ------------------------------------------------------------------------------

def kafka_acls(node: SluiceNode, tmp_path, user: str, *args: str):
    """Runs Kafka's `kafka-acls` as `user` (a --command-config file); the caller checks."""
    config = login(node, user).java_properties(tmp_path / f"{user}.properties")
    return java(ACL_COMMAND, "--bootstrap-server", node.bootstrap, "--command-config", str(config), *args)


@pytest.mark.skipif(not list(JAVA_LIB.glob("*.jar")), reason="no Kafka jars (scripts/java-lib.sh fetches them)")
def test_kafka_acls_adds_lists_and_removes_a_binding_and_refuses_a_user_without_alter_on_the_cluster(
        node, tmp_path):
    topic = ("--topic", "cli-ledger")
    entry = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    pattern = "ResourcePattern(resourceType=TOPIC, name=cli-ledger, patternType=LITERAL)"

    def lines(out: str) -> list[str]:
        return [line.strip() for line in out.splitlines() if line.strip()]

    def listed() -> list[str]:
        done = kafka_acls(node, tmp_path, "admin", "--list", *topic)
        assert done.returncode == 0, done.stdout + done.stderr
        return lines(done.stdout)

    done = kafka_acls(node, tmp_path, "admin", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                      *topic)
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines(done.stdout)[:2] == [f"Adding ACLs for resource `{pattern}`:", entry], done.stdout
    assert listed() == [f"Current ACLs for resource `{pattern}`:", entry]

    done = kafka_acls(node, tmp_path, "admin", "--remove", "--force", "--allow-principal", "User:alice",
                      "--operation", "Read", *topic)
    assert done.returncode == 0, done.stdout + done.stderr
    assert listed() == [], "the binding is still listed after --remove"

    # alice may not change ACLs: CreateAcls needs ALTER on the cluster.
    done = kafka_acls(node, tmp_path, "alice", "--add", "--allow-principal", "User:alice", "--operation", "All",
                      *topic)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Error while executing ACL command: org.apache.kafka.common.errors.ClusterAuthorizationException: " \
        in done.stdout, done.stdout + done.stderr
    assert admin(node).describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=30) == []


# --- deny by default -------------------------------------------------------------------------

def test_a_user_without_acls_cannot_produce_sees_no_topics_and_cannot_consume_in_a_group(node):
    create_topics(node, "ledger")
    assert produce(node, "admin", "ledger") == [0]

    [refused] = produce(node, "nobody", "ledger")
    assert code(refused) == TOPIC_AUTHORIZATION_FAILED, refused
    # Metadata for all topics leaves out what the user may not DESCRIBE.
    assert "ledger" in topic_names(node, "admin")
    assert topic_names(node, "nobody") == set()
    consumer = KafkaConsumer(**login(node, "nobody").kafka_python())
    try:
        assert consumer.topics() == set()
    finally:
        consumer.close()

    values, error = consume_and_close(node, "nobody", "ledger", 1, "nobody-group", subscribe=True)
    assert (values, code(error)) == ([], GROUP_AUTHORIZATION_FAILED), error


def test_a_deny_binding_beats_an_allow_binding(node):
    create_topics(node, "fickle-topic")
    assert produce(node, "admin", "fickle-topic") == [0]
    # librdkafka looks up its group's coordinator even when assigned: READ on the group too.
    grant(node, binding("fickle", ResourceType.TOPIC, "fickle-topic", AclOperation.READ),
          binding("fickle", ResourceType.GROUP, "fickle-reader", AclOperation.READ))
    values, error = consume_and_close(node, "fickle", "fickle-topic", 1, "fickle-reader")
    assert (values, error) == ([b"fickle-topic-0"], None)

    grant(node, binding("fickle", ResourceType.TOPIC, "fickle-topic", AclOperation.READ, AclPermissionType.DENY))
    values, error = consume_and_close(node, "fickle", "fickle-topic", 1, "fickle-reader")
    assert (values, code(error)) == ([], TOPIC_AUTHORIZATION_FAILED), error


def test_a_prefixed_binding_covers_the_topics_its_prefix_names_and_no_other(node):
    create_topics(node, "orders-eu", "payments")
    grant(node, binding("orders", ResourceType.TOPIC, "orders-", AclOperation.WRITE,
                        pattern=ResourcePatternType.PREFIXED))
    producer = KafkaProducer(**login(node, "orders").kafka_python(acks="all", max_block_ms=15000))
    try:
        assert producer.send("orders-eu", b"eu", partition=0).get(timeout=30).offset == 0
        with pytest.raises(TopicAuthorizationFailedError) as refused:
            producer.send("payments", b"pay", partition=0).get(timeout=30)
        assert "payments" in str(refused.value)
    finally:
        producer.close(timeout=10)
    assert topic_names(node, "orders") == {"orders-eu"}


def test_the_super_user_may_do_everything_without_acls(node):
    client = admin(node)
    create_topics(node, "admin-only")
    assert produce(node, "admin", "admin-only", 3) == [0, 1, 2]
    values, error, consumer = consume(node, "admin", "admin-only", 3, "admin-group", subscribe=True)
    try:
        assert (values, error) == ([b"admin-only-0", b"admin-only-1", b"admin-only-2"], None)
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition("admin-only", 0)], timeout=10)
        assert committed.offset == 3
    finally:
        consumer.close()
    cluster = client.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}
    client.delete_topics(["admin-only"])["admin-only"].result(timeout=30)
    wait_until("admin-only deleted", lambda: "admin-only" not in topic_names(node, "admin"), timeout=15)


def test_auto_creation_needs_create_on_the_cluster_or_the_topic(node):
    grant(node, binding("writer", ResourceType.TOPIC, "auto-writer", AclOperation.WRITE),
          binding("creator", ResourceType.TOPIC, "auto-creator", AclOperation.WRITE),
          binding("creator", ResourceType.TOPIC, "auto-creator", AclOperation.CREATE))
    [refused] = produce(node, "writer", "auto-writer")
    assert code(refused) == TOPIC_AUTHORIZATION_FAILED, refused
    assert "auto-writer" not in topic_names(node, "admin")

    assert produce(node, "creator", "auto-creator") == [0]
    assert "auto-creator" in topic_names(node, "admin")

    grant(node, binding("writer", ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))
    assert produce(node, "writer", "auto-writer") == [0]
    assert "auto-writer" in topic_names(node, "admin")


def test_an_idempotent_producer_needs_only_write_on_a_topic(node, tmp_path):
    """KIP-679: InitProducerId is allowed with IDEMPOTENT_WRITE on the cluster or WRITE on any
    topic; librdkafka sends no record before it has a producer id, and the Java producer is
    idempotent by default."""
    create_topics(node, "idem-topic")
    grant(node, binding("idem", ResourceType.TOPIC, "idem-topic", AclOperation.WRITE))
    assert produce(node, "idem", "idem-topic", 5, **{"enable.idempotence": True}) == [0, 1, 2, 3, 4]
    if list(JAVA_LIB.glob("*.jar")):
        config = login(node, "idem").java_properties(tmp_path / "idem.properties")
        done = java(CONSOLE_PRODUCER, "--bootstrap-server", node.bootstrap, "--topic", "idem-topic",
                    "--command-config", str(config), stdin="java-0\njava-1\njava-2\n")
        assert done.returncode == 0 and "Exception" not in done.stderr, done.stdout + done.stderr
        values, error = consume_and_close(node, "admin", "idem-topic", 8, "idem-check")
        assert (values[5:], error) == ([b"java-0", b"java-1", b"java-2"], None), (values, error)

    # Without WRITE anywhere the producer id is refused, a fatal error for the producer.
    errors: list[KafkaError] = []
    producer = Producer(login(node, "nobody").confluent(**{"enable.idempotence": True,
                                                           "error_cb": errors.append}))
    producer.produce("idem-topic", b"refused", partition=0)

    def fatal() -> list[KafkaError]:
        try:  # confluent-kafka raises a fatal error from poll too
            producer.poll(0.1)
        except KafkaException as e:
            errors.append(e.args[0])
        return [e for e in errors if e.fatal()]

    first = wait_until("a fatal producer error", fatal, timeout=15)[0]
    assert first.code() == CLUSTER_AUTHORIZATION_FAILED, errors


def test_authorized_operations_are_exactly_those_granted(node):
    """KIP-430: DescribeTopics (Metadata), DescribeCluster and DescribeGroups report the
    principal's operations: what is granted and what it implies."""
    create_topics(node, "ops-topic")
    grant(node, binding("ops", ResourceType.TOPIC, "ops-topic", AclOperation.READ),
          binding("ops", ResourceType.TOPIC, "ops-topic", AclOperation.ALTER_CONFIGS),
          binding("ops", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
          binding("ops", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
          binding("ops", ResourceType.GROUP, "ops-group", AclOperation.READ))
    # The group exists once the admin has committed an offset in it.
    committer = Consumer(login(node, "admin").confluent(**{"group.id": "ops-group"}))
    try:
        committer.commit(offsets=[TopicPartition("ops-topic", 0, 0)], asynchronous=False)
    finally:
        committer.close()

    client = admin(node, "ops")
    [topic] = client.describe_topics(TopicCollection(["ops-topic"]),
                                     include_authorized_operations=True).values()
    assert set(topic.result(timeout=30).authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}
    cluster = client.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE}
    [group] = client.describe_consumer_groups(["ops-group"], include_authorized_operations=True).values()
    assert set(group.result(timeout=30).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


@pytest.mark.skipif(ON_KAFKA, reason="Kafka's authorizer logger writes through log4j, not to the node log")
def test_a_refused_operation_is_logged_with_principal_operation_host_and_resource(node):
    create_topics(node, "lurker-topic")
    # DESCRIBE lets the producer find the topic; writing is what is refused.
    grant(node, binding("lurker", ResourceType.TOPIC, "lurker-topic", AclOperation.DESCRIBE))
    [refused] = produce(node, "lurker", "lurker-topic")
    assert code(refused) == TOPIC_AUTHORIZATION_FAILED, refused
    line = wait_for_log(node, "Principal = User:lurker is Denied")
    assert "DEBUG" in line and "authorizer" in line, line
    assert ("Principal = User:lurker is Denied operation = WRITE from host = 127.0.0.1 on resource = "
            "Topic:LITERAL:lurker-topic") in line, line


def test_a_group_member_needs_read_on_the_group_as_well_as_the_topic(node):
    create_topics(node, "members-topic")
    assert produce(node, "admin", "members-topic", 5) == list(range(5))
    grant(node, binding("member", ResourceType.TOPIC, "members-topic", AclOperation.READ),
          binding("member", ResourceType.GROUP, "members", AclOperation.READ),
          binding("outsider", ResourceType.TOPIC, "members-topic", AclOperation.READ))

    values, error, consumer = consume(node, "member", "members-topic", 5, "members", subscribe=True)
    try:
        assert (len(values), error) == (5, None), error
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition("members-topic", 0)], timeout=10)
        assert committed.offset == 5
    finally:
        consumer.close()

    values, error = consume_and_close(node, "outsider", "members-topic", 5, "outsiders", subscribe=True)
    assert (values, code(error)) == ([], GROUP_AUTHORIZATION_FAILED), error


def test_altering_a_topic_config_needs_alter_configs_on_it(node):
    create_topics(node, "tuned")
    grant(node, binding("tuner", ResourceType.TOPIC, "tuned", AclOperation.DESCRIBE_CONFIGS))
    tuner = admin(node, "tuner")
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)

    def retention() -> str:
        [future] = tuner.describe_configs([ConfigResource("topic", "tuned")]).values()
        return future.result(timeout=20)["retention.ms"].value

    before = retention()
    refusals = {
        "incremental_alter_configs": lambda: tuner.incremental_alter_configs(
            [ConfigResource("topic", "tuned", incremental_configs=[entry])]),
        "alter_configs": lambda: tuner.alter_configs(
            [ConfigResource("topic", "tuned", set_config={"retention.ms": "3600000"})]),
    }
    for call, alter in refusals.items():
        [future] = alter().values()
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=20)
        assert refused.value.args[0].code() == TOPIC_AUTHORIZATION_FAILED, (call, refused.value)
    assert retention() == before != "3600000"

    grant(node, binding("tuner", ResourceType.TOPIC, "tuned", AclOperation.ALTER_CONFIGS))
    [future] = refusals["incremental_alter_configs"]().values()
    future.result(timeout=20)
    assert wait_until("the new retention.ms", lambda: retention() == "3600000")
