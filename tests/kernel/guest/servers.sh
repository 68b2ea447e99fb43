# shellcheck shell=bash
# tests/kernel/guest/servers.sh — start and stop the two NFSv3-over-RDMA
# servers in the guest (sourced after lib.sh). They use the same ports
# (NFS 2049/TCP, 20049/RDMA, MOUNT 20048/TCP for ours), so only one runs at
# a time.
#
#   knfsd_start / knfsd_stop   the kernel's nfsd (vmlab-nfsd-rdma: tmpfs /export)
#   ours_start / ours_stop     rpcrdma-target from $BIN with a config generated
#                              from $BIN/cores.json by gen_config.py
# Env: BIN (staged binaries, default /host/bin), OUT, VMLAB_IP, OURS_TAG (the
# name of ours' results and checks, "ours" unless a variant of it runs:
# single.sh), TARGET_AFFINITY (CPU list: every target thread is moved there
# after the start, with taskset, in place of the reactor's pinning),
# TARGET_BIN (another rpcrdma-target binary, e.g. main's staged by run.sh's
# KINTEROP_BASELINE_BIN; the cores.json beside it, if any, is its config),
# TARGET_URING_TMPFS (1: with TARGET_BACKEND=uring, the tree on a tmpfs).

: "${BIN:=/host/bin}"
GUEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# wait_for SECONDS CMD... : poll CMD every half second until it succeeds.
wait_for() {
    local n=$(($1 * 2))
    shift
    while [ $n -gt 0 ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
        n=$((n - 1))
    done
    return 1
}
tcp_listening() { ss -Hltn "sport = :$1" | grep -q .; }
rdma_listening() { rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*:$1\b"; }

knfsd_start() {
    local t
    t=$(now)
    if EXPORT_SIZE=${KNFSD_EXPORT_SIZE:-1200M} vmlab-nfsd-rdma >"$OUT/kernel/nfsd-start.log" 2>&1; then
        pass "kernel: knfsd started (portlist: $(tr '\n' ' ' </proc/fs/nfsd/portlist), $(elapsed "$t") s)"
    else
        flunk "kernel: knfsd start: $(tail -3 "$OUT/kernel/nfsd-start.log" | tr '\n' ' ')"
        return 1
    fi
    check "kernel: knfsd listens for RDMA on 20049" wait_for 10 rdma_listening 20049
}

knfsd_stop() {
    rpc.nfsd 0
    exportfs -ua
    pkill -x rpc.mountd 2>/dev/null
    check "kernel: knfsd stopped (no NFS listener left on 2049)" wait_for 10 sh -c '! ss -Hltn "sport = :2049" | grep -q .'
    check "kernel: no RDMA listener left on 20049" wait_for 10 sh -c "! rdma resource show cm_id | grep -q 'state LISTEN.*:20049'"
}

TARGET_PID=
OURS_TAG=${OURS_TAG:-ours}
ours_start() {
    local cfg=$OUT/$OURS_TAG/target.json log=$OUT/$OURS_TAG/target.log t
    local tbin=${TARGET_BIN:-$BIN/rpcrdma-target} base=$BIN/cores.json
    [ -f "$(dirname "$tbin")/cores.json" ] && base=$(dirname "$tbin")/cores.json
    mkdir -p "$OUT/$OURS_TAG"
    # TARGET_URING_TMPFS=1: the uring tree on a tmpfs, like the Linux
    # server's export (vmlab-nfsd-rdma), not on the guest's disk
    if [ "${TARGET_BACKEND:-}" = uring ] && [ "${TARGET_URING_TMPFS:-0}" = 1 ]; then
        export TARGET_URING_DIR=/var/tmp/rpcrdma-uring-tmpfs
        mkdir -p "$TARGET_URING_DIR"
        mountpoint -q "$TARGET_URING_DIR" || mount -t tmpfs -o size=1200M tmpfs "$TARGET_URING_DIR" ||
            flunk "$OURS_TAG: a tmpfs for the uring tree"
    fi
    check_eq "$OURS_TAG: the staged binaries find all their libraries in the guest" \
        "$(ldd "$tbin" "$BIN/perf" 2>&1 | grep -c 'not found')" 0
    if ! python3 "$GUEST_DIR/gen_config.py" "$base" "$VMLAB_IP" >"$cfg"; then
        flunk "$OURS_TAG: generate the guest config from configs/cores.json"
        return 1
    fi
    pass "$OURS_TAG: generate the guest config from configs/cores.json"
    check "$OURS_TAG: rpcrdma-target --check-config accepts it" "$tbin" -c "$cfg" --check-config
    t=$(now)
    RUST_LOG=${RUST_LOG:-info} "$tbin" -c "$cfg" >"$log" 2>&1 &
    TARGET_PID=$!
    local rdma_port=${TARGET_RDMA_PORT:-20049} mount_port=${TARGET_MOUNT_PORT:-20048}
    if wait_for 60 rdma_listening "$rdma_port" && wait_for 10 tcp_listening "$mount_port"; then
        pass "$OURS_TAG: rpcrdma-target listens on RDMA $rdma_port and MOUNT $mount_port/TCP ($(elapsed "$t") s)"
    else
        flunk "$OURS_TAG: rpcrdma-target did not come up within 60 s (alive: $(kill -0 $TARGET_PID 2>/dev/null && echo yes || echo no))"
        tail -30 "$log"
        return 1
    fi
    if [ -n "${TARGET_AFFINITY:-}" ]; then
        check "$OURS_TAG: every target thread moved to CPUs $TARGET_AFFINITY" taskset -a -p -c "$TARGET_AFFINITY" "$TARGET_PID"
    fi
    check "$OURS_TAG: NFS ${TARGET_NFS_TCP_PORT:-2049}/TCP listener" tcp_listening "${TARGET_NFS_TCP_PORT:-2049}"
    # TARGET_RPCBIND=off (beside the Linux server): nothing to find through rpcbind
    [ "${TARGET_RPCBIND:-auto}" = off ] && return 0
    # rpcbind: registered with the host's (the kernel server's start left one
    # running), or answered on port 111 by ours when none runs
    if pidof rpcbind >/dev/null; then
        check "$OURS_TAG: registered with rpcbind (log)" wait_for 10 grep -q "registered with the host's rpcbind" "$log"
    else
        check "$OURS_TAG: answers rpcbind on port 111 (log)" wait_for 10 grep -q "answering rpcbind" "$log"
    fi
    check "$OURS_TAG: rpcinfo -p shows NFS v3 over TCP and MOUNT v3 over TCP" sh -c \
        "rpcinfo -p $VMLAB_IP | awk '(\$1 == 100003 && \$3 == \"tcp\" && \$4 == 2049) || (\$1 == 100005 && \$2 == 3 && \$4 == 20048)' | wc -l | grep -qx 2"
    check "$OURS_TAG: rpcinfo -s lists NFS on netid rdma" sh -c \
        "rpcinfo -s $VMLAB_IP | awk '\$1 == 100003' | grep -qw rdma"
}

ours_stop() {
    local rc=0 log=$OUT/$OURS_TAG/target.log had_rpcbind=0
    pidof rpcbind >/dev/null && had_rpcbind=1
    [ -n "$TARGET_PID" ] || return 0
    if ! kill -0 "$TARGET_PID" 2>/dev/null; then
        wait "$TARGET_PID" || rc=$?
        flunk "$OURS_TAG: rpcrdma-target was still running at the end (it exited early with status $rc)"
        tail -30 "$log"
        TARGET_PID=
        return 0
    fi
    kill -TERM "$TARGET_PID"
    if wait_for 30 sh -c "! kill -0 $TARGET_PID"; then
        wait "$TARGET_PID" || rc=$?
        check_eq "$OURS_TAG: rpcrdma-target exits 0 after SIGTERM" "$rc" 0
    else
        flunk "$OURS_TAG: rpcrdma-target still running 30 s after SIGTERM"
        kill -KILL "$TARGET_PID" 2>/dev/null
        wait "$TARGET_PID" 2>/dev/null
    fi
    check_eq "$OURS_TAG: panics in the target log" "$(grep -c 'panicked' "$log")" 0
    if [ $had_rpcbind = 1 ]; then
        check_eq "$OURS_TAG: our rpcbind registrations are gone after exit (MOUNT on 20048)" \
            "$(rpcinfo -p 2>/dev/null | awk '$1 == 100005 && $4 == 20048' | wc -l)" 0
    fi
    # Every Call answered: the engines' totals at shutdown (one line per I/O
    # core: calls, replies, call_errors, unanswered_*, unaccounted).
    local totals
    totals=$(grep 'engine totals' "$log" | sed 's/.*engine totals *//')
    if [ -z "$totals" ]; then
        flunk "$OURS_TAG: the target logged its engine totals at shutdown"
    else
        echo "$totals" | while read -r line; do note "$OURS_TAG: engine totals $line"; done
        grep 'core totals' "$log" | sed 's/.*core totals *//' | while read -r line; do note "$OURS_TAG: core totals $line"; done
        grep 'driver calls' "$log" | sed 's/.*driver calls *//' | while read -r line; do note "$OURS_TAG: driver calls $line"; done
        check_eq "$OURS_TAG: every Call got an RPC reply (calls = replies on every core)" \
            "$(echo "$totals" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } if (v["calls"] != v["replies"]) bad++ } END { print bad + 0 }')" 0
        check_eq "$OURS_TAG: no Call unanswered, unaccounted or held at shutdown" \
            "$(echo "$totals" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } if (v["unanswered_conn_lost"] + v["unanswered_service_drop"] + v["unanswered_other"] + v["unaccounted"] != 0) bad++ } END { print bad + 0 }')" 0
    fi
    check_eq "$OURS_TAG: requests held when the engines stopped" \
        "$(grep 'engine stopped' "$log" | grep -cv 'held_requests=0')" 0
    TARGET_PID=
}
