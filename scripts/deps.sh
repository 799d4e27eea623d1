# scripts/deps.sh - sourced by run.sh and test.sh: installs the Debian
# packages redlockd needs to build, test and run, if any is missing, named
# one by one even where another brings it, so that a bare Debian 12 (the
# containers suite runs run.sh on a debootstrap minbase) gets them all:
# libc6-dev for the C headers, redis-tools for redis-cli (run.sh's readiness
# check), systemd for systemd-analyze (the deploy suite verifies the unit);
# docker-compose, python3-yaml and python3-kubernetes only validate the
# deployment files; python3-jsonschema and npm serve the OpenAPI conformance
# test, npm to fetch the OpenAPI meta-schema (and the benchmark's Node.js,
# and the Dapr JavaScript SDK); iptables cuts a held stream's client off in
# the hold suite; libssl-dev is TLS to the masters, the openssl CLI makes the
# TLS tests' certificates; libgnutls28-dev is HTTPS on the HTTP listeners
# (libmicrohttpd's TLS is GnuTLS's: src/front/http_tls.c, client
# certificates, the health check's TLS client); libnghttp2-dev, libprotobuf-c-dev and
# protobuf-c-compiler build Dapr's gRPC API, python3-grpcio and
# python3-grpc-tools test it; libjansson-dev reads request bodies strictly
# (src/base/jsonio.c); clang and libclang-rt-14-dev build the libFuzzer targets
# (tests/fuzz); chromium, chromium-driver and python3-selenium load the
# dashboard (GET /ui) in a headless browser (tests/ui). The containers suite installs podman,
# podman-compose, runc, debootstrap, netavark, aardvark-dns, iptables and git
# itself (tests/containers/containers.py).
REDLOCKD_PACKAGES="gcc libc6-dev meson ninja-build pkg-config libmicrohttpd-dev libhiredis-dev
libcjson-dev libjansson-dev libssl-dev libgnutls28-dev openssl libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
libcriterion-dev libcurl4-openssl-dev redis-server redis-tools curl iptables python3
python3-yaml python3-kubernetes python3-jsonschema python3-grpcio python3-grpc-tools
docker-compose systemd clang libclang-rt-14-dev chromium chromium-driver python3-selenium"

install_deps() {
    local missing=()
    for p in $REDLOCKD_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    # npm by command: a Node.js from elsewhere (NodeSource) brings its own npm
    # and conflicts with Debian's package.
    command -v npm >/dev/null || missing+=(npm)
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; return 1; }
        sudo="sudo"
    fi
    # Wait for apt's lock if another apt-get holds it, rather than fail at once.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends "${missing[@]}"
}
