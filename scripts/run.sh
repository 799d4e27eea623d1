#!/usr/bin/env bash
# The run command: installs what is missing, builds redlockd, starts five
# independent Redis masters on 127.0.0.1:6381..6385 (data in ./state,
# appendonly yes with appendfsync always, so a restart of run.sh keeps
# every lock and the masters vote at once; noeviction) and runs redlockd on
# 127.0.0.1:8080 in the foreground.
# Ctrl-C stops redlockd and the masters. Extra arguments go to redlockd.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
install_deps
# Quiet unless it fails: meson and ninja print their errors on stdout.
quiet() { local out; out=$("$@" 2>&1) || { printf '%s\n' "$out" | tail -n 40 >&2; echo "failed: $*" >&2; return 1; }; }
[ -f build/build.ninja ] || quiet meson setup build
quiet ninja -C build

pids=()
cleanup() {
    trap - INT TERM EXIT
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

masters=""
for port in 6381 6382 6383 6384 6385; do
    if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
        echo "port $port is in use: stop what runs there first" >&2
        exit 1
    fi
    dir="state/redis-$port"
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$PWD/$dir" \
        --appendonly yes --appendfsync always --maxmemory 256mb --maxmemory-policy noeviction --save "" \
        --logfile "$PWD/$dir/redis.log" &
    pids+=("$!")
    masters="$masters${masters:+,}127.0.0.1:$port"
done
for port in 6381 6382 6383 6384 6385; do
    for _ in $(seq 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
done

build/src/redlockd --listen 127.0.0.1:8080 --masters "$masters" --log-format text "$@" &
pids+=("$!")
wait "${pids[-1]}"
