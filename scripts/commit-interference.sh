#!/usr/bin/env bash
# Issue 21 item 5: does a client's COMMIT (an fsync of 1 GiB of buffered
# data) hold up another client's READs on the same core?
#
# One rpcrdma-target (shm fabric, one io core, a `uring` backend on a
# directory of the local disk, `o_direct` off so A's writes are buffered:
# with O_DIRECT, the default, aligned 1 MiB writes leave nothing dirty and
# the COMMIT has nothing to flush), and two clients:
#   B: 4 KiB random READs of a 64 MiB file (the victim), OPEN LOOP at B_RATE
#      Calls per second (queue depth 4): each READ's latency counts from its
#      intended send time, so a core that stops for a second shows in the
#      latency of every READ that second held up (a closed loop at depth 1
#      would wait on one READ and show the stop in its max only);
#   A: writes 1 GiB, then COMMITs it, in two phases the script times:
#      A1 1,024 sequential 1 MiB UNSTABLE WRITEs paced at A_MBPS (perf's open
#         loop, --rate; A's client sleeps between Calls), so A's load is well
#         under a CPU: on a 2-CPU host an unpaced A (1.6-1.9 GB/s) takes a CPU
#         from B's client or from the io core, and B then waits for CPU time,
#         not for A's fsync;
#      A2 one COMMIT of the file (perf: a 4 KiB WRITE, then a COMMIT): the
#         fsync of the ~1 GiB A1 left dirty (below the kernel's
#         dirty_background threshold on a host with more than ~10 GiB of
#         memory, so it is still dirty then). This is the part that used to
#         block the core.
# Each round runs B alone, then B with A (B's window covers A1 and A2), the
# same window length both ways; ROUNDS rounds alternate, and the summary gives
# the medians of B's p50, p99, p99.9, max and operations, and of A's phases.
#
# With MODE=p50 it measures the fast path instead: NULL and 4 KiB READ
# (queue depth 1) alone on the same target, and prints their p50.
#
# Usage: scripts/commit-interference.sh [TARGET_BINARY]
#   DATA_DIR  where the backend's directory goes (default: under /var/tmp,
#             a disk, not tmpfs, so an fsync costs what it costs)
#   ROUNDS    rounds of (B alone, B with A) (default 3)
#   A_MBPS    A1's pace in MiB/s (default 100: 1 GiB in about 10 s)
#   A_KIB     A1's WRITE size in KiB (default 1024)
#   B_RATE    B's READs per second (default 1000); 0: closed loop at depth 1
#   COMMIT_SECS  B's window after A1's end, for A2 (default 6)
#   B_DURING  all (default): B's window covers A1 and A2; commit: A1 runs
#             first with B idle, then B's window (COMMIT_SECS) covers A2 alone,
#             so B's figures are those of the COMMIT, not of A's WRITEs
#   CLIENT_CPU / IO_CPU / ADMIN_CPU  CPUs (default 0 / 1 / 0); CLIENT_CPU
#             is B's client's CPU
#   A_CPU     client A's CPU (default CLIENT_CPU)
#   B_IDLE_SLEEP_US  B's client's --idle-sleep-us (default 0: it spins)
#   B_IDLE_YIELD  1: B's client yields its CPU when idle (perf --idle-yield),
#             for CLIENT_CPU=IO_CPU with IDLE's spin_then_wait: B's client
#             and the core hand the CPU to each other instead of spinning
#             against each other for a scheduler slice
#   A_NICE    A's client alone at this nice value (unset: as NICE); e.g. 19
#             so that A's client takes its CPU only when nothing else wants it
#   IDLE      the target's reactor idle policy, as JSON (default
#             spin_then_sleep, 1000 idle loops, 100 us sleeps); e.g.
#             '{"policy": "spin_then_wait", "spin_us": 0}' when B's client
#             shares the io core's CPU (CLIENT_CPU=IO_CPU) and the two must
#             hand the CPU to each other
#
# The layout: the target's admin core on ADMIN_CPU, its io core on IO_CPU;
# the target's own blocking threads (io-wq workers of the core's ring, the
# NFS helper pool) go to the allowed CPUs no core uses, or when there are
# none to the admin core's CPU (apps/src/cpus.rs); the script prints the
# CPUs each of the target's threads may use, read from /proc during round
# 1's COMMIT. In reality A and B are other machines: on a host with few
# CPUs, keep B's client off the admin core's CPU if there is a CPU for it
# (A's page-cache copies and fsync run there). On a 2-CPU host the one
# such CPU is the io core's: layout D of docs/BENCHMARKS.md,
#   CLIENT_CPU=1 A_CPU=0 B_IDLE_YIELD=1 IDLE='{ "policy": "spin_then_wait", "spin_us": 0 }'
# where B's client and the core take turns on CPU 1 (a yield and a wake-up
# per READ: B's p50 rises, alone and with A alike).
#
# B's latency is also measured inside the target, between snapshots taken
# at the start and end of each B window, free of the clients' scheduling:
# its READ row's service time (Call handed to the NFS service to reply
# built; one Call in 8 timed), and its READ row's arrival-to-reply time
# (`reply_posted`: from the engine's poll of the completion queue that
# delivered the Call to its reply's Send posted; one Call in 8), which adds
# the Call's wait behind the core's other work in that turn (A's Calls of
# the same batch, the shm copy of A's Read chunks, backend submissions) to
# its service. Neither sees a Call's wait in the receive ring while the
# core finishes an earlier turn.
#   B_NICE    B's client alone at this nice value (unset: as NICE), in both
#             halves of each pair: on a 2-CPU host B's client shares a CPU
#             with A's client and the io-wq workers' copies, which on real
#             hardware run on other machines or CPUs; e.g. -5 keeps the
#             host's scheduler from being most of what B's p99 measures
#   OUT       keep the per-run JSON files in this directory
#   NICE      run the target and both clients at this nice value (default 0;
#             e.g. -10 on a host other work keeps busy, so that the host's
#             scheduler is less of what B measures)
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-target/release/rpcrdma-target}
PERF=${PERF:-target/release/perf}
ROUNDS=${ROUNDS:-3}
A_MBPS=${A_MBPS:-100}
A_KIB=${A_KIB:-1024}
B_RATE=${B_RATE:-1000}
COMMIT_SECS=${COMMIT_SECS:-6}
B_DURING=${B_DURING:-all}
SECS=${SECS:-15}
CLIENT_CPU=${CLIENT_CPU:-0}
A_CPU=${A_CPU:-$CLIENT_CPU}
IO_CPU=${IO_CPU:-1}
ADMIN_CPU=${ADMIN_CPU:-0}
IDLE=${IDLE:-'{ "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 }'}
WORK=$(mktemp -d /tmp/commit-interference.XXXXXX)
DATA_DIR=${DATA_DIR:-$(mktemp -d /var/tmp/commit-interference-data.XXXXXX)}
SOCK="$WORK/fabric.sock"
PORT_BASE=$((21000 + RANDOM % 2000))
cat >"$WORK/cores.json" <<JSON
{
  "cores": [ { "cpu": $ADMIN_CPU, "role": "admin" }, { "cpu": $IO_CPU, "role": "io" } ],
  "reactor": { "idle": $IDLE,
    "message_ring_size": 1024, "message_batch": 32, "timer_tick_us": 1000, "timer_slots": 256,
    "max_timers": 1024, "drain_timeout_ms": 10000 },
  "listeners": { "fabric": [ { "address": "127.0.0.1", "port": $PORT_BASE, "versions": [1, 2] } ],
    "nfs_tcp_port": $((PORT_BASE + 1)), "mount_tcp_port": $((PORT_BASE + 2)),
    "stats_socket": "$WORK/stats.sock" },
  "fabric": { "provider": "shm", "socket_path": "$SOCK" },
  "pools": [
    { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 1024, "page_size": "4K", "per_core_cache": 64 },
    { "name": "send", "usage": "send", "buffer_size_bytes": 4096, "count": 1024, "page_size": "4K", "per_core_cache": 64 },
    { "name": "data", "usage": "data", "buffer_size_bytes": 1048576, "count": 64, "page_size": "4K", "per_core_cache": 8 }
  ],
  "credits": { "max_per_connection": 32 },
  "inline": { "v1": { "send_bytes": 1024, "receive_bytes": 1024 }, "v2": { "send_bytes": 4096, "receive_bytes": 4096 } },
  "backends": [ { "name": "disk", "type": "uring", "path": "$DATA_DIR", "queue_depth": 64, "o_direct": false } ],
  "exports": [ { "path": "/export", "backend": "disk", "clients": ["127.0.0.0/8"], "root_squash": false } ]
}
JSON
NICE=${NICE:-0}
[ "$NICE" != 0 ] && { TARGET_RUN=(nice -n "$NICE" "$TARGET"); PERF_RUN=(nice -n "$NICE" "$PERF"); } ||
    { TARGET_RUN=("$TARGET"); PERF_RUN=("$PERF"); }
