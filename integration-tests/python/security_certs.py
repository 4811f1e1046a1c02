"""Test certificates for the security tests, made in-process with `cryptography` (keys and X.509
v3 certificates, which rustls requires) and turned into the stores operators make with the
usual tools: a PKCS12 keystore from `openssl pkcs12 -export`, a PKCS12 truststore and a JKS
keystore from Java's `keytool`.

    pki = Pki(tmp_dir)
    server = pki.server()                      # SAN DNS:localhost, IP:127.0.0.1
    alice = pki.client("alice")                # CN=alice,OU=eng,O=acme,C=US
    expired = pki.client("old", expired=True)
    rogue = pki.authority("rogue CA").client("mallory")   # a CA the broker does not trust
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEYTOOL = shutil.which("keytool")
OPENSSL = shutil.which("openssl")
# What every store in these tests is locked with.
STORE_PASSWORD = "store-secret"


def distinguished_name(cn: str, ou: str = "eng", o: str = "acme", c: str = "US") -> x509.Name:
    """`CN=<cn>,OU=eng,O=acme,C=US` as RFC 2253 (and Java, and Kafka's mapping rules) write it:
    the attributes are stored from the least specific (C) to the most (CN)."""
    return x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, c),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, o),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])


def _write_private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@dataclass
class Issued:
    """A certificate with its key, as PEM files: `cert` (the certificate then its CA's),
    `key` (unencrypted PKCS8), and `combined` (both in one file, as ssl.keystore.location
    of type PEM takes them)."""
    name: str
    certificate: x509.Certificate
    cert: Path
    key: Path
    combined: Path
    authority: "Authority"

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    @property
    def subject(self) -> str:
        return self.certificate.subject.rfc4514_string()

    def pkcs12_keystore(self, password: str = STORE_PASSWORD) -> Path:
        """The key and chain as a PKCS12 keystore, made as operators do with
        `openssl pkcs12 -export` (alias = the certificate's name)."""
        path = self.cert.with_name(f"{self.name}.keystore.p12")
        subprocess.run([OPENSSL, "pkcs12", "-export", "-in", str(self.cert), "-inkey", str(self.key),
                        "-name", self.name, "-out", str(path), "-passout", f"pass:{password}"],
                       check=True, capture_output=True, timeout=30)
        return path

    def jks_keystore(self, password: str = STORE_PASSWORD) -> Path:
        """The same key and chain in a JKS store (what `keytool -storetype JKS` writes), for the
        test that the broker refuses JKS."""
        source = self.pkcs12_keystore(password)
        path = self.cert.with_name(f"{self.name}.keystore.jks")
        subprocess.run([KEYTOOL, "-importkeystore", "-noprompt", "-srckeystore", str(source),
                        "-srcstoretype", "PKCS12", "-srcstorepass", password, "-destkeystore", str(path),
                        "-deststoretype", "JKS", "-deststorepass", password],
                       check=True, capture_output=True, timeout=60)
        return path


class Authority:
    """A self-signed test CA that issues server and client certificates into `directory`."""

    def __init__(self, directory: Path, name: str = "Sluice Test CA"):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.slug = name.lower().replace(" ", "-")
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme"),
                             x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.cert = self.directory / f"{self.slug}.pem"
        self.cert.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, file_name: str, subject: x509.Name, usage: x509.ObjectIdentifier,
              san: list[x509.GeneralName] | None = None, expired: bool = False) -> Issued:
        file_name = self._unused(file_name)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        if expired:
            valid = (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
        else:
            valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30))
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, data_encipherment=False,
                                         key_agreement=True, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        pem = certificate.public_bytes(serialization.Encoding.PEM)
        chain = pem + self.certificate.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        cert_path = self.directory / f"{file_name}.pem"
        cert_path.write_bytes(chain)
        key_path = _write_private(self.directory / f"{file_name}.key.pem", key_pem)
        combined = _write_private(self.directory / f"{file_name}.keystore.pem", chain + key_pem)
        return Issued(file_name, certificate, cert_path, key_path, combined, self)

    def _unused(self, file_name: str) -> str:
        """`file_name`, or with a number added if a certificate of that name exists: files a
        running broker or client reads are never rewritten behind its back."""
        name, n = file_name, 1
        while (self.directory / f"{name}.pem").exists():
            n += 1
            name = f"{file_name}-{n}"
        return name

    def server(self, file_name: str = "server", cn: str = "localhost") -> Issued:
        """A broker certificate for 127.0.0.1 and localhost (SAN), for server authentication."""
        san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme"),
                             x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        return self.issue(file_name, subject, ExtendedKeyUsageOID.SERVER_AUTH, san)

    def client(self, cn: str, expired: bool = False, file_name: str | None = None) -> Issued:
        """A client certificate `CN=<cn>,OU=eng,O=acme,C=US`, for client authentication."""
        name = file_name or f"{self.slug}-client-{cn}"
        return self.issue(name, distinguished_name(cn), ExtendedKeyUsageOID.CLIENT_AUTH, expired=expired)

    def pkcs12_truststore(self, password: str = STORE_PASSWORD) -> Path:
        """This CA as a trusted entry of a PKCS12 truststore, as `keytool -importcert` makes it
        (Java needs keytool's trusted-certificate marking; a bare openssl PKCS12 is not one)."""
        path = self.directory / f"{self.slug}.truststore.p12"
        path.unlink(missing_ok=True)
        subprocess.run([KEYTOOL, "-importcert", "-noprompt", "-alias", self.slug, "-file", str(self.cert),
                        "-keystore", str(path), "-storetype", "PKCS12", "-storepass", password],
                       check=True, capture_output=True, timeout=60)
        return path


class Pki:
    """The test CA (`ca`) with its directory; other authorities (untrusted ones) beside it."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.ca = Authority(self.directory)

    def authority(self, name: str) -> Authority:
        return Authority(self.directory, name)

    def server(self, file_name: str = "server", cn: str = "localhost") -> Issued:
        return self.ca.server(file_name, cn)

    def client(self, cn: str, expired: bool = False) -> Issued:
        return self.ca.client(cn, expired=expired)


def peer_certificate(der: bytes) -> x509.Certificate:
    """Parses what `SSLSocket.getpeercert(binary_form=True)` returns."""
    return x509.load_der_x509_certificate(der)
