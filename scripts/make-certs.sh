#!/usr/bin/env bash
# Certificates and logins for docker-compose.secure.yml, made with openssl into ./secure/ (or
# the directory given), every file but the CA certificate readable by its owner only:
#
#   ca.pem                   a test CA (its key is used here and deleted)
#   sluice1.pem ...          each node's certificate (X.509 v3, SAN: its service name, localhost,
#                            127.0.0.1), the CA's, then its unencrypted key: ssl.keystore.location
#   users.env                SLUICE_ADD_SCRAM: admin, orders-producer, orders-sink and analytics
#                            with random passwords (docker-compose.secure.yml's env_file)
#   <user>.properties        each user's librdkafka login (kcat -F, sluice-demo
#                            --security-config), trusting /etc/sluice-demo/ca.pem as mounted in
#                            the demo containers (on the host: -X ssl.ca.location=secure/ca.pem)
#
#   scripts/make-certs.sh [DIR]
#
# Run again, it makes new certificates and keeps the passwords: the brokers create a user only
# when the cluster has none of that name, so a password must not change while the cluster's
# volumes live. Delete the directory and `docker compose down -v` to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-secure}"
nodes=(sluice1 sluice2 sluice3)
users=(admin orders-producer orders-sink analytics)
days=825

umask 077
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# ECDSA P-256 keys, unencrypted PKCS8 ("BEGIN PRIVATE KEY"), as ssl.keystore.location takes them.
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc)

openssl req -x509 "${newkey[@]}" -keyout "$work/ca-key.pem" -out "$out/ca.pem" -days "$days" \
    -subj "/CN=Sluice compose test CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
chmod 644 "$out/ca.pem"

for node in "${nodes[@]}"; do
    openssl req -new "${newkey[@]}" -keyout "$work/$node-key.pem" -out "$work/$node.csr" \
        -subj "/CN=$node" 2>/dev/null
    # Without an extensions file `openssl x509 -req` writes version-1 certificates, which
    # rustls refuses. clientAuth: quorum members present it to each other (CONTROLLER:SSL).
    cat > "$work/$node.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:$node,DNS:localhost,IP:127.0.0.1
EOF
    openssl x509 -req -in "$work/$node.csr" -CA "$out/ca.pem" -CAkey "$work/ca-key.pem" \
        -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
        -extfile "$work/$node.ext" -out "$work/$node.pem" 2>/dev/null
    cat "$work/$node.pem" "$out/ca.pem" "$work/$node-key.pem" > "$out/$node.pem"
done

# A user's password: the one it has in its properties file, else a new random one.
password_of() {
    local file="$out/$1.properties"
    if [[ -f "$file" ]] && grep -q '^sasl.password=' "$file"; then
        sed -n 's/^sasl.password=//p' "$file" | head -n 1
    else
        openssl rand -hex 24
    fi
}

scram=()
for user in "${users[@]}"; do
    password="$(password_of "$user")"
    cat > "$out/$user.properties" <<EOF
# $user's login to the secured compose cluster (docker-compose.secure.yml). Keep it private.
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=$user
sasl.password=$password
ssl.ca.location=/etc/sluice-demo/ca.pem
EOF
    scram+=("SCRAM-SHA-512=[name=$user,password=$password]")
done
# Entries separated by ';' (no spaces), so every env-file reader takes the line as it is.
{
    echo "# The brokers' first users (SLUICE_ADD_SCRAM, read at every start). Keep it private."
    echo "SLUICE_ADD_SCRAM=$(IFS=';'; echo "${scram[*]}")"
} > "$out/users.env"

echo "wrote $out/: ca.pem, ${nodes[*]/%/.pem}, users.env and ${users[*]/%/.properties}"