"${TARGET_RUN[@]}" -c "$WORK/cores.json" >"$WORK/target.log" 2>&1 &
TPID=$!
cleanup() {
    [ -n "${APID:-}" ] && kill "$APID" 2>/dev/null || true
    kill -TERM "$TPID" 2>/dev/null || true
    wait "$TPID" 2>/dev/null || true
    [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$WORK"/*.json "$WORK"/*.txt "$WORK/target.log" "$OUT/" 2>/dev/null
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
# B's measured window: A1 at A_MBPS, then COMMIT_SECS for A2.
A1_SECS=$(((1024 + A_MBPS - 1) / A_MBPS))
WINDOW=$((A1_SECS + COMMIT_SECS))
[ "$B_DURING" = commit ] && WINDOW=$COMMIT_SECS
b_load=(--size 4k --qd 1)
[ "$B_RATE" != 0 ] && b_load=(--size 4k --qd 4 --rate "$B_RATE")
b_run() { # NAME: B for WINDOW seconds after a 1 s warm-up
    snap "$1-start"
    local run=("${PERF_RUN[@]}")
    [ -n "${B_NICE:-}" ] && run=(nice -n "$B_NICE" "$PERF")
    local yield=()
    [ "${B_IDLE_YIELD:-0}" = 1 ] && yield=(--idle-yield)
    "${run[@]}" read "${common[@]}" --file b.dat --file-size 64M "${b_load[@]}" \
        --duration "$WINDOW" --warmup 1 --idle-sleep-us "${B_IDLE_SLEEP_US:-0}" "${yield[@]}" --cores "$CLIENT_CPU" \
        --json "$WORK/$1.json" >"$WORK/$1.txt"
    snap "$1-end"
}
snap() { # NAME: the target's statistics now
    "$TARGET" -c "$WORK/cores.json" stats --json >"$WORK/snap-$1.json" 2>/dev/null || echo '{}' >"$WORK/snap-$1.json"
}
threads() { # where each of the target's threads may run (name: CPUs)
    for t in /proc/"$TPID"/task/*; do
        printf '%s: %s\n' "$(cat "$t/comm" 2>/dev/null)" \
            "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$t/status" 2>/dev/null)"
    done | sort | uniq -c | sed 's/^ *//'
}
now() { date +%s.%N; }
A_RUN=("${PERF_RUN[@]}")
[ -n "${A_NICE:-}" ] && A_RUN=(nice -n "$A_NICE" "$PERF")
a1_run() { # ROUND: A's paced writes
    "${A_RUN[@]}" write "${common[@]}" --file a.dat --file-size 1G --size "${A_KIB}k" --qd 1 --seq \
        --rate $((A_MBPS * 1024 / A_KIB)) --count $((1048576 / A_KIB)) --warmup 0 --timeout 120 --idle-sleep-us 50 --cores "$A_CPU" \
        --json "$WORK/a1-$1.json" >"$WORK/a1-$1.txt" 2>&1
}
a2_run() { # ROUND: A's COMMIT
    [ "$1" = 1 ] && (sleep 0.2; threads >"$WORK/threads.txt") &
    "${A_RUN[@]}" write "${common[@]}" --file a.dat --file-size 1G --size 4k --qd 1 --count 2 --commit-every 4k \
        --warmup 0 --timeout 300 --idle-sleep-us 50 --cores "$A_CPU" --json "$WORK/a2-$1.json" >"$WORK/a2-$1.txt" 2>&1
}
a_run() { # ROUND: A1 then A2; times: A1's start, A2's start, A2's end, B's window start
    local r=$1 t0 t1 t2
    t0=$(now)
    a1_run "$r"
    t1=$(now)
    a2_run "$r"
    t2=$(now)
    echo "$t0 $t1 $t2 $t0" >"$WORK/a-$r.times"
}

# A's file, written once before the rounds (and committed), so each round
# overwrites allocated blocks: the first write of a fresh 1 GiB file ran at
# under a third of A's pace here, and its dirty data aged into the kernel's
# own write-back (30 s) before the COMMIT.
"${PERF_RUN[@]}" write "${common[@]}" --file a.dat --file-size 1G --size 1M --qd 4 --seq --count 1025 \
    --commit-every 1G --warmup 0 --timeout 300 --cores "$A_CPU" >/dev/null
echo "== $(date -u +%FT%TZ) uptime:$(uptime | sed 's/.*load average//'), nice $NICE, B's client nice ${B_NICE:-$NICE}," \
    "A's client nice ${A_NICE:-$NICE}, B's idle sleep ${B_IDLE_SLEEP_US:-0} us, B yields ${B_IDLE_YIELD:-0}"
echo "== reactor idle: $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["reactor"]["idle"]))' "$WORK/cores.json")"
echo "== layout: admin core CPU $ADMIN_CPU, io core CPU $IO_CPU, B's client CPU $CLIENT_CPU, A's client CPU $A_CPU" \
    "(host CPUs: $(nproc))"
echo "== B: 4 KiB READ, $([ "$B_RATE" = 0 ] && echo "closed loop qd 1" || echo "open loop $B_RATE/s qd 4"), window ${WINDOW} s;" \
    "A: 1 GiB in $A_KIB KiB WRITEs at $A_MBPS MiB/s (about $A1_SECS s) then COMMIT; B during: $B_DURING; $ROUNDS rounds"
# The target's counters, from its stats socket every 50 ms while SAMPLING
# exists: one line per new snapshot of the io core (when it published it, on
# the host's clock, and its count of READs). A core publishes every 100 ms
# while busy, from its own loop: a core blocked in an fsync would answer no
# READ and publish nothing until the fsync ended.
sample() { # FILE
    python3 - "$WORK/stats.sock" "$WORK/sampling" "$1" <<'PY'
import json, os, socket, sys, time
sock, flag, out = sys.argv[1:4]
seen = None
with open(out, "w") as f:
    while os.path.exists(flag):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(2)
            s.connect(sock)
            s.sendall(b"stats\n")
            buf = b""
            while chunk := s.recv(65536):
                buf += chunk
            s.close()
            t = time.time()
            d = json.loads(buf)
            for c in d["cores"]:
                reads = sum(p["calls"] for p in c["procs"] if p["name"] == "READ")
                pub = t - c["age_ms"] / 1e3
                if c["engine"] and (seen is None or abs(pub - seen) > 0.001):
                    seen = pub
                    f.write(f"{pub:.4f} {reads}\n")
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
PY
}
for r in $(seq 1 "$ROUNDS"); do
    b_run "alone-$r"
    sync
    if [ "$B_DURING" = commit ]; then
        t0=$(now)
        a1_run "$r"
        b_run "with_a-$r" &
        BPID=$!
        touch "$WORK/sampling"
        sample "$WORK/samples-$r.txt" &
        SPID=$!
        sleep 1
        t1=$(now)
        a2_run "$r"
        t2=$(now)
        echo "$t0 $t1 $t2 $t1" >"$WORK/a-$r.times"
        wait "$BPID"
    else
        # B's warm-up second passes before A starts.
        b_run "with_a-$r" &
        BPID=$!
        touch "$WORK/sampling"
        sample "$WORK/samples-$r.txt" &
        SPID=$!
        sleep 1
        a_run "$r" &
        APID=$!
        wait "$BPID"
        wait "$APID" || true
        APID=
    fi
    rm -f "$WORK/sampling"
    wait "$SPID" || true
    echo "   round $r done, uptime:$(uptime | sed 's/.*load average//')"
done
"$TARGET" -c "$WORK/cores.json" stats --json >"$WORK/stats.json" 2>/dev/null || true
python3 - "$WORK" "$ROUNDS" "$B_RATE" "$WINDOW" <<'PY'
import json, statistics, sys
w, rounds, b_rate, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def core_in(r, t_from, t_to):
    """The io core's READ rate between t_from and t_to (from its snapshots
    published inside; None when fewer than two are) and the longest time
    between its snapshots there (a core that stops publishes nothing)."""
    pts = []
    for line in open(f"{w}/samples-{r}.txt"):
        ts, n = line.split()
        pts.append((float(ts), int(n)))
    pts.sort()
    inside = [p for p in pts if t_from <= p[0] <= t_to]
    # The gap includes the last snapshot before t_from and the first after t_to.
    around = [p for p in pts if p[0] < t_from][-1:] + inside + [p for p in pts if p[0] > t_to][:1]
    gap = max((b[0] - a[0] for a, b in zip(around, around[1:])), default=None)
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < 0.05:
        return None, gap
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]), gap

