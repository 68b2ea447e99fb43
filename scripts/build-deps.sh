#!/usr/bin/env bash
# scripts/build-deps.sh — install what building the workspace needs when it is
# missing: a C toolchain and pkg-config for -sys crates, and cmake and
# libclang for the verbs binding (rdma-mummy-sys builds its rdma-core shim
# with cmake; bindgen needs libclang and clang's own headers). Debian's
# packages, as root; as another user it names what to install and fails.
# Every script that runs cargo on a fresh machine calls it first
# (scripts/test.sh, quickstart.sh, bench.sh, fuzz.sh, callgrind-engine.sh,
# perf-lib.sh and tests/*/run.sh, libnfs included), so each runs
# alone. Usage: bash scripts/build-deps.sh
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cmake >/dev/null || need+=(cmake)
{ compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' && compgen -G '/usr/lib/llvm-*/lib/clang/*/include/stddef.h'; } \
    >/dev/null || need+=(libclang-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "build-deps: please install: ${need[*]}" >&2
    exit 1
fi
echo "== build-deps: apt-get install ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
