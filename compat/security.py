#!/usr/bin/env python3
"""The security material of the compatibility matrix: run by compat/run.py with .venv's Python
(it needs `cryptography`), once per run, before the clusters start.

    .venv/bin/python compat/security.py OUT_DIR     # prints one JSON object on stdout

It makes, in OUT_DIR, with the security tests' own factories (integration-tests/python/
security_certs.py and security_clients.py):

- a test CA (`ca`, PEM), and the same CA as a PKCS12 truststore for Java (`truststore_p12`);
- the brokers' certificate for 127.0.0.1/localhost with its key in one PEM file (`server_keystore`,
  what the brokers' ssl.keystore.location reads);
- a client certificate, CN=compat-client, for mutual TLS: the chain (`client_cert`), its key
  (`client_key`), both in one PEM file (`client_keystore_pem`) and a PKCS12 keystore for Java
  (`client_keystore_p12`), every store locked with `store_password`;
- an RSA key's JWKS (`jwks`, what the brokers' sasl.oauthbearer.jwks.endpoint.url reads) and an
  RS256 token it signed for `token_sub` (`token`, also in the file `token_file`), valid two hours.

Everything else about the secured listeners (ports, users, passwords) is run.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration-tests/python"))

from security_certs import STORE_PASSWORD, Pki  # noqa: E402
from security_clients import JwtIssuer, jwt_claims  # noqa: E402

TOKEN_SUB = "compat-oauth"
AUDIENCE = "sluice"
ISSUER = "https://idp.sluice.test"
TOKEN_LIFETIME_S = 2 * 3600


def make(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    pki = Pki(out)
    server = pki.server()
    client = pki.client("compat-client")
    issuer = JwtIssuer(kid="compat-key-1", issuer=ISSUER, audience=AUDIENCE)
    jwks = issuer.write_jwks(out / "jwks.json")
    token = issuer.token(TOKEN_SUB, lifetime_s=TOKEN_LIFETIME_S)
    token_file = out / "token.jwt"
    token_file.write_text(token)
    return {
        "ca": str(pki.ca.cert),
        "truststore_p12": str(pki.ca.pkcs12_truststore()),
        "server_keystore": str(server.combined),
        "client_cert": str(client.cert),
        "client_key": str(client.key),
        "client_keystore_pem": str(client.combined),
        "client_keystore_p12": str(client.pkcs12_keystore()),
        "store_password": STORE_PASSWORD,
        "jwks": str(jwks),
        "audience": AUDIENCE,
        "issuer": ISSUER,
        "token": token,
        "token_file": str(token_file),
        "token_sub": TOKEN_SUB,
        "token_expires_s": jwt_claims(token)["exp"],
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: security.py OUT_DIR")
    print(json.dumps(make(Path(sys.argv[1]))))
