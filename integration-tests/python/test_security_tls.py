"""TLS listeners with real clients: mutual TLS (ssl.client.auth=required) for kcat,
confluent-kafka and kafka-python, producing and consuming in a group; client certificates the
broker refuses (expired, from a CA it does not trust, none at all) as each client reports them
and as the broker logs them; the wrong protocol on either kind of port; the client certificate's
name through ssl.principal.mapping.rules; a JKS keystore refused at start; and the server
certificate replaced on disk while clients stay connected."""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import struct
import subprocess
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from security_certs import KEYTOOL, Pki, peer_certificate
from security_clients import (KCAT, Login, confluent_round_trip, kafka_python_round_trip, kcat_round_trip,
                              log_line_count, wait_for_log)
from sluice_node import HOST, SluiceNode, _request, connect

TLS_HANDSHAKE_FAILED = "closing connection: the TLS handshake failed"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def mtls_security(pki: Pki, client) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca.cert),
            "ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)}


def tls_settings(pki: Pki, keystore=None, **more: str) -> dict[str, str]:
    return {"ssl.keystore.location": str(keystore or pki.server().combined),
            "ssl.truststore.location": str(pki.ca.cert), "ssl.client.auth": "required",
            "group.initial.rebalance.delay.ms": "0", **more}


@pytest.fixture(scope="module")
def node(start_module_node, pki) -> SluiceNode:
    """One broker: an SSL listener asking for client certificates (PEM keystore and
    truststore), and a PLAINTEXT one."""
    return start_module_node(tls_settings(pki), listeners={"SSL": "SSL", "PLAINTEXT": "PLAINTEXT"},
                             client_security=mtls_security(pki, pki.client("probe")))


@pytest.fixture(scope="module")
def alice(pki):
    return pki.client("alice")


def mtls_login(node: SluiceNode, pki: Pki, client) -> Login:
    return Login("SSL", node.bootstrap_for("SSL"), ca=pki.ca.cert, client=client)


ROUND_TRIPS = {"kcat": kcat_round_trip, "confluent-kafka": confluent_round_trip,
               "kafka-python": kafka_python_round_trip}


@pytest.mark.parametrize("client", list(ROUND_TRIPS))
def test_client_produces_and_consumes_in_a_group_over_mutual_tls(node, pki, alice, client):
    if client == "kcat" and KCAT is None:
        pytest.skip("kcat not installed (scripts/test.sh installs it)")
    ROUND_TRIPS[client](mtls_login(node, pki, alice), f"mtls-{client}", f"mtls-{client}-group")


