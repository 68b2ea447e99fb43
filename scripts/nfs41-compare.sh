#!/usr/bin/env bash
# NFSv4.1 against NFSv3 through the same target over shm, queue depth 1
# (issue 22's figures): ROUNDS rounds (default 5), each running, one after
# the other, NULL v3, the NULL COMPOUND (SEQUENCE only) of `perf --nfs 4.1`,
# 4 KiB READ v3 and 4 KiB READ v4.1 (SEQUENCE + PUTFH + READ), DURATION
# seconds each (default 2), RAM backend, random offsets in a FILE_SIZE file
# (default 16M). Prints the median over rounds of each p50 and of each
# round's v4.1 / v3 ratio (the runs of a round are seconds apart, so a ratio
# carries less of the machine's drift than the medians do). Writes
# target/nfs41-compare/ (or $OUT): rounds.txt and summary.txt.
# TRANSPORT=tcp runs the same over ONC RPC on TCP (`--transport tcp` to the
# target's `nfs_tcp_port`) instead of shm.
# Environment: CONFIG, CLIENT_CPU, ROUNDS, DURATION, FILE_SIZE, OUT,
# TRANSPORT, CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/perf-lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-2}
FILE_SIZE=${FILE_SIZE:-16M}
TRANSPORT=${TRANSPORT:-shm}
OUT=${OUT:-target/nfs41-compare$([ "$TRANSPORT" = shm ] || echo "-$TRANSPORT")}

build_perf_and_target -q
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/rounds.txt "$OUT"/summary.txt
start_target "$OUT/target.log"
case "$TRANSPORT" in
shm) WHERE=(--fabric shm --target "$SOCK") ;;
tcp)
    NFS_PORT=$(sed -n 's/.*"nfs_tcp_port": *\([0-9]*\).*/\1/p' "$CONFIG" | head -n1)
    WHERE=(--transport tcp --target "127.0.0.1:${NFS_PORT:-2049}")
    ;;
*) echo "nfs41-compare: TRANSPORT is shm or tcp" >&2; exit 2 ;;
esac
COMMON=("${WHERE[@]}" --duration "$DURATION" --warmup 0.5 --cores "$CLIENT_CPU" --no-progress --qd 1)
NFS=(--mount-port "$MOUNT_PORT" --create --file-size "$FILE_SIZE" --size 4k)

run() { # round, name, perf arguments...
    local r=$1 name=$2
    shift 2
    "$PERF" "$@" "${COMMON[@]}" --json "$OUT/$name-$r.json" >/dev/null 2>"$OUT/$name-$r.err" || {
        cat "$OUT/$name-$r.err" >&2
        echo "nfs41-compare: $name (round $r) failed" >&2
        exit 1
    }
}

for r in $(seq 1 "$ROUNDS"); do
    run "$r" null-v3 null
    run "$r" null-v41 null --nfs 4.1
    run "$r" read-v3 read "${NFS[@]}" --file perf-v3.dat
    run "$r" read-v41 read "${NFS[@]}" --file perf-v41.dat --nfs 4.1
done
stop_target

python3 - "$OUT" "$ROUNDS" "$TRANSPORT" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
names = ["null-v3", "null-v41", "read-v3", "read-v41"]
def get(name, r):
    with open(f"{out}/{name}-{r}.json") as f:
        j = json.load(f)
    assert j.get("errors", 0) == 0, f"{name} round {r}: errors"
    return j["latency_us"]["p50"]
rows = [{n: get(n, r) for n in names} for r in range(1, rounds + 1)]
with open(f"{out}/rounds.txt", "w") as f:
    f.write("p50 latency (us) per round\n")
    for n in names:
        f.write(f"{n:10} " + " ".join(f"{row[n]:7.2f}" for row in rows) + "\n")
print(f"{rounds} rounds, qd 1, {sys.argv[3]}; medians of p50 (us)")
for n in names:
    v = [row[n] for row in rows]
    print(f"{n:10} {statistics.median(v):8.2f}   range {min(v):.2f}-{max(v):.2f}")
for a, b, goal in [("null-v41", "null-v3", 1.5), ("read-v41", "read-v3", 1.3)]:
    ratios = [row[a] / row[b] for row in rows]
    m = statistics.median(ratios)
    print(f"{a} / {b}: median ratio {m:.2f}x (goal <= {goal}x) {'met' if m <= goal else 'NOT met'}"
          f"   range {min(ratios):.2f}-{max(ratios):.2f}")
PY
