#!/usr/bin/env bash
# Issue 21 item 5: does a client's COMMIT (an fsync of 1 GiB of buffered
# data) hold up another client's READs on the same core?
#
# One rpcrdma-target (shm fabric, one io core, a `uring` backend on a
# directory of the local disk), two perf processes:
#   B: 4 KiB random READs, queue depth 1, of a 64 MiB file (the victim);
#   A: 1 MiB sequential UNSTABLE WRITEs of a 1 GiB file, a COMMIT after
#      every 1 GiB (--commit-every), queue depth 4.
# B runs alone, then with A. Prints B's p50/p99 both ways and the ratio.
#
# With MODE=p50 it measures the fast path instead: NULL and 4 KiB READ
# (queue depth 1) alone on the same target, and prints their p50.
#
# Usage: scripts/commit-interference.sh [TARGET_BINARY]
#   DATA_DIR  where the backend's directory goes (default: under /var/tmp,
#             a disk, not tmpfs, so an fsync costs what it costs)
#   SECS      measured seconds of each B run (default 15)
#   CLIENT_CPU / IO_CPU / ADMIN_CPU  CPUs (default 0 / 1 / 0)
#   A_CPU     client A's CPU (default CLIENT_CPU); on a 2-CPU host A shares a CPU
#             with B or with the io core whatever is chosen, which the figures show
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-target/release/rpcrdma-target}
PERF=${PERF:-target/release/perf}
SECS=${SECS:-15}
CLIENT_CPU=${CLIENT_CPU:-0}
A_CPU=${A_CPU:-$CLIENT_CPU}
IO_CPU=${IO_CPU:-1}
ADMIN_CPU=${ADMIN_CPU:-0}
WORK=$(mktemp -d /tmp/commit-interference.XXXXXX)
DATA_DIR=${DATA_DIR:-$(mktemp -d /var/tmp/commit-interference-data.XXXXXX)}
SOCK="$WORK/fabric.sock"
PORT_BASE=$((21000 + RANDOM % 2000))
cat >"$WORK/cores.json" <<JSON
{
  "cores": [ { "cpu": $ADMIN_CPU, "role": "admin" }, { "cpu": $IO_CPU, "role": "io" } ],
  "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 },
    "message_ring_size": 1024, "message_batch": 32, "timer_tick_us": 1000, "timer_slots": 256,
    "max_timers": 1024, "drain_timeout_ms": 10000 },
  "listeners": { "fabric": [ { "address": "127.0.0.1", "port": $PORT_BASE, "versions": [1, 2] } ],
    "nfs_tcp_port": $((PORT_BASE + 1)), "mount_tcp_port": $((PORT_BASE + 2)) },
  "fabric": { "provider": "shm", "socket_path": "$SOCK" },
  "pools": [
    { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 1024, "page_size": "4K", "per_core_cache": 64 },
    { "name": "send", "usage": "send", "buffer_size_bytes": 4096, "count": 1024, "page_size": "4K", "per_core_cache": 64 },
    { "name": "data", "usage": "data", "buffer_size_bytes": 1048576, "count": 64, "page_size": "4K", "per_core_cache": 8 }
  ],
  "credits": { "max_per_connection": 32 },
  "inline": { "v1": { "send_bytes": 1024, "receive_bytes": 1024 }, "v2": { "send_bytes": 4096, "receive_bytes": 4096 } },
  "backends": [ { "name": "disk", "type": "uring", "path": "$DATA_DIR", "queue_depth": 64 } ],
  "exports": [ { "path": "/export", "backend": "disk", "clients": ["127.0.0.0/8"], "root_squash": false } ]
}
JSON
"$TARGET" -c "$WORK/cores.json" >"$WORK/target.log" 2>&1 &
TPID=$!
cleanup() {
    [ -n "${APID:-}" ] && kill "$APID" 2>/dev/null || true
    kill -TERM "$TPID" 2>/dev/null || true
    wait "$TPID" 2>/dev/null || true
    rm -rf "$WORK" "$DATA_DIR"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
    [ -S "$SOCK" ] && break
    kill -0 "$TPID" 2>/dev/null || { cat "$WORK/target.log"; exit 1; }
    sleep 0.1
done
common=(--fabric shm -t "$SOCK" --mount-port $((PORT_BASE + 2)) --create --no-progress)
# B's file, filled once.
"$PERF" read "${common[@]}" --file b.dat --file-size 64M --size 4k --duration 1 --warmup 0 --cores "$CLIENT_CPU" >/dev/null
if [ "${MODE:-}" = p50 ]; then
    "$PERF" null --fabric shm -t "$SOCK" --no-progress --duration "$SECS" --warmup 1 --cores "$CLIENT_CPU" --json "$WORK/null.json" >/dev/null
    "$PERF" read "${common[@]}" --file b.dat --file-size 64M --size 4k --qd 1 \
        --duration "$SECS" --warmup 1 --cores "$CLIENT_CPU" --json "$WORK/read.json" >/dev/null
    python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
for n in ("null", "read"):
    d = json.load(open(f"{w}/{n}.json"))
    l = d["latency_us"]
    print(f"{n}: p50 {l['p50']:.2f} us, p90 {l['p90']:.2f} us, p99 {l['p99']:.1f} us, ops {d['ops']}")
PY
    exit 0
fi
b_run() {
    "$PERF" read "${common[@]}" --file b.dat --file-size 64M --size 4k --qd 1 \
        --duration "$SECS" --warmup 1 --cores "$CLIENT_CPU" --json "$WORK/$1.json" >"$WORK/$1.txt"
}
b_run alone
"$PERF" write "${common[@]}" --file a.dat --file-size 1G --size 1M --qd 4 --seq --commit-every 1G \
    --duration $((SECS + 6)) --warmup 0 --timeout 120 --idle-sleep-us 20 --cores "$A_CPU" --json "$WORK/a.json" >"$WORK/a.txt" 2>&1 &
APID=$!
# Let A dirty the page cache before B measures.
sleep 3
b_run with_a
wait "$APID" || true
APID=
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
alone, with_a, a = (json.load(open(f"{w}/{n}.json")) for n in ("alone", "with_a", "a"))
for k in ("p50", "p90", "p99", "p999", "max"):
    x, y = alone["latency_us"][k], with_a["latency_us"][k]
    print(f"B {k}: alone {x:.1f} us, with A {y:.1f} us, ratio {y / x:.2f}x")
print(f"B ops: alone {alone['ops']}, with A {with_a['ops']}; A: {a['ops']} ops (1 MiB WRITEs and COMMITs), "
      f"{a['errors']} errors, COMMIT+WRITE p99 {a['latency_us']['p99']:.0f} us, max {a['latency_us']['max']:.0f} us")
PY
grep -E "engine totals|error" "$WORK/target.log" | tail -3 || true
