#!/usr/bin/env bash
# scripts/idle-policies.sh — what each reactor idle policy costs and gives
# (issue 24 item 1): for spin, spin_then_sleep, spin_then_wait with a fixed
# spin of 50 µs and of 5 ms, adaptive up to 5 ms, and configs/cores.json's own,
# starts rpcrdma-target with configs/cores.json (only the idle policy, the
# socket path and the TCP ports changed) and measures
#   - the CPU the idle target uses over IDLE_SECONDS (utime + stime of the
#     process and of its io core thread, from /proc), in % of one CPU;
#   - the CPU it uses under a light load: NULL Calls at LIGHT_RATE per second
#     (open loop) for LIGHT_SECONDS;
#   - NULL round trips over shm at qd 1 for PERF_SECONDS (p50, p99);
#   - the first Call after an idle gap: perf in open loop at GAP_RATE Calls
#     per second (each Call comes after ~1/GAP_RATE s of nothing), latency
#     from the intended send time (p50, p99).
# Prints one table. Env: POLICIES (all of: spin spin_then_sleep wait50
# wait5000 adaptive shipped), IDLE_SECONDS (10), LIGHT_RATE (300), LIGHT_SECONDS (5),
# PERF_SECONDS (5), GAP_RATE (20), GAP_SECONDS (10), CLIENT_CPU (0),
# CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE_SECONDS=${IDLE_SECONDS:-10}
PERF_SECONDS=${PERF_SECONDS:-5}
GAP_RATE=${GAP_RATE:-20}
GAP_SECONDS=${GAP_SECONDS:-10}
LIGHT_RATE=${LIGHT_RATE:-300}
LIGHT_SECONDS=${LIGHT_SECONDS:-5}
POLICIES=${POLICIES:-spin spin_then_sleep wait50 wait5000 adaptive shipped}
CLIENT_CPU=${CLIENT_CPU:-0}
TDIR=${CARGO_TARGET_DIR:-target}
bash scripts/build-deps.sh
cargo build --release --quiet -p rpcrdma-apps --bin rpcrdma-target -p rpcrdma-perf --bin perf
WORK=$(mktemp -d /tmp/rpcrdma-idle.XXXXXX)
TPID=
cleanup() {
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)

# ticks PID [TID]: utime + stime of a process or one of its threads.
ticks() {
    local f=/proc/$1/stat
    [ -n "${2:-}" ] && f=/proc/$1/task/$2/stat
    sed 's/.*) //' "$f" | awk '{ print $12 + $13 }'
}

# p50/p99 in µs from perf's JSON result (`latency_us`).
pcts() {
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
def find(o, k):
    if isinstance(o, dict):
        for a, b in o.items():
            if a == k: return b
            v = find(b, k)
            if v is not None: return v
    if isinstance(o, list):
        for b in o:
            v = find(b, k)
            if v is not None: return v
lat = find(r, "latency_us") or {}
print("%.1f %.1f" % (float(lat.get("p50", "nan")), float(lat.get("p99", "nan"))))
' "$1"
}

printf '%-16s %10s %10s %11s %12s %12s %12s %12s\n' policy "idle_cpu%" "core_cpu%" "light_cpu%" "null_p50_us" "null_p99_us" "gap_p50_us" "gap_p99_us"
wait_fixed() { echo "{\"policy\":\"spin_then_wait\",\"spin_us\":$1,\"max_spin_us\":0,\"max_wait_ms\":1000,\"fallback_sleep_us\":100}"; }
for policy in $POLICIES; do
    case $policy in
    spin) idle='{"policy":"spin"}' ;;
    spin_then_sleep) idle='{"policy":"spin_then_sleep","idle_loops":1000,"max_sleep_us":100}' ;;
    wait50) idle=$(wait_fixed 50) ;;
    wait5000) idle=$(wait_fixed 5000) ;;
    adaptive) idle='{"policy":"spin_then_wait","spin_us":50,"max_spin_us":5000,"max_wait_ms":1000,"fallback_sleep_us":100}' ;;
    shipped) idle=$(python3 -c 'import json; print(json.dumps(json.load(open("configs/cores.json"))["reactor"]["idle"]))') ;;
    *) echo "unknown policy $policy" >&2; exit 2 ;;
    esac
    sock=$WORK/$policy.sock
    python3 - "$idle" "$sock" >"$WORK/$policy.json" <<'PY'
import json, random, sys
c = json.load(open("configs/cores.json"))
c["reactor"]["idle"] = json.loads(sys.argv[1])
c["fabric"]["socket_path"] = sys.argv[2]
port = random.randint(30000, 60000)
c["listeners"]["nfs_tcp_port"] = port
c["listeners"]["mount_tcp_port"] = port + 1
print(json.dumps(c))
PY
    "$TDIR/release/rpcrdma-target" -c "$WORK/$policy.json" >"$WORK/$policy.log" 2>&1 &
    TPID=$!
    for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { cat "$WORK/$policy.log"; exit 1; }
    sleep 1
    core=$(grep -l 'reactor-core-1' /proc/$TPID/task/*/comm | head -1 | awk -F/ '{ print $5 }')
    a=$(ticks $TPID); ac=$(ticks $TPID "$core")
    sleep "$IDLE_SECONDS"
    b=$(ticks $TPID); bc=$(ticks $TPID "$core")
    idle_pct=$(awk -v d=$((b - a)) -v s="$IDLE_SECONDS" -v hz="$hz" 'BEGIN { printf "%.2f", 100 * d / hz / s }')
    core_pct=$(awk -v d=$((bc - ac)) -v s="$IDLE_SECONDS" -v hz="$hz" 'BEGIN { printf "%.2f", 100 * d / hz / s }')
    # light load: the target's CPU while NULL Calls come at LIGHT_RATE/s
    a=$(ticks $TPID); ta=$(date +%s.%N)
    "$TDIR/release/perf" null --fabric shm -t "$sock" --qd 1 --cores "$CLIENT_CPU" --rate "$LIGHT_RATE" \
        --duration "$LIGHT_SECONDS" --no-progress --json "$WORK/$policy.light.json" >/dev/null
    b=$(ticks $TPID); tb=$(date +%s.%N)
    light_pct=$(awk -v d=$((b - a)) -v ta="$ta" -v tb="$tb" -v hz="$hz" 'BEGIN { printf "%.1f", 100 * d / hz / (tb - ta) }')
    "$TDIR/release/perf" null --fabric shm -t "$sock" --qd 1 --cores "$CLIENT_CPU" --duration "$PERF_SECONDS" \
        --no-progress --json "$WORK/$policy.null.json" >/dev/null
    "$TDIR/release/perf" null --fabric shm -t "$sock" --qd 1 --cores "$CLIENT_CPU" --rate "$GAP_RATE" \
        --duration "$GAP_SECONDS" --no-progress --json "$WORK/$policy.gap.json" >/dev/null
    read -r n50 n99 < <(pcts "$WORK/$policy.null.json")
    read -r g50 g99 < <(pcts "$WORK/$policy.gap.json")
    printf '%-16s %10s %10s %11s %12s %12s %12s %12s\n' $policy "$idle_pct" "$core_pct" "$light_pct" "$n50" "$n99" "$g50" "$g99"
    kill "$TPID"; wait "$TPID" 2>/dev/null || true; TPID=
done
