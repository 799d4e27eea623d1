#!/usr/bin/env bash
# The test command: installs what is missing, builds redlockd with warnings as
# errors (also the way the container image does: release, -O3, no tests), and
# runs the unit, integration and deploy (engine-free checks of the compose,
# container, Kubernetes and systemd files) suites twice, once plain and once
# under AddressSanitizer + UndefinedBehaviorSanitizer, the fault-injection
# suites (short form) under the sanitizers, the containers suite once (the image built
# and docker-compose.yml run with podman; run.sh on a bare Debian 12), and
# the libFuzzer targets (tests/fuzz: request bodies, the gRPC decoder, the
# client's parsers; clang, ASan + UBSan) for 8 seconds each from their seed
# corpora. The tests start their own redis-server masters on free loopback
# ports and stop them again.
#
# The long runs are separate: meson test -C build --suite faults-long, and
# meson test -C build --suite nemesis-long (docs/safety.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
install_deps

run_suites() {   # build-dir, meson setup options...
    local dir=$1; shift
    [ -f "$dir/build.ninja" ] || meson setup "$dir" "$@"
    ninja -C "$dir"
    # One test binary at a time (each runs two tests at once): with more, five
    # masters per test and the sanitizers on two cores made masters miss the
    # 50 ms vote deadline now and then (a no_quorum in locks::, seen in CI).
    meson test -C "$dir" --suite unit --suite integration --suite deploy --print-errorlogs --num-processes 1
}

run_faults() {   # build-dir
    local dir=$1
    # One at a time: the fault scenarios measure latency and need both cores.
    rm -f "$dir/faults-table.md"
    meson test -C "$dir" --suite faults --print-errorlogs --num-processes 1
    echo "fault scenarios ($dir):"
    cat "$dir/faults-table.md"
}

echo "== release build, as deploy/Dockerfile builds (-O3 warns where -O2 does not; werror stays on)"
[ -f build-release/build.ninja ] || meson setup build-release --buildtype=release -Dtests=false
ninja -C build-release
echo "== plain build"
run_suites build
# The benchmark runs one second per level as a smoke test, never to judge speed.
meson test -C build --suite bench --print-errorlogs
# A starved redlockd (a CPU quota as Kubernetes sets it, SIGSTOP pauses,
# 10,000 leases, bursts beside 2,200 of them) marks no healthy master down:
# alone, in the plain build (about 75 s).
meson test -C build --suite starved --print-errorlogs --num-processes 1
# The image and the compose file, run for real with podman (root), then
# run.sh and the README's curl lines in a bare Debian 12 container (run.sh
# installs about 500 packages there: 2.5 to 4 minutes every time; the rest
# about 2.5 minutes the first time, half a minute with its images cached).
meson test -C build --suite containers --print-errorlogs
echo "containers (build):"
cat build/tests/containers/containers-report.md
echo "== sanitizer build (address, undefined)"
run_suites build-asan -Db_sanitize=address,undefined -Db_lundef=false
# The fault suites run once, in the sanitizer build: the same scenarios and
# checks, with memory errors caught on the failure paths, at about half the
# speed (the latency bounds hold there too). The plain build runs them with
# meson test -C build --suite faults (about 4 minutes).
run_faults build-asan
# The seeded nemesis (tests/nemesis): every operation beside every fault on
# three instances, judged by its checker, and each property's negative
# control; the short form, fixed seeds and one random seed (printed), under
# the sanitizers. The long form is the suite nemesis-long (docs/safety.md).
meson test -C build-asan --suite nemesis --print-errorlogs --num-processes 1
cat build-asan/tests/nemesis/nemesis-table.md 2>/dev/null || true
echo "== fuzz build (libFuzzer, clang, address + undefined)"
# Only the libraries the targets test are built (ninja's "fuzz" target), not
# the daemon; each target runs 8 s over a copy of its seeds in the build
# directory (tests/fuzz/meson.build, docs/contributing.md "Fuzzing").
[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link
ninja -C build-fuzz fuzz
meson test -C build-fuzz --no-rebuild --suite fuzz --print-errorlogs --num-processes 1
echo "all suites passed"
