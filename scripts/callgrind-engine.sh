#!/usr/bin/env bash
# scripts/callgrind-engine.sh [BENCH...] — instructions per Call through both
# engines (requester and responder over shm in one thread,
# dataplane/benches/shm.rs `engine_one_thread`), counted by callgrind: the
# program's total inside `one_thread_call` divided by its calls. Counts are
# repeatable whatever else the machine does, so a before/after of a change
# is two runs of this script. Default benches: v1_null v1_read_4k
# v1_write_4k.
# Needs valgrind (installed with apt-get when missing, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/need-valgrind.sh
bash scripts/build-deps.sh
[ $# -gt 0 ] || set -- v1_null v1_read_4KiB v1_write_4KiB
cargo bench -p rpcrdma-dataplane --bench shm --no-run --quiet 2>/dev/null
bin=$(ls -t target/release/deps/shm-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
for b in "$@"; do
    SHM_BENCH_GROUPS=engine_one_thread valgrind --tool=callgrind --callgrind-out-file="$out/cg.$b" \
        --toggle-collect='shm::one_thread_call' "$bin" --bench "engine_one_thread/$b\$" --profile-time 2 \
        >/dev/null 2>&1
    python3 scripts/callgrind-per-call.py "$out/cg.$b" "$b" 'shm::one_thread_call'
done
rm -rf "$out"
