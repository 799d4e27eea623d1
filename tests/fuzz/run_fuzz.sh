#!/bin/sh
# run_fuzz.sh TARGET SEEDS WORK CRASHES [libFuzzer flags...]: one short
# libFuzzer run, for meson test --suite fuzz (tests/fuzz/meson.build).
# The seeds (tests/fuzz/corpus/NAME) are copied into WORK, the build
# directory's corpus, which libFuzzer grows with what it finds, so the
# source tree is never written; an input that fails is saved in CRASHES.
set -eu
target=$1 seeds=$2 work=$3 crashes=$4
shift 4
mkdir -p "$work" "$crashes"
cp "$seeds"/* "$work"/
exec "$target" -artifact_prefix="$crashes/" "$@" "$work"
