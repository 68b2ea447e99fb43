#!/usr/bin/env bash
# scripts/callgrind-nfs.sh [BENCH...] — instructions per Call inside the NFS
# service (the data hint and handle_call on `mem`, no transport), counted by
# callgrind over apps/benches/nfs_service.rs: the program's total inside
# `serve_one` divided by its calls. Repeatable whatever else the machine
# does, so a before/after of a change is two runs of this script. Default
# benches: v3_read_4k v3_write_4k v4_read_4k v4_write_4k.
# Needs valgrind (installed with apt-get when missing, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/need-valgrind.sh
bash scripts/build-deps.sh
[ $# -gt 0 ] || set -- v3_read_4k v3_write_4k v4_read_4k v4_write_4k
cargo bench -p rpcrdma-apps --bench nfs_service --no-run --quiet 2>/dev/null
bin=$(ls -t "${CARGO_TARGET_DIR:-target}"/release/deps/nfs_service-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
for b in "$@"; do
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$b" --toggle-collect='nfs_service::serve_one' \
        "$bin" --bench "nfs_service/$b\$" --profile-time 1 >/dev/null 2>&1
    python3 scripts/callgrind-per-call.py "$out/cg.$b" "$b" 'nfs_service::serve_one'
done
rm -rf "$out"
