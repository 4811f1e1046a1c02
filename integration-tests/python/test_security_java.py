"""Kafka 4.4's Java client and CLI tools against a broker whose keystore and truststore are
PKCS12 files (an `openssl pkcs12 -export` keystore, a `keytool` truststore): the console
producer and a console consumer in a group over SASL_SSL (SCRAM-SHA-512, PLAIN, and
OAUTHBEARER with Kafka's own OAuth login reading a signed JWT from a file), SSL with a client
certificate, and SASL_PLAINTEXT (SCRAM-SHA-256); `kafka-topics` with --command-config;
`kafka-configs` creating, describing and deleting a SCRAM user; what the Java tools report for a
wrong password. JVM launches are the cost here: each test starts as few as it can."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition

from security_certs import KEYTOOL, STORE_PASSWORD, Pki
from security_clients import JAVA_LIB, JwtIssuer, Login, java, java_ok
from sluice_node import HOST, SaslError, SluiceNode, connect, sasl_login

pytestmark = [
    pytest.mark.skipif(not list(JAVA_LIB.glob("*.jar")), reason="no Kafka jars (scripts/java-lib.sh fetches them)"),
    pytest.mark.skipif(KEYTOOL is None, reason="keytool (a JDK) is needed for the Java stores"),
]

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    issuer = JwtIssuer(kid="java-idp-key")
    return issuer, issuer.write_jwks(tmp_path_factory.mktemp("jwks") / "jwks.json")


@pytest.fixture(scope="module")
def truststore(pki):
    return pki.ca.pkcs12_truststore()


@pytest.fixture(scope="module")
def node(start_module_node, pki, truststore, idp) -> SluiceNode:
    settings = {
        # PKCS12 on the broker: the keystore typed, the truststore's type told from the file.
        "ssl.keystore.location": str(pki.server().pkcs12_keystore()), "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.location": str(truststore), "ssl.truststore.password": STORE_PASSWORD,
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN,OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": idp[1].as_uri(),
        "sasl.oauthbearer.expected.audience": "sluice",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "inter.broker.listener.name": "SASL_SSL",
        "group.initial.rebalance.delay.ms": "0",
    }
    security = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca.cert), "sasl.mechanism": "PLAIN",
                "sasl.username": ADMIN[0], "sasl.password": ADMIN[1]}
    return start_module_node(
        settings, listeners={"SASL_SSL": "SASL_SSL", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        client_security=security,
        extra_args=["--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
                    "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]",
                    "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]"])


def java_login(node: SluiceNode, pki: Pki, truststore, scenario: str, user=ALICE, token=None) -> Login:
    if scenario == "SSL":
        client = pki.client("alice")
        return Login("SSL", node.bootstrap_for("SSL"), ca=pki.ca.cert, client=client, truststore=truststore,
                     keystore=client.pkcs12_keystore())
    listener, mechanism = scenario.split("/")
    return Login(listener, node.bootstrap_for(listener), mechanism, user[0], user[1], ca=pki.ca.cert,
                 truststore=truststore, token=token)


def committed(node: SluiceNode, group: str, topic: str) -> int:
    consumer = Consumer(node.client_config(**{"group.id": group}))
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    return tp.offset


@pytest.mark.parametrize("scenario", ["SASL_SSL/SCRAM-SHA-512", "SASL_SSL/PLAIN", "SSL", "SASL_PLAINTEXT/SCRAM-SHA-256",
                                      "SASL_SSL/OAUTHBEARER"])
def test_java_console_clients_produce_and_consume_in_a_group(node, pki, truststore, idp, tmp_path, scenario):
    token = idp[0].token("svc-java") if scenario.endswith("OAUTHBEARER") else None
    creds = java_login(node, pki, truststore, scenario, token=token)
    properties = creds.java_properties(tmp_path / "client.properties")
    config, jvm = str(properties), creds.java_oauth_options(properties)
    slug = scenario.replace("/", "-").lower()
    topic, group = f"java-{slug}", f"java-{slug}-group"
    lines = [f"{slug}-{i}" for i in range(50)]
    java_ok(PRODUCER, "--bootstrap-server", creds.bootstrap, "--topic", topic, "--command-config", config,
            stdin="\n".join(lines) + "\n", jvm_options=jvm)
    out = java_ok(CONSUMER, "--bootstrap-server", creds.bootstrap, "--topic", topic, "--group", group,
                  "--from-beginning", "--max-messages", str(len(lines)), "--timeout-ms", "30000",
                  "--command-config", config, jvm_options=jvm)
    assert out.splitlines() == lines
    # The console consumer auto-commits; its close commits what it printed.
    assert committed(node, group, topic) == len(lines)


def test_kafka_topics_with_a_command_config_and_the_java_client_refused_for_a_wrong_password(
        node, pki, truststore, tmp_path):
    good = java_login(node, pki, truststore, "SASL_SSL/SCRAM-SHA-512")
    config = str(good.java_properties(tmp_path / "good.properties"))
    out = java_ok(TOPICS, "--bootstrap-server", good.bootstrap, "--command-config", config, "--create",
                  "--topic", "java-secured", "--partitions", "2")
    assert "Created topic java-secured." in out, out
    wrong = good.but(password="not-alice-secret")
    done = java(TOPICS, "--bootstrap-server", wrong.bootstrap, "--command-config",
                str(wrong.java_properties(tmp_path / "wrong.properties")), "--list")
    assert done.returncode == 1, done
    # TopicCommand prints the SaslAuthenticationException's message, Kafka's own.
    assert done.stdout.splitlines() == [
        f"Error while executing topic command : {SCRAM_FAILED.format('SCRAM-SHA-512')}"], done.stdout + done.stderr


def test_kafka_configs_adds_describes_and_deletes_a_scram_user(node, pki, truststore, tmp_path):
    admin = java_login(node, pki, truststore, "SASL_SSL/SCRAM-SHA-512", user=ADMIN)
    config = str(admin.java_properties(tmp_path / "admin.properties"))
    base = ("--bootstrap-server", admin.bootstrap, "--command-config", config)
    plain_port = node.ports["SASL_PLAINTEXT"]

    out = java_ok(CONFIGS, *base, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=bob-secret]",
                  "--entity-type", "users", "--entity-name", "bob")
    assert "Completed updating config for user bob." in out, out
    with connect(HOST, plain_port) as sock:
        sasl_login(sock, "SCRAM-SHA-256", "bob", "bob-secret")

    out = java_ok(CONFIGS, *base, "--describe", "--entity-type", "users")
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192" in out, out
    assert "SCRAM credential configs for user-principal 'alice' are " in out, out

    out = java_ok(CONFIGS, *base, "--alter", "--delete-config", "SCRAM-SHA-256", "--entity-type", "users",
                  "--entity-name", "bob")
    assert "Completed updating config for user bob." in out, out
    with connect(HOST, plain_port) as sock, pytest.raises(SaslError) as refused:
        sasl_login(sock, "SCRAM-SHA-256", "bob", "bob-secret")
    assert refused.value.message == SCRAM_FAILED.format("SCRAM-SHA-256")
