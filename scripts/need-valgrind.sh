#!/usr/bin/env bash
# scripts/need-valgrind.sh — install valgrind with apt-get when it is missing
# (as root; as another user it says so and fails). Called by the callgrind
# scripts before they count instructions.
set -euo pipefail
command -v valgrind >/dev/null && exit 0
[ "$(id -u)" = 0 ] || { echo "install valgrind" >&2; exit 1; }
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