load = lambda n: json.load(open(f"{w}/{n}.json"))
med = statistics.median
keys = ("p50", "p99", "p999", "max")
rows = {"alone": [], "with_a": []}
a_rows = []
for r in range(1, rounds + 1):
    for k in rows:
        d = load(f"{k}-{r}")
        rows[k].append({**{q: d["latency_us"][q] for q in keys}, "ops": d["ops"], "errors": d["errors"]})
    t0, t1, t2, tb = map(float, open(f"{w}/a-{r}.times").read().split())
    a1, a2 = load(f"a1-{r}"), load(f"a2-{r}")
    write_s = a1.get("duration_s") or (t1 - t0)
    a_rows.append({"write_s": write_s, "mb_s": 1024 / write_s, "commit_s": a2["latency_us"]["max"] / 1e6,
                   "a2_s": t2 - t1, "errors": a1["errors"] + a2["errors"],
                   # B measures from tb for `window` seconds.
                   "core_w": core_in(r, max(t0, tb), min(t1, tb + window)) if tb < t1 else (None, None),
                   "core_c": core_in(r, t1, min(t2, tb + window)),
                   "covered": t2 <= tb + window, "b_idle_w": tb >= t1})
    al, wa, a = rows["alone"][-1], rows["with_a"][-1], a_rows[-1]
    rate = lambda v: "-" if v is None else f"{v:.0f}/s"
    gap = lambda v: "-" if v is None else f"{v * 1e3:.0f} ms"
    print(f"round {r}: B alone p50 {al['p50']:.1f} p99 {al['p99']:.1f} max {al['max']:.0f} us ops {al['ops']} | "
          f"with A p50 {wa['p50']:.1f} p99 {wa['p99']:.1f} max {wa['max']:.0f} us ops {wa['ops']} | "
          f"A writes {a['write_s']:.1f} s ({a['mb_s']:.0f} MiB/s), COMMIT {a['commit_s']:.2f} s, errors {a['errors']} | "
          f"core during A's writes: {rate(a['core_w'][0])} READs, longest between snapshots {gap(a['core_w'][1])}; "
          f"during its COMMIT: {rate(a['core_c'][0])}, {gap(a['core_c'][1])}"
          + ("" if a["covered"] else " (A OUTLASTED B's WINDOW: raise COMMIT_SECS)"))
