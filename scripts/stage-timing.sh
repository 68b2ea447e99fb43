#!/usr/bin/env bash
# Where one Call's nanoseconds go, stage by stage, on this machine: builds the
# target and perf with the `stage-timing` feature (dataplane::stages) into
# their own target directory, starts the target, and runs ROUNDS rounds
# (default 4) of NULL, 4 KiB READ and 4 KiB WRITE (OPS, default all three;
# on a FILE_SIZE file, default 64k, so the data stays in the caches) at queue
# depth 1 for DURATION seconds each (default 1). After each run it prints perf's p50 and the last line of every
# lap from both engines: the responder's laps count from the poll that
# delivered the Call, the requester's as their names say (docs/BENCHMARKS.md,
# "Where the time goes").
#
# Each lap costs one time-stamp counter read (a few ns), which the later laps
# include. This host's time-stamp counter, as KVM shows it, moves in steps of
# 10 ns: laps are quantised to that.
#
# The build is separate (default target/stage-timing), so normal binaries
# never carry the timing code. Environment: CONFIG, CLIENT_CPU, ROUNDS, OPS,
# DURATION, FILE_SIZE, OUT (default target/stage-timing-out),
# CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/stage-timing}
. scripts/perf-lib.sh

ROUNDS=${ROUNDS:-4}
OPS=${OPS:-null read write}
DURATION=${DURATION:-1}
FILE_SIZE=${FILE_SIZE:-64k}
OUT=${OUT:-target/stage-timing-out}
# Print each lap every this many samples (several times a run, so the last
# line of a run covers that run only).
export RPCRDMA_STAGE_EVERY=${RPCRDMA_STAGE_EVERY:-50000}

build_perf_and_target -q --features stage-timing
mkdir -p "$OUT"
start_target "$OUT/target.log"
COMMON=(--fabric shm --target "$SOCK" --duration "$DURATION" --warmup 0.3 --cores "$CLIENT_CPU" --no-progress)
NFS=(--mount-port "$MOUNT_PORT" --create --file-size "$FILE_SIZE" --file "stage-$FILE_SIZE.dat")

# last_laps FILE: the last line of each distinct lap in FILE.
last_laps() {
    grep -a '^stage ' "$1" | awk -F: '{ last[$1] = $0; if (!seen[$1]++) order[n++] = $1 }
        END { for (i = 0; i < n; i++) print "  " last[order[i]] }'
}

for r in $(seq 1 "$ROUNDS"); do
    for op in $OPS; do
        args=()
        [ "$op" != null ] && args=("${NFS[@]}" --size 4k)
        from=$(wc -c <"$OUT/target.log")
        "$PERF" "$op" "${args[@]}" "${COMMON[@]}" >"$OUT/$op-$r.out" 2>"$OUT/$op-$r.err" || {
            cat "$OUT/$op-$r.err" >&2
            echo "stage-timing: perf $op (round $r) failed" >&2
            exit 1
        }
        tail -c +"$((from + 1))" "$OUT/target.log" >"$OUT/$op-$r.target"
        p50=$(grep -o 'p50=[0-9.]*' "$OUT/$op-$r.out" | head -n1)
        echo "round $r $op: perf $p50 us"
        last_laps "$OUT/$op-$r.target"
        last_laps "$OUT/$op-$r.err"
    done
done
