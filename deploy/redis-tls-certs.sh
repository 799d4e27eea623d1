#!/bin/sh
# Certificates and an ACL file for deploy/compose.tls.yml (five TLS-only,
# ACL-only Redis masters and redlockd), made with the openssl CLI:
#   REDLOCKD_REDIS_PASSWORD=... deploy/redis-tls-certs.sh DIR [MASTER_NAME ...]
# writes into DIR (made if missing):
#   ca.crt ca.key          a CA of its own (ca.key is not mounted anywhere)
#   redis.crt redis.key    the masters' certificate, SANs: the master names
#                          (default redis-1 ... redis-5), localhost, 127.0.0.1
#   client.crt client.key  redlockd's client certificate (tls-auth-clients yes)
#   users.acl              the masters' ACL file: user redlockd with the
#                          password's SHA-256 only, the default user off
# For a laptop or CI: the keys are mode 0644 so that the containers' users
# (999 in Redis, 10001 in redlockd) can read them through a bind mount;
# elsewhere give each key to its reader only (e.g. Kubernetes Secrets with
# fsGroup, docs/deployment.md). The certificates are valid for 30 days.
set -eu
[ $# -ge 1 ] || { echo "usage: REDLOCKD_REDIS_PASSWORD=... $0 DIR [MASTER_NAME ...]" >&2; exit 2; }
[ -n "${REDLOCKD_REDIS_PASSWORD:-}" ] || { echo "$0: set REDLOCKD_REDIS_PASSWORD" >&2; exit 2; }
dir=$1
shift
[ $# -gt 0 ] || set -- redis-1 redis-2 redis-3 redis-4 redis-5
san="DNS:localhost,IP:127.0.0.1"
for n in "$@"; do san="DNS:$n,$san"; done

mkdir -p "$dir"
cd "$dir"
umask 022
key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
# shellcheck disable=SC2086  # $key is several words on purpose
{
    openssl req -x509 $key -keyout ca.key -out ca.crt -days 30 -subj /CN=redlockd-redis-ca
    openssl req $key -keyout redis.key -out redis.csr -subj /CN=redis
    printf 'subjectAltName=%s\n' "$san" > redis.ext
    openssl x509 -req -in redis.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out redis.crt \
        -days 30 -extfile redis.ext
    openssl req $key -keyout client.key -out client.csr -subj /CN=redlockd
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 30
} > openssl.log 2>&1 || { cat openssl.log >&2; exit 1; }
rm -f redis.csr redis.ext client.csr ca.srl openssl.log
chmod 600 ca.key
chmod 644 redis.key client.key

# Every command on every key and channel (redlockd's needs are listed in
# docs/deployment.md; with the key prefix lock:, ~lock:* ~redlockd#* is enough).
hash=$(printf '%s' "$REDLOCKD_REDIS_PASSWORD" | sha256sum | cut -d' ' -f1)
printf 'user default off\nuser redlockd on #%s ~* &* +@all\n' "$hash" > users.acl
chmod 644 users.acl
echo "$dir: ca.crt, redis.crt/key for $*, client.crt/key, users.acl"