def server_p99(name, key="latency_buckets"):
    """The io core's READ p99 (us) of histogram KEY (latency_buckets: the
    service's time; reply_posted_buckets: arrival to reply posted) and its
    samples between the snapshots NAME-start and NAME-end (None when either
    is missing)."""
    def rows(n):
        try:
            d = json.load(open(f"{w}/snap-{name}-{n}.json"))
        except (OSError, ValueError):
            return None
        b = {}
        for c in d.get("cores", []):
            for p in c.get("procs", []):
                if p["name"] == "READ":
                    for hi, cnt in p.get(key, []):
                        b[hi] = b.get(hi, 0) + cnt
        return b
    a, z = rows("start"), rows("end")
    if a is None or z is None:
        return None, 0
    diff = sorted((hi, z.get(hi, 0) - a.get(hi, 0)) for hi in z)
    n = sum(c for _, c in diff)
    if n == 0:
        return None, 0
    acc, want = 0, max(1, -(-99 * n // 100))
    for hi, c in diff:
        acc += c
        if acc >= want:
            return hi / 1e3, n
    return None, n

print(f"per pair (B alone, then B with A), p99 in us:")
ratios, s_ratios, p_ratios = [], [], []
for r in range(1, rounds + 1):
    al, wa = rows["alone"][r - 1]["p99"], rows["with_a"][r - 1]["p99"]
    (sa, na), (sw, nw) = server_p99(f"alone-{r}"), server_p99(f"with_a-{r}")
    ratios.append(wa / al)
    line = f"  pair {r}: client p99 alone {al:.1f}, with A {wa:.1f}, ratio {wa / al:.2f}x"
    if sa and sw:
        s_ratios.append(sw / sa)
        line += f" | server READ service p99 alone {sa:.1f} ({na} timed), with A {sw:.1f} ({nw}), ratio {sw / sa:.2f}x"
    (pa, npa), (pw, npw) = (server_p99(f"alone-{r}", "reply_posted_buckets"),
                            server_p99(f"with_a-{r}", "reply_posted_buckets"))
    if pa and pw:
        p_ratios.append(pw / pa)
        line += f" | READ arrival-to-reply p99 alone {pa:.1f} ({npa} timed), with A {pw:.1f} ({npw}), ratio {pw / pa:.2f}x"
    print(line)
alone99 = sorted(v["p99"] for v in rows["alone"])
print(f"  client: median of per-pair p99 ratios {med(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); "
      f"B-alone p99 spread {alone99[0]:.1f} .. {alone99[-1]:.1f} us (median {med(alone99):.1f})")
if s_ratios:
    sal = sorted(x for x in (server_p99(f"alone-{r}")[0] for r in range(1, rounds + 1)) if x)
    print(f"  server: median of per-pair READ service p99 ratios {med(s_ratios):.2f}x "
          f"(min {min(s_ratios):.2f}, max {max(s_ratios):.2f}); alone spread {sal[0]:.1f} .. {sal[-1]:.1f} us")
if p_ratios:
    pal = sorted(x for x in (server_p99(f"alone-{r}", "reply_posted_buckets")[0] for r in range(1, rounds + 1)) if x)
    pwa = sorted(x for x in (server_p99(f"with_a-{r}", "reply_posted_buckets")[0] for r in range(1, rounds + 1)) if x)
    print(f"  server arrival-to-reply: median of per-pair READ p99 ratios {med(p_ratios):.2f}x "
          f"(min {min(p_ratios):.2f}, max {max(p_ratios):.2f}); alone median {med(pal):.1f} us "
          f"({pal[0]:.1f} .. {pal[-1]:.1f}), with A median {med(pwa):.1f} us ({pwa[0]:.1f} .. {pwa[-1]:.1f})")
print(f"medians of {rounds} rounds:")
for q in keys:
    x, y = med(v[q] for v in rows["alone"]), med(v[q] for v in rows["with_a"])
    print(f"  B {q}: alone {x:.1f} us, with A {y:.1f} us, ratio {y / x:.2f}x")
for k in ("ops", "errors"):
    print(f"  B {k}: alone {med(v[k] for v in rows['alone'])}, with A {med(v[k] for v in rows['with_a'])}")
print(f"  A: writes {med(a['write_s'] for a in a_rows):.1f} s ({med(a['mb_s'] for a in a_rows):.0f} MiB/s), "
      f"COMMIT {med(a['commit_s'] for a in a_rows):.2f} s (A2 in all {med(a['a2_s'] for a in a_rows):.2f} s), "
      f"errors {sum(a['errors'] for a in a_rows)}")
for k, what in (("core_w", "writes"), ("core_c", "COMMIT")):
    v = [a[k][0] for a in a_rows if a[k][0] is not None]
    g = [a[k][1] for a in a_rows if a[k][1] is not None]
    sched = f" (B's schedule: {b_rate}/s)" if b_rate else ""
    idle = k == "core_w" and all(a["b_idle_w"] for a in a_rows)
    print(f"  the io core during A's {what}: READs answered "
          + (f"median {med(v):.0f}/s of {len(v)} rounds{sched}" if v else
             "(B idle then: B_DURING=commit)" if idle else "(too short to sample)")
          + (f"; longest between its snapshots (100 ms while busy): median {med(g) * 1e3:.0f} ms, max {max(g) * 1e3:.0f} ms" if g else ""))
try:
    s = json.load(open(f"{w}/stats.json"))
    flat = {}
    def walk(p, v):
        if isinstance(v, dict):
            for k2, v2 in v.items():
                walk(f"{p}.{k2}" if p else k2, v2)
        elif isinstance(v, list):
            for i, v2 in enumerate(v):
                walk(f"{p}[{i}]", v2)
        else:
            flat[p] = v
    walk("", s)
    shown = {k: v for k, v in flat.items() if "deferred" in k or "offload" in k}
    print("  target:", ", ".join(f"{k}={v}" for k, v in shown.items()) or "(no deferred counters in stats)")
except (OSError, ValueError):
    print("  target: stats unavailable")
PY
echo "the target's threads during round 1's COMMIT (count name: allowed CPUs):"
sed 's/^/  /' "$WORK/threads.txt" 2>/dev/null || echo "  (not read)"
echo "== end $(date -u +%FT%TZ) uptime:$(uptime | sed 's/.*load average//')"
grep -E "engine totals|error" "$WORK/target.log" | tail -3 || true
