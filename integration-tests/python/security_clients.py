"""How each client of the security tests reaches a secured listener, and what they do there.

A `Login` says it once (protocol, mechanism, user and password, certificates, an OAUTHBEARER
token) and writes it in each client's own words: librdkafka properties (confluent-kafka and
kcat `-X`), kafka-python keyword arguments, a Java client properties file. `JwtIssuer` makes
the RS256 tokens and the JWKS the broker checks them against.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from security_certs import STORE_PASSWORD, Issued

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
JAVA_LIB = Path(os.environ.get("SLUICE_JAVA_LIB", Path(__file__).resolve().parents[2] / ".java-lib"))
# Java's login modules per SASL mechanism.
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class Login:
    """One way in: `protocol` (Kafka's security.protocol) and what it needs."""
    protocol: str
    bootstrap: str
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca: Path | None = None  # PEM CA the client trusts
    client: Issued | None = None  # the client's certificate (mTLS)
    truststore: Path | None = None  # PKCS12, for Java
    keystore: Path | None = None  # PKCS12, for Java (mTLS)
    token: str | None = field(default=None, repr=False)  # OAUTHBEARER

    def but(self, **changes) -> "Login":
        return replace(self, **changes)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def librdkafka(self) -> dict[str, str]:
        """librdkafka properties (confluent-kafka; kcat -X) without the bootstrap servers.
        OAUTHBEARER tokens are given by confluent-kafka's `oauth_cb` (see `confluent`)."""
        conf = {"security.protocol": self.protocol}
        if self.tls:
            conf["ssl.ca.location"] = str(self.ca)
        if self.client is not None:
            conf["ssl.certificate.location"] = str(self.client.cert)
            conf["ssl.key.location"] = str(self.client.key)
        if self.sasl:
            conf["sasl.mechanism"] = self.mechanism
            if self.mechanism != "OAUTHBEARER":
                conf["sasl.username"] = self.username
                conf["sasl.password"] = self.password
        return conf

    def confluent(self, **extra) -> dict:
        """A confluent-kafka configuration."""
        conf = {"bootstrap.servers": self.bootstrap, "log_level": 3, **self.librdkafka(), **extra}
        if self.mechanism == "OAUTHBEARER":
            token, claims = self.token, jwt_claims(self.token)
            conf["oauth_cb"] = lambda _config: (token, float(claims["exp"]), claims["sub"])
        return conf

    def kafka_python(self, **extra) -> dict:
        """kafka-python keyword arguments."""
        kw = {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol}
        if self.tls:
            kw["ssl_cafile"] = str(self.ca)
        if self.client is not None:
            kw["ssl_certfile"] = str(self.client.cert)
            kw["ssl_keyfile"] = str(self.client.key)
        if self.sasl:
            kw["sasl_mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                kw["sasl_oauth_token_provider"] = _static_token_provider(self.token)
            else:
                kw["sasl_plain_username"] = self.username
                kw["sasl_plain_password"] = self.password
        return {**kw, **extra}

    def java_properties(self, path: Path) -> Path:
        """A client properties file (the Java tools' --command-config)."""
        lines = [f"security.protocol={self.protocol}"]
        if self.tls:
            lines += [f"ssl.truststore.location={self.truststore}", "ssl.truststore.type=PKCS12",
                      f"ssl.truststore.password={STORE_PASSWORD}"]
        if self.keystore is not None:
            lines += [f"ssl.keystore.location={self.keystore}", "ssl.keystore.type=PKCS12",
                      f"ssl.keystore.password={STORE_PASSWORD}", f"ssl.key.password={STORE_PASSWORD}"]
        if self.mechanism == "OAUTHBEARER":
            # Kafka's own OAuth login reads the token from a file URL (its FileJwtRetriever);
            # the JVM must allow that file (see `java_oauth_options`).
            token_file = self.java_token_file(path)
            token_file.write_text(self.token)
            lines += ["sasl.mechanism=OAUTHBEARER",
                      "sasl.login.callback.handler.class="
                      "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                      f"sasl.oauthbearer.token.endpoint.url={token_file.as_uri()}",
                      "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"]
        elif self.sasl:
            lines += [f"sasl.mechanism={self.mechanism}",
                      f'sasl.jaas.config={JAAS_MODULES[self.mechanism]} required '
                      f'username="{self.username}" password="{self.password}";']
        path.write_text("\n".join(lines) + "\n")
        return path

    @staticmethod
    def java_token_file(properties: Path) -> Path:
        return properties.with_suffix(".jwt")

    def java_oauth_options(self, properties: Path) -> tuple[str, ...]:
        """The JVM options that let Kafka's OAuth login read the token file (Kafka 4 allows no
        OAuth URL or file unless told)."""
        if self.mechanism != "OAUTHBEARER":
            return ()
        token_file = self.java_token_file(properties)
        return (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={token_file.as_uri()}",
                f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.files={token_file}")

    def kcat_args(self) -> list[str]:
        args = ["-b", self.bootstrap]
        for k, v in self.librdkafka().items():
            args += ["-X", f"{k}={v}"]
        return args


def _static_token_provider(token: str):
    from kafka.sasl.oauth import AbstractTokenProvider

    class StaticToken(AbstractTokenProvider):
        def token(self):
            return token

    return StaticToken()


# --- OAUTHBEARER: an RSA key, its JWKS, RS256 tokens -----------------------------------------

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_int(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def jwt_claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class JwtIssuer:
    """An identity provider in miniature: an RSA key with a key id, its public half as a JWKS
    document, and RS256-signed tokens."""

    def __init__(self, kid: str, issuer: str = "https://idp.sluice.test", audience: str = "sluice"):
        self.kid = kid
        self.issuer = issuer
        self.audience = audience
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict:
        numbers = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
                          "n": _b64url_int(numbers.n), "e": _b64url_int(numbers.e)}]}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def token(self, sub: str, lifetime_s: float = 3600, kid: str | None = None, **claims) -> str:
        """A token for `sub` expiring `lifetime_s` from now (negative: already expired)."""
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": kid or self.kid}
        body = {"sub": sub, "iss": self.issuer, "aud": self.audience, "iat": now - 60,
                "exp": int(now + lifetime_s), "jti": str(uuid.uuid4()), **claims}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(body).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"


# --- waiting and running ---------------------------------------------------------------------

def wait_until(what: str, cond, timeout: float = 30.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def log_lines(node, text: str) -> list[str]:
    """The lines of the node's log holding `text`."""
    return [line for line in node.log_path.read_text(errors="replace").splitlines() if text in line]


def wait_for_log(node, text: str, timeout: float = 15.0, after: int = 0) -> str:
    """Waits until the node's log has a line holding `text` (counting lines from `after`, a
    count taken earlier with `log_line_count`); returns it."""
    def found():
        lines = node.log_path.read_text(errors="replace").splitlines()[after:]
        return next((line for line in lines if text in line), None)
    return wait_until(f"the broker log line {text!r}", found, timeout)


def wait_for_log_lines(node, text: str, count: int, after: int = 0, timeout: float = 15.0) -> list[str]:
    """Waits until the node's log has `count` lines holding `text` after line `after`."""
    def found():
        lines = node.log_path.read_text(errors="replace").splitlines()[after:]
        matching = [line for line in lines if text in line]
        return matching if len(matching) >= count else None
    return wait_until(f"{count} broker log lines {text!r}", found, timeout)


def log_line_count(node) -> int:
    return len(node.log_path.read_text(errors="replace").splitlines())


def kcat(login: Login, *args: str, stdin: bytes | None = None, timeout: float = 60,
         check: bool = True) -> subprocess.CompletedProcess:
    cmd = [KCAT, *login.kcat_args(), "-X", "log_level=4", *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    if check:
        assert done.returncode == 0, \
            f"{cmd} exited {done.returncode}\nstderr:\n{done.stderr.decode(errors='replace')[-3000:]}"
    return done


def java(main_class: str, *args: str, stdin: str | None = None, timeout: float = 90,
         jvm_options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Runs one of Kafka's Java tools (the jars of scripts/java-lib.sh); the caller checks."""
    jars = sorted(JAVA_LIB.glob("*.jar"))
    assert jars, f"no Kafka jars in {JAVA_LIB}; scripts/test.sh fetches them with Maven"
    # Small, quickly started JVMs: two cores run the broker and the tool.
    cmd = ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", *jvm_options,
           "-cp", os.pathsep.join(str(j) for j in jars), main_class, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)


def java_ok(main_class: str, *args: str, **kwargs) -> str:
    done = java(main_class, *args, **kwargs)
    assert done.returncode == 0, f"{main_class} {args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# --- what each client does: produce, then consume in a group and commit ------------------------

def confluent_round_trip(login: Login, topic: str, group: str, count: int = 20) -> None:
    """confluent-kafka: produces `count` records (acks=all), consumes them back subscribed in
    `group`, commits synchronously, and reads the committed offset back."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    values = [f"{topic}-{i}".encode() for i in range(count)]
    errors = []
    producer = Producer(login.confluent(acks="all", error_cb=errors.append))
    delivered = []
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert producer.flush(30) == 0, f"records still queued; client errors: {errors}"
    assert delivered == list(range(count)), delivered
    consumer = Consumer(login.confluent(**{"group.id": group, "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False}))
    try:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        assert got == values, f"read {len(got)} of {count}: {got[:3]}"
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == count, committed
    finally:
        consumer.close()


def kafka_python_round_trip(login: Login, topic: str, group: str, count: int = 20) -> None:
    """kafka-python: the same as `confluent_round_trip`."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    values = [f"{topic}-{i}".encode() for i in range(count)]
    producer = KafkaProducer(**login.kafka_python(acks="all"))
    try:
        offsets = [producer.send(topic, v, partition=0).get(timeout=30).offset for v in values]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(count)), offsets
    consumer = KafkaConsumer(**login.kafka_python(group_id=group, auto_offset_reset="earliest",
                                                  enable_auto_commit=False, consumer_timeout_ms=1000))
    try:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += [r.value for r in consumer]
        assert got == values, f"read {len(got)} of {count}: {got[:3]}"
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == count
    finally:
        consumer.close()


def kcat_round_trip(login: Login, topic: str, group: str, count: int = 20) -> None:
    """kcat: produces `count` lines, reads them back as a balanced consumer (-G, librdkafka's
    auto-commit, whose final commit runs as kcat closes at the end of the partition), then
    reads the committed offset with confluent-kafka over the same login."""
    from confluent_kafka import Consumer, TopicPartition

    lines = [f"{topic}-{i}".encode() for i in range(count)]
    kcat(login, "-P", "-t", topic, "-p", "0", "-X", "acks=all", stdin=b"\n".join(lines) + b"\n")
    out = kcat(login, "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", "%s\n", topic).stdout
    assert out.splitlines() == lines
    check = Consumer(login.confluent(**{"group.id": group}))
    try:
        [committed] = check.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        check.close()
    assert committed.offset == count, committed
