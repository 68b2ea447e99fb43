#!/usr/bin/env bash
# scripts/test.sh — install what the tests need, then run them all.
#
# Usage: scripts/test.sh [--no-install]
#   Runs: cargo fmt check, cargo clippy (warnings are errors), every unit,
#   integration and doc test in the workspace, the stage-timing tests with
#   their feature, the fuzz seed checks, an
#   independent NFSv3 client (libnfs-utils) against the target over TCP
#   (tests/libnfs/run.sh), and compiles the benches.
#   Longer suites have their own scripts (scripts/fuzz.sh, ...); .ci/run calls them.
set -euo pipefail
cd "$(dirname "$0")/.."

install=1
[ "${1:-}" = "--no-install" ] && install=0

if [ "$install" = 1 ]; then
    # C toolchain, cmake and libclang for the -sys crates (scripts/build-deps.sh).
    bash scripts/build-deps.sh
    # An independent NFSv3 client over TCP for tests/libnfs/run.sh.
    if ! command -v nfs-cp >/dev/null; then
        if [ "$(id -u)" = 0 ]; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends libnfs-utils >/dev/null
        else
            echo "test.sh: please install: libnfs-utils" >&2
        fi
    fi
    rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy 2>/dev/null || true
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== cargo test"
mkdir -p target
cargo test --workspace --quiet 2>&1 | tee target/test.log
# Stage timing (dataplane::stages) is compiled out of every normal build: its
# own tests, and clippy over the engines built with it, run with the feature.
echo "== stage timing (feature stage-timing)"
cargo clippy -p rpcrdma-dataplane --features stage-timing --lib --quiet -- -D warnings
cargo test -p rpcrdma-dataplane --features stage-timing --lib --test engine_shm --quiet stage 2>&1 | tee -a target/test.log
# Loop timing (reactor::loop_timing) likewise.
echo "== loop timing (feature loop-timing)"
cargo clippy -p rpcrdma-reactor --features loop-timing --all-targets --quiet -- -D warnings
cargo test -p rpcrdma-reactor --features loop-timing --lib --quiet loop_timing 2>&1 | tee -a target/test.log
# The fuzz targets' checks over every seed input and its truncations, on stable
# (the coverage-guided runs are scripts/fuzz.sh).
echo "== fuzz seed checks"
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets --quiet -- -D warnings
cargo test --manifest-path fuzz/Cargo.toml --quiet 2>&1 | tee -a target/test.log
# An independent NFSv3 client (libnfs-utils) against the target over TCP.
echo "== libnfs-utils against rpcrdma-target (tests/libnfs/run.sh)"
bash tests/libnfs/run.sh 2>&1 | tee -a target/test.log | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || { echo "tests/libnfs/run.sh failed (log: target/libnfs/target.log)"; exit 1; }
# Build the benches too (criterion; run them with cargo bench, see docs/BENCHMARKS.md).
cargo build --workspace --benches --quiet
