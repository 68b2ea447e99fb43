#!/usr/bin/env bash
# scripts/ganesha-compare.sh — RDMA against TCP, as the seed paper ("NFS over
# RDMA", 2003) measured it, and against the user-space NFS server a user would
# otherwise pick (issue 24 part 2):
#
#   ours-shm     rpcrdma-target, RPC-over-RDMA v1 over the shm fabric
#   ours-tcp     the same target process and backend, NFSv3 over TCP
#   ganesha-tcp  NFS-Ganesha 4.3 (Debian nfs-ganesha, FSAL VFS), NFSv3 over TCP
#
# NULL, 4 KiB and 1 MiB READ and WRITE at queue depth 1 and 16, each run
# REPS times; the median of each figure, with CPU per operation of perf
# (getrusage) and of the server (/proc/PID/stat over the measured time).
# Both servers serve a directory of this host's file system through the page
# cache: ours a `uring` backend with o_direct off, Ganesha FSAL VFS.
#
# Network: everything runs inside a network namespace of its own with only
# the loopback (unshare --net) and a private /run (unshare --mount): Ganesha
# will not start unless it can register with rpcbind, so an rpcbind runs in
# that namespace and nothing is registered with, or reachable from, the
# host's network. Every process started here is stopped at the end.
#
# Usage (root, from the repository root): scripts/ganesha-compare.sh
# Environment: OUT (default target/ganesha-compare), REPS (3), DURATION (3),
# WARMUP (1), CLIENT_CPU (0), SERVER_CPU (1), SKIP_INSTALL=1, SKIP_BUILD=1,
# TABLE_ONLY=1 (no runs: the table again from the results in OUT).
set -euo pipefail

