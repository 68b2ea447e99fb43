#!/usr/bin/env bash
# scripts/quickstart.sh — the first command a new user runs.
#
# Builds rpcrdma-target and perf (release), starts the target with
# configs/cores.json on the default fabric (shm: no RDMA hardware, no setup),
# and runs perf: first the fabric's own ping-pong (`perf raw`, 64 B and 4 KiB:
# the floor, measured before the target starts), then against the target RPC
# NULL, and 4 KiB NFSv3 READ and WRITE (with data verification), each
# with RPC-over-RDMA version 1 and 2 for a few seconds — prints the summaries,
# writes the JSON results, a comparison table and a percentile plot under
# target/quickstart/, and stops the target (SIGTERM: drain, sync, exit 0).
#
# Env: QUICKSTART_SECONDS (default 3) per run.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "quickstart: cargo not found; install Rust (rustup) first" >&2; exit 1; }
secs=${QUICKSTART_SECONDS:-3}
out=target/quickstart
cfg=configs/cores.json

# The verbs provider's binding (rdma-mummy-sys) builds with cmake and libclang.
bash scripts/build-deps.sh

echo "== building (release): rpcrdma-target, perf"
cargo build --release --quiet -p rpcrdma-apps --bin rpcrdma-target -p rpcrdma-perf --bin perf
bin=${CARGO_TARGET_DIR:-target}/release
target=$bin/rpcrdma-target
perf=$bin/perf
rm -rf "$out"; mkdir -p "$out"

"$target" --check-config -c "$cfg"
mount_port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["listeners"]["mount_tcp_port"])' "$cfg")

common=(--duration "$secs" --warmup 1 --no-progress)
status=0
run() {
    local name=$1; shift
    echo
    echo "== perf $* ($name)"
    if ! "$perf" "$@" "${common[@]}" --json "$out/$name.json"; then
        echo "quickstart: perf $name FAILED" >&2
        status=1
    fi
}
# The floor first, before the target starts: the fabric's own ping-pong with
# nothing else on the CPUs (64 B, and 4 KiB for the 4 KiB READ/WRITE).
run raw raw
run raw-4k raw --size 4k

echo "== starting rpcrdma-target -c $cfg (log: $out/target.log)"
"$target" -c "$cfg" >"$out/target.log" 2>&1 &
tpid=$!
trap 'kill -9 $tpid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$mount_port") 2>/dev/null && break
    kill -0 $tpid 2>/dev/null || { cat "$out/target.log"; echo "quickstart: the target exited at start" >&2; exit 1; }
    sleep 0.1
done
grep -q "rpcrdma-target ready" "$out/target.log" || sleep 0.5

for v in 1 2; do
    run "null-v$v" null --vers "$v"
    run "read-4k-v$v" read --vers "$v" --size 4k --create --file-size 16M --verify
    run "write-4k-v$v" write --vers "$v" --size 4k --create --file-size 16M --verify
done

echo
echo "== stopping the target (SIGTERM)"
kill -TERM $tpid
rc=0; wait $tpid || rc=$?
trap - EXIT
tail -3 "$out/target.log"
[ "$rc" = 0 ] || { echo "quickstart: the target exited with status $rc" >&2; status=1; }

results=("$out/raw.json")
for n in raw-4k null-v1 null-v2 read-4k-v1 read-4k-v2 write-4k-v1 write-4k-v2; do
    [ -f "$out/$n.json" ] && results+=("$out/$n.json")
done
if [ ${#results[@]} -ge 2 ]; then
    echo
    echo "== side by side (ratios against the floor, perf raw)"
    "$perf" compare "${results[@]}" --plot "$out/latency.svg" | tee "$out/compare.txt"
fi
echo
echo "Results: $out/*.json, $out/compare.txt, plot $out/latency.svg. Next: scripts/test.sh runs every test."
exit $status
