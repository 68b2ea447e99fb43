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

need_apt=()
if [ "$install" = 1 ]; then
    # C toolchain pieces some -sys crates need.
    command -v cc >/dev/null || need_apt+=(build-essential)
    command -v pkg-config >/dev/null || need_apt+=(pkg-config)
    # dataplane's `verbs` feature (rdma-mummy-sys): cmake builds its rdma-core
    # shim, bindgen needs libclang and clang's own headers.
    command -v cmake >/dev/null || need_apt+=(cmake)
    { compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' && compgen -G '/usr/lib/llvm-*/lib/clang/*/include/stddef.h'; } \
        >/dev/null || need_apt+=(libclang-dev)
    # An independent NFSv3 client over TCP for tests/libnfs/run.sh.
    command -v nfs-cp >/dev/null || need_apt+=(libnfs-utils)
    if [ ${#need_apt[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
        else
            echo "test.sh: please install: ${need_apt[*]}" >&2
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
# The fuzz targets' checks over every seed input and its truncations, on stable
# (the coverage-guided runs are scripts/fuzz.sh).
echo "== fuzz seed checks"
cargo test --manifest-path fuzz/Cargo.toml --quiet 2>&1 | tee -a target/test.log
# An independent NFSv3 client (libnfs-utils) against the target over TCP.
echo "== libnfs-utils against rpcrdma-target (tests/libnfs/run.sh)"
bash tests/libnfs/run.sh 2>&1 | tee -a target/test.log | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || { echo "tests/libnfs/run.sh failed (log: target/libnfs/target.log)"; exit 1; }
# Build the benches too (criterion; run them with cargo bench, see docs/BENCHMARKS.md).
cargo build --workspace --benches --quiet