OUT=${OUT:-target/ganesha-compare}
REPS=${REPS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
TDIR=${CARGO_TARGET_DIR:-target}
PERF="$TDIR/release/perf"
TARGET="$TDIR/release/rpcrdma-target"
NFS_PORT=13049
MNT_PORT=13048
G_NFS_PORT=12049
G_MNT_PORT=12048

if [ "${1:-}" != "--inside" ] && [ -z "${TABLE_ONLY:-}" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "ganesha-compare: needs root (apt-get, unshare, a private /run)" >&2
        exit 1
    fi
    if [ -z "${SKIP_INSTALL:-}" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        # The packages' init scripts must not start a Ganesha listening on
        # every interface: no service starts during the installation.
        had_policy=0
        [ -e /usr/sbin/policy-rc.d ] && had_policy=1
        if [ "$had_policy" = 0 ]; then
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
            chmod +x /usr/sbin/policy-rc.d
        fi
        apt-get install -y -q --no-install-recommends nfs-ganesha nfs-ganesha-vfs rpcbind iproute2 util-linux python3
        [ "$had_policy" = 0 ] && rm -f /usr/sbin/policy-rc.d
    fi
    if [ -z "${SKIP_BUILD:-}" ]; then
        bash scripts/build-deps.sh
        cargo build --release -p rpcrdma-apps --bin rpcrdma-target -p rpcrdma-perf --bin perf
    fi
    mkdir -p "$OUT"
    exec unshare --net --mount --propagation private "$0" --inside
fi

# ---------------------------------------------------------------- inside the namespace
if [ -z "${TABLE_ONLY:-}" ]; then
WORK=$(mktemp -d /tmp/rpcrdma-ganesha-compare.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

mount -t tmpfs tmpfs /run
mkdir -p /run/rpcbind /var/lib/nfs/ganesha
ip link set lo up
echo "ganesha-compare: network namespace with interfaces: $(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')"

wait_port() { # PORT PID LOG
    for _ in $(seq 1 300); do
        if ss -ltn "sport = :$1" | grep -q LISTEN; then return 0; fi
        kill -0 "$2" 2>/dev/null || { tail -20 "$3"; echo "ganesha-compare: server exited" >&2; return 1; }
        sleep 0.1
    done
    echo "ganesha-compare: nothing listens on port $1" >&2
    return 1
}

# idle_cpu NAME PID: the server's CPU over 3 s with no load, in % of a CPU.
idle_cpu() {
    local t0 t1 hz
    hz=$(getconf CLK_TCK)
    t0=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$2/stat")
    sleep 3
    t1=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$2/stat")
    awk -v a="$t0" -v b="$t1" -v hz="$hz" -v n="$1" \
        'BEGIN { printf "%s idle: %.2f%% of a CPU\n", n, (b - a) * 100 / hz / 3 }' | tee "$OUT/$1-idle.txt"
}

stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# run NAME PID PERF-ARGS...: REPS runs, each to $OUT/NAME.rN.json
run() {
    local name=$1 pid=$2
    shift 2
    for r in $(seq 1 "$REPS"); do
        taskset -c "$CLIENT_CPU" "$PERF" "$@" --cores "$CLIENT_CPU" --duration "$DURATION" --warmup "$WARMUP" \
            --target-pid "$pid" --no-progress --json "$OUT/$name.r$r.json" >"$OUT/$name.r$r.txt" 2>&1 ||
            { echo "ganesha-compare: $name run $r failed:" >&2; cat "$OUT/$name.r$r.txt" >&2; }
    done
}

# matrix PREFIX PID TRANSPORT-ARGS NFS-ARGS: the NULL, READ and WRITE runs.
matrix() {
    local prefix=$1 pid=$2 targs=$3 nargs=$4
    for qd in 1 16; do
        # shellcheck disable=SC2086
        run "$prefix-null-qd$qd" "$pid" null $targs --qd "$qd"
        for size in 4k 1M; do
            # shellcheck disable=SC2086
            run "$prefix-write-$size-qd$qd" "$pid" write $targs $nargs --size "$size" --qd "$qd"
            # shellcheck disable=SC2086
            run "$prefix-read-$size-qd$qd" "$pid" read $targs $nargs --size "$size" --qd "$qd"
        done
    done
}

# ---- NFS-Ganesha
rpcbind -f -w >"$WORK/rpcbind.log" 2>&1 &
PIDS+=($!)
GEXPORT="$WORK/ganesha-export"
mkdir -p "$GEXPORT"
cat >"$WORK/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    NFS_Port = $G_NFS_PORT;
    MNT_Port = $G_MNT_PORT;
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1;
    Path = $GEXPORT;
    Pseudo = $GEXPORT;
    Protocols = 3;
    Transports = TCP;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys, none;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
GANESHA_OK=1
taskset -c "$SERVER_CPU" ganesha.nfsd -F -L "$OUT/ganesha.log" -f "$WORK/ganesha.conf" -p "$WORK/ganesha.pid" \
    -N NIV_EVENT >"$WORK/ganesha.out" 2>&1 &
GPID=$!
PIDS+=("$GPID")
if wait_port "$G_NFS_PORT" "$GPID" "$OUT/ganesha.log"; then
    idle_cpu ganesha "$GPID"
    echo "ganesha-compare: NFS-Ganesha (dpkg $(dpkg-query -W -f "\${Version}" nfs-ganesha 2>/dev/null || echo "?")) pid $GPID on port $G_NFS_PORT"
    matrix ganesha-tcp "$GPID" "--transport tcp --target 127.0.0.1:$G_NFS_PORT" \
        "--mount-port $G_MNT_PORT --export $GEXPORT --create --no-resvport"
    stop_pid "$GPID"
else
    GANESHA_OK=0
    echo "ganesha-compare: NFS-Ganesha did not start here (log: $OUT/ganesha.log): no Ganesha figures" | tee "$OUT/ganesha-failed.txt"
fi

# ---- rpcrdma-target on a uring tree
TREE="$WORK/uring-tree"
cat >"$WORK/target.json" <<EOF
{
  "cores": [ { "cpu": $SERVER_CPU, "role": "io" } ],
  "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 } },
  "listeners": {
    "fabric": [ { "address": "127.0.0.1", "port": 20049, "versions": [1, 2] } ],
    "nfs_tcp_port": $NFS_PORT, "mount_tcp_port": $MNT_PORT
  },
  "fabric": { "provider": "shm", "socket_path": "$WORK/fabric.sock" },
  "pools": [
    { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 4096, "page_size": "4K", "per_core_cache": 64 },
    { "name": "send", "usage": "send", "buffer_size_bytes": 4096, "count": 4096, "page_size": "4K", "per_core_cache": 64 },
    { "name": "data", "usage": "data", "buffer_size_bytes": 1114112, "count": 160, "page_size": "4K", "per_core_cache": 8 }
  ],
  "credits": { "max_per_connection": 128 },
  "backends": [ { "name": "tree", "type": "uring", "path": "$TREE", "queue_depth": 128, "o_direct": false } ],
  "exports": [ { "path": "/export", "backend": "tree", "clients": ["127.0.0.0/8"],
                 "read_only": false, "root_squash": false, "allow_auth_none": false } ]
}
EOF
taskset -c "$SERVER_CPU" "$TARGET" -c "$WORK/target.json" >"$OUT/target.log" 2>&1 &
TPID=$!
PIDS+=("$TPID")
wait_port "$NFS_PORT" "$TPID" "$OUT/target.log"
for _ in $(seq 1 100); do [ -S "$WORK/fabric.sock" ] && break; sleep 0.1; done
idle_cpu ours "$TPID"
echo "ganesha-compare: rpcrdma-target pid $TPID (shm $WORK/fabric.sock, NFS over TCP on port $NFS_PORT)"
matrix ours-tcp "$TPID" "--transport tcp --target 127.0.0.1:$NFS_PORT" "--mount-port $MNT_PORT --create"
matrix ours-shm "$TPID" "--fabric shm --target $WORK/fabric.sock" "--mount-port $MNT_PORT --create"
stop_pid "$TPID"
fi

# ---- the table: medians over the runs
[ -e "$OUT/ganesha-failed.txt" ] && GANESHA_OK=0
python3 - "$OUT" "$REPS" "${GANESHA_OK:-1}" <<'EOF' | tee "$OUT/table.md"
import json, re, statistics, sys
out, reps, gok = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def idle_frac(srv):
    try:
        m = re.search(r"idle: ([0-9.]+)%", open(f"{out}/{srv}-idle.txt").read())
        return float(m.group(1)) / 100 if m else 0.0
    except OSError:
        return 0.0
IDLE = {"ours-shm": idle_frac("ours"), "ours-tcp": idle_frac("ours"), "ganesha-tcp": idle_frac("ganesha")}
def net(srv, name):
    """Server CPU per operation less what the idle server uses (its polling)."""
    vals = []
    for r in range(1, reps + 1):
        try:
            d = json.load(open(f"{out}/{name}.r{r}.json"))
        except (OSError, ValueError):
            continue
        c = d.get("cpu") or {}
        if d.get("errors", 1) != 0 or c.get("target_s") is None or not d.get("ops"):
            continue
        vals.append(max(0.0, c["target_s"] - IDLE[srv] * c["wall_s"]) * 1e6 / d["ops"])
    return statistics.median(vals) if vals else None
def med(name, key):
    vals = []
    for r in range(1, reps + 1):
        try:
            d = json.load(open(f"{out}/{name}.r{r}.json"))
        except (OSError, ValueError):
            continue
        if d.get("errors", 1) != 0:
            continue
        v = d
        for k in key:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            vals.append(v)
    return statistics.median(vals) if vals else None
def f(v, nd=1):
    return "-" if v is None else f"{v:,.{nd}f}"
def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"
print(f"Idle server CPU (subtracted in 'net'): ours {IDLE['ours-tcp'] * 100:.2f}%, Ganesha {IDLE['ganesha-tcp'] * 100:.2f}% of a CPU")
print()
print("| op | qd | server | IOPS | MB/s | p50 us | client CPU us/op | server CPU us/op | server net of idle | IOPS vs ours-tcp | net server CPU/op vs ours-tcp |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for qd in (1, 16):
    for op in ("null", "read-4k", "write-4k", "read-1M", "write-1M"):
        base = f"ours-tcp-{op}-qd{qd}"
        b_iops, b_cpu = med(base, ["iops"]), net("ours-tcp", base)
        for srv in ("ours-shm", "ours-tcp", "ganesha-tcp"):
            if srv == "ganesha-tcp" and not gok:
                continue
            n = f"{srv}-{op}-qd{qd}"
            iops, mb = med(n, ["iops"]), med(n, ["mb_per_s"])
            p50 = med(n, ["latency_us", "p50"])
            c, t = med(n, ["cpu", "client_us_per_op"]), med(n, ["cpu", "target_us_per_op"])
            t_net = net(srv, n)
            print(f"| {op} | {qd} | {srv} | {f(iops, 0)} | {f(mb)} | {f(p50)} | {f(c, 2)} | {f(t, 2)} | {f(t_net, 2)} | {ratio(iops, b_iops)} | {ratio(t_net, b_cpu)} |")
EOF
echo "ganesha-compare: results in $OUT (table.md, one JSON and text file per run)"
