#!/usr/bin/env bash
# Benchmark report: builds release, measures the fabric floor (`perf raw`),
# starts rpcrdma-target, runs NULL and NFSv3 READ/WRITE over RPC-over-RDMA
# (versions 1 and 2; 4 KiB, 64 KiB and 1 MiB; queue depths 1, 4 and 16 for
# NULL and 4 KiB READ), and writes under target/perf-report/ (or $OUT):
#   *.json        one result per run (perf --json)
#   compare.txt   one row per run, latency and IOPS ratios against the raw floor
#   latency.svg   percentile plot of the queue-depth-1 runs against the floor
#   runs.txt      the summaries as printed, and any run that failed
# Short runs (DURATION seconds each, default 3, after WARMUP seconds of
# warm-up); the whole report takes a few minutes.
#
# Environment: CONFIG (target configuration, default configs/cores.json),
# CLIENT_CPU (CPU of perf's thread, default 0: the admin core of
# configs/cores.json; the target's io core spins on the other), ECHO_CPU (CPU
# of the raw floor's echo thread, default 1: measured before the target
# starts), DURATION, WARMUP, OUT, CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/perf-lib.sh

DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
OUT=${OUT:-target/perf-report}

build_perf_and_target

mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/compare.txt "$OUT"/latency.svg "$OUT"/runs.txt
COMMON=(--fabric shm --duration "$DURATION" --warmup "$WARMUP" --cores "$CLIENT_CPU" --no-progress)
failed=0
done_runs=() # result files in run order

run() { # name, perf arguments...
    local name=$1
    shift
    echo "== $name: perf $*" | tee -a "$OUT/runs.txt"
    if "$PERF" "$@" "${COMMON[@]}" --json "$OUT/$name.json" 2>&1 | tee -a "$OUT/runs.txt"; then
        done_runs+=("$OUT/$name.json")
    else
        echo "!! $name FAILED" | tee -a "$OUT/runs.txt"
        rm -f "$OUT/$name.json"
        failed=$((failed + 1))
    fi
}

# The floor, before the target spins on its core.
run raw-64B raw --size 64 --echo-core "$ECHO_CPU"
run raw-4KiB raw --size 4k --echo-core "$ECHO_CPU"

start_target "$OUT/target.log"
T=(--target "$SOCK")
NFS=(--mount-port "$MOUNT_PORT" --create --file-size 64M)

for v in 1 2; do
    for qd in 1 4 16; do
        run "null-v$v-qd$qd" null "${T[@]}" --vers "$v" --qd "$qd"
    done
    for qd in 1 4 16; do
        run "read-4KiB-v$v-qd$qd" read "${T[@]}" "${NFS[@]}" --vers "$v" --size 4k --qd "$qd"
    done
    for size in 64KiB 1MiB; do
        run "read-$size-v$v-qd1" read "${T[@]}" "${NFS[@]}" --vers "$v" --size "$size" --qd 1
    done
    for size in 4KiB 64KiB 1MiB; do
        run "write-$size-v$v-qd1" write "${T[@]}" "${NFS[@]}" --vers "$v" --size "$size" --qd 1
    done
done

stop_target

# One row per run against the floor (raw-64B first); the plot shows the
# queue-depth-1 runs of NULL and 4 KiB READ/WRITE against it.
plot=("$OUT/raw-64B.json")
for v in 1 2; do
    for f in "$OUT/null-v$v-qd1.json" "$OUT/read-4KiB-v$v-qd1.json" "$OUT/write-4KiB-v$v-qd1.json"; do
        [ -e "$f" ] && plot+=("$f")
    done
done
if [ -e "$OUT/raw-64B.json" ] && [ ${#done_runs[@]} -ge 2 ]; then
    "$PERF" compare --by-file "${done_runs[@]}" | tee "$OUT/compare.txt"
    "$PERF" compare "${plot[@]}" --plot "$OUT/latency.svg" >/dev/null
fi
echo "report in $OUT ($failed runs failed)"