class Collected(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def librdkafka_reports(conf: dict, wanted: str, timeout: float = 15.0) -> list[str]:
    """What a confluent-kafka client reports (error callback and log lines) while it tries to
    connect with `conf`, once one of them holds `wanted` (or the deadline passes)."""
    collected = Collected()
    logger = logging.getLogger(f"librdkafka.{id(collected)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(collected)
    admin = AdminClient({**conf, "logger": logger, "log_level": 6,
                         "error_cb": lambda e: collected.messages.append(e.str())})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(wanted in m for m in collected.messages):
        admin.poll(0.1)  # serves the error callback and the log lines
    return collected.messages


def python_tls_failure(node: SluiceNode, security: dict[str, str]) -> ssl.SSLError:
    """The TLS error Python's ssl (OpenSSL) reports for a handshake the broker refuses: in TLS
    1.3 the client sends its certificate last, so the broker's alert arrives on the first read
    (which sends nothing, so the broker closes with no unread input)."""
    with pytest.raises(ssl.SSLError) as refused:
        sock = connect(HOST, node.ports["SSL"], security)
        with sock:
            sock.recv(1)
    return refused.value


# The alert each client's OpenSSL reports (Python's is the system one; librdkafka's its own
# 3.5 build, which words alert 45 differently), and the reason the broker logs. librdkafka
# sends no certificate whose issuer is not among the CAs the broker names in its
# CertificateRequest, so for it the untrusted certificate is a missing one.
@pytest.mark.parametrize("case, python_alert, librdkafka_alert, reason", [
    ("expired", "sslv3 alert certificate expired", "ssl/tls alert certificate expired: SSL alert number 45",
     "invalid peer certificate: certificate expired"),
    ("untrusted", "tlsv1 alert unknown ca", "tlsv13 alert certificate required: SSL alert number 116",
     "invalid peer certificate: UnknownIssuer"),
    ("missing", "tlsv13 alert certificate required", "tlsv13 alert certificate required: SSL alert number 116",
     "peer sent no certificates"),
])
def test_a_refused_client_certificate_fails_the_handshake_for_the_client_and_in_the_broker_log(
        node, pki, case, python_alert, librdkafka_alert, reason):
    client = {"expired": lambda: pki.client("old-alice", expired=True),
              "untrusted": lambda: pki.authority("Rogue CA").client("mallory"),
              "missing": lambda: None}[case]()
    security = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca.cert)}
    if client is not None:
        security.update({"ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)})
    before = log_line_count(node)

    failure = python_tls_failure(node, security)
    assert python_alert in str(failure).lower(), failure
    line = wait_for_log(node, TLS_HANDSHAKE_FAILED, after=before)
    assert "listener=SSL" in line and reason in line, line

    reports = librdkafka_reports({"bootstrap.servers": node.bootstrap_for("SSL"), **security}, librdkafka_alert)
    assert any(librdkafka_alert in r for r in reports), reports
    # A refused handshake is never served: the SSL listener still serves a good certificate.
    with connect(HOST, node.ports["SSL"], mtls_security(pki, pki.client("alice"))) as ok:
        assert struct.unpack(">h", _request(ok, 18, 0, 2, b"")[:2]) == (0,)


@pytest.mark.skipif(KCAT is None, reason="kcat not installed (scripts/test.sh installs it)")
def test_a_plaintext_client_on_the_tls_port_is_told_and_the_broker_names_the_mistake(node):
    before = log_line_count(node)
    # kcat's librdkafka turns a connection that ends while it waits for ApiVersions into its
    # hint; a reset connection (unread input closed) would be "Connection reset by peer".
    done = subprocess.run([KCAT, "-b", node.bootstrap_for("SSL"), "-L", "-m", "1"], capture_output=True, timeout=30)
    assert done.returncode != 0
    assert (b"Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol "
            b"configuration (connecting to a SSL listener?)") in done.stderr, done.stderr
    line = wait_for_log(node, "closing connection: it sent plaintext to listener SSL, which speaks TLS", after=before)
    assert "WARN" in line, line
    # The broker reads what the client sent before it closes, so the client sees the
    # connection end, not a reset.
    ended = "Disconnected: connection closed by peer"
    reports = librdkafka_reports({"bootstrap.servers": node.bootstrap_for("SSL"), "security.protocol": "PLAINTEXT"},
                                 ended)
    assert any(ended in r and "in state APIVERSION_QUERY" in r for r in reports), reports


def test_a_tls_client_on_the_plaintext_port_is_told_and_the_broker_names_the_mistake(node, pki, alice):
    before = log_line_count(node)
    security = mtls_security(pki, alice)
    hint = "connecting to a PLAINTEXT broker listener?"
    reports = librdkafka_reports({"bootstrap.servers": node.bootstrap_for("PLAINTEXT"), **security}, hint)
    assert any("SSL handshake failed: Disconnected: SSL connection closed by peer: " + hint in r for r in reports), reports
    line = wait_for_log(node, "it sent a TLS handshake to listener PLAINTEXT, which is not a TLS listener",
                        after=before)
    assert "WARN" in line, line
    # Python's ssl sees the connection end in the middle of its handshake.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        connect(HOST, node.ports["PLAINTEXT"], security)


def test_ssl_principal_mapping_rules_read_the_certificate_name_as_kafka_writes_it(start_node, pki):
    """With one rule that matches only CN=alice,OU=eng,O=acme,C=US exactly (RFC 2253, most
    specific first, as Java writes it) and no DEFAULT, alice gets in and bob is refused."""
    alice, bob = pki.client("alice"), pki.client("bob")
    rules = "RULE:^CN=(alice),OU=eng,O=acme,C=US$/$1/L"
    node = start_node(tls_settings(pki, **{"ssl.principal.mapping.rules": rules}), listeners={"SSL": "SSL"},
                      client_security=mtls_security(pki, alice))
    before = log_line_count(node)
    with pytest.raises(ConnectionError):
        with connect(HOST, node.port, mtls_security(pki, bob)) as sock:
            _request(sock, 18, 0, 1, b"")
    line = wait_for_log(node, "no ssl.principal.mapping.rules rule matches the client certificate's name", after=before)
    assert "listener=SSL" in line, line
    confluent_round_trip(mtls_login(node, pki, alice).but(bootstrap=node.bootstrap), "mapped", "mapped-group", 5)


@pytest.mark.skipif(KEYTOOL is None, reason="keytool (a JDK) is needed to write a JKS store")
@pytest.mark.parametrize("store_type", ["", "JKS"])
def test_a_jks_keystore_is_refused_at_start_with_how_to_convert_it(pki, tmp_path, store_type):
    jks = pki.server("jks-server").jks_keystore()
    assert jks.read_bytes()[:4] == b"\xfe\xed\xfe\xed", "keytool did not write a JKS store"
    settings = {"ssl.keystore.location": str(jks), "ssl.keystore.password": "store-secret"}
    if store_type:
        settings["ssl.keystore.type"] = store_type
    node = SluiceNode(settings, listeners={"SSL": "SSL"})
    node.choose_ports()
    node.spawn()
    try:
        code = node.proc.wait(timeout=30)
        log = node.log_path.read_text(errors="replace")
        assert code != 0, log
        assert "keytool -importkeystore" in log and "-deststoretype PKCS12" in log, log
    finally:
        node.kill()
        shutil.rmtree(node.work_dir, ignore_errors=True)


def served_certificate(node: SluiceNode, security: dict[str, str]):
    with connect(HOST, node.port, security) as sock:
        return peer_certificate(sock.getpeercert(binary_form=True))


def test_a_replaced_server_certificate_serves_new_connections_while_established_ones_carry_on(
        start_node, pki, alice, tmp_path):
    first = pki.server("rotating-1", cn="broker-before")
    second = pki.server("rotating-2", cn="broker-after")
    keystore = tmp_path / "live.keystore.pem"
    shutil.copy(first.combined, keystore)
    security = mtls_security(pki, alice)
    node = start_node(tls_settings(pki, keystore, **{"ssl.reload.check.interval.ms": "100"}),
                      listeners={"SSL": "SSL"}, client_security=security)
    pid = node.proc.pid
    established = connect(HOST, node.port, security)
    assert peer_certificate(established.getpeercert(binary_form=True)).serial_number == first.serial
    login = mtls_login(node, pki, alice).but(bootstrap=node.bootstrap)
    producer = Producer(login.confluent(acks="all"))
    offsets = []

    def produce(value: bytes) -> None:
        producer.produce("rotation", value, partition=0, on_delivery=lambda err, msg: offsets.append(err or msg.offset()))
        assert producer.flush(15) == 0

    produce(b"before")

    # Replaced as operators (and cert-manager) do: a new file renamed over the old.
    before = log_line_count(node)
    staged = keystore.with_suffix(".staged")
    shutil.copy(second.combined, staged)
    os.replace(staged, keystore)
    wait_for_log(node, "certificate files changed: new TLS connections use the new certificates", after=before)
    fresh = served_certificate(node, security)
    assert (fresh.serial_number, fresh.subject.rfc4514_string()) == (second.serial, second.subject)

    # The established connection and the producer's carry on; the broker never restarted.
    err, = struct.unpack(">h", _request(established, 18, 0, 7, b"")[:2])
    assert err == 0
    established.close()
    produce(b"after")
    assert offsets == [0, 1]
    assert node.proc.pid == pid and node.is_running()

    # A file that does not load is logged, and the certificate in force kept.
    before = log_line_count(node)
    staged.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    os.replace(staged, keystore)
    line = wait_for_log(node, "certificate files changed but do not load", after=before)
    assert "keeping the previous certificates" in line, line
    assert served_certificate(node, security).serial_number == second.serial
    producer.flush(5)
