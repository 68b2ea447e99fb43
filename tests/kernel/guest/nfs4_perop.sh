#!/usr/bin/env bash
# tests/kernel/guest/nfs4_perop.sh — where an NFSv4.2 4 KiB qd-1 fio op
# costs more than an NFSv3 one (issue 22's last figure): against each
# server (the Linux server, then ours on $NFS4_FIO_BACKEND), a vers=3 and a
# vers=4.2 mount over RDMA in turn, and on each the two qd-1 4 KiB jobs
# (rand-read, rand-write; O_DIRECT, libaio, $FIO_SECONDS each, no ramp so
# that the counters and fio's count cover the same ops) with, per job, the RPCs the kernel client sent (the per-operation
# counters of /proc/self/mountstats before and after: count, and mean RTT
# and execute time per RPC), so the two versions and the two servers are
# compared per fio op. Against ours, also the target's system calls per
# fio op (strace -c -f over a second run of each job in the first round,
# when strace is there). $NFS4_PEROP_ROUNDS rounds (1), the order of the
# versions flipping from round to round. (No capture: the kernel client
# and the servers share the guest's rxe device, whose traffic to itself
# never reaches an interface.) Results: $OUT/perop/r<N>/<server>/v<vers>/,
# the table in $OUT/perop/table.txt (perop_table.py: per row the median
# over the rounds and every round's figure).
# Ours runs on each backend of $NFS4_FIO_BACKEND in turn (server names
# ours-mem, ours-uring); when $BIN/base/rpcrdma-target is there
# (NFS4_BASELINE_BIN of tests/kernel/nfs4.sh), that build runs too, as
# base-mem, base-uring.
# Env: OUT, BIN, VMLAB_IP, FIO_SECONDS (5), NFS4_PEROP_BACKEND (else
# NFS4_FIO_BACKEND, else mem; several: "mem uring"), NFS4_PEROP_ROUNDS (1), NFS4_PEROP_STRACE (1; 0: no strace run),
# NFS4_PEROP_STRACE=stack: that run's strace records every system call
# with the target's stack (strace -k; perop_stacks.py counts them per fio
# op by the target's function that made them),
# NFS4_PEROP_NODELEG (0; 1: ours also with delegations off, "nod-<backend>"),
# NFS4_PEROP_VARIANT ("VAR=value ...": ours also with those in its
# environment, e.g. gen_config.py's TARGET_SPIN_US, "var-<backend>"),
# NFS4_PEROP_RESTART (0; 1: ours restarted per version, its exit totals kept),
# NFS4_PEROP_TRACE (0; 1: a traced 2-second read job per server and version
# in round 1, trace_job).
# Ours' live statistics are taken around each job (perop_engine.py: engine
# counters, service and reply-posted time, per fio op). Around every job
# also each vCPU's times and the Soft-RoCE device's counters (perop_cpu.py:
# CPU per fio op by vCPU, counters per fio op) and the guest's wall clock
# (for the host's samples of NFS4_PEROP_HOSTSCHED).
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
export CHECKS=${CHECKS:-$OUT/checks.txt}
. "$G/lib.sh"
. "$G/servers.sh"
BASE=$OUT/perop
mkdir -p "$BASE"
SRC=$VMLAB_IP:/export
SECS=${FIO_SECONDS:-5}
unset MOUNT_PORT TARGET_NFS4_STATE_DIR

# opstats MOUNTPOINT FILE: the per-op counters of the mount, "OP ops rtt_ms exec_ms"
# (and its transport line, FILE.xprt)
opstats() {
    awk -v mp="$1" -v FILENAME_OUT="$2" '$1 == "device" { cur = ($5 == mp) }
        cur && $1 == "xprt:" { print "XPRT", $0 > (FILENAME_OUT ".xprt") }
        cur && $1 == "per-op" { inops = 1; next }
        cur && inops && $1 ~ /:$/ && NF >= 9 { sub(":", "", $1); print $1, $2, $8, $9 }' /proc/self/mountstats >"$2"
}

# rxecounters: the Soft-RoCE device's counters (RNR NAKs, retries,
# deferred ACKs, ...), one "name value" per line
rxecounters() {
    local f
    for f in /sys/class/infiniband/*/ports/*/hw_counters/*; do
        [ -r "$f" ] && echo "${f##*/} $(cat "$f")"
    done 2>/dev/null
}

# tstats FILE: ours' live statistics (JSON) now, when ours runs
tstats() {
    [ -n "$TARGET_PID" ] || return 0
    "${TARGET_BIN:-$BIN/rpcrdma-target}" -c "$OUT/$OURS_TAG/target.json" stats --json >"$1" 2>/dev/null || rm -f "$1"
}

# job NAME RW MP DIR [strace]: one fio job on MP, counters around it
job() {
    local name=$1 rw=$2 mp=$3 d=$4 sp=
    opstats "$mp" "$d/$name.before"
    [ "${5:-}" = strace ] || tstats "$d/$name.stats.before"
    if [ "${5:-}" = strace ] && [ -n "$TARGET_PID" ] && command -v strace >/dev/null; then
        if [ "${NFS4_PEROP_STRACE:-1}" = stack ]; then
            # every system call with the target's stack at it (perop_stacks.py)
            strace -f -k -qq -p "$TARGET_PID" -o "$d/$name.stack" &
        else
            strace -c -f -qq -p "$TARGET_PID" -o "$d/$name.strace" &
        fi
        sp=$!
        sleep 1
    fi
    # when it ran (the guest's wall clock, for the host's per-thread
    # scheduling samples of NFS4_PEROP_HOSTSCHED) and each vCPU's times
    grep '^cpu[0-9]' /proc/stat >"$d/$name.pstat.before"
    rxecounters >"$d/$name.rxe.before"
    date +%s.%N >"$d/$name.when"
    fio --name="$name" --filename="$mp/perop.dat" --size=64M --rw="$rw" --bs=4k --iodepth=1 \
        --ioengine=libaio --direct=1 --time_based --runtime="$SECS" \
        --randrepeat=0 --norandommap --output-format=json --output="$d/$name.json" >/dev/null 2>&1 ||
        flunk "perop $d $name: fio exit $?"
    date +%s.%N >>"$d/$name.when"
    grep '^cpu[0-9]' /proc/stat >"$d/$name.pstat.after"
    rxecounters >"$d/$name.rxe.after"
    if [ -n "$sp" ]; then
        kill -INT "$sp"
        wait "$sp" 2>/dev/null
    fi
    opstats "$mp" "$d/$name.after"
    [ "${5:-}" = strace ] || tstats "$d/$name.stats.after"
}

# trace_job MP DIR: a 2-second 4 KiB qd-1 random-read job with the RPC
# client's and RPC-over-RDMA's trace events on (sunrpc, rpcrdma: both
# sides, in this one guest), the events kept as DIR/trace.txt
# (NFS4_PEROP_TRACE=1, round 1; perop_trace.py reads them)
trace_job() {
    local t=/sys/kernel/tracing
    [ -d "$t/events" ] || mount -t tracefs nodev "$t" 2>/dev/null
    [ -d "$t/events/rpcrdma" ] || {
        note "perop trace: no rpcrdma trace events ($(ls "$t/events" 2>/dev/null | tr '\n' ' '))"
        return 0
    }
    # The events stay enabled from the first job on (disabling them, or
    # clearing the ring, hung the 6.1 guest); tracing_on brackets each job,
    # and the ring is consumed (trace_pipe). Every later job of the boot
    # runs with the tracepoints on: a traced run tells where an RPC's time
    # goes, not the IOPS of the table.
    # The target's system calls go through the raw_syscalls filter.
    if [ ! -e /tmp/perop-trace-on ]; then
        echo 0 >"$t/tracing_on"
        echo 16384 >"$t/buffer_size_kb"
        echo 1 >"$t/events/rpcrdma/enable"
        echo 1 >"$t/events/sunrpc/rpc_task_begin/enable"
        echo 1 >"$t/events/sunrpc/rpc_task_end/enable"
        echo 1 >"$t/events/sunrpc/rpc_stats_latency/enable" 2>/dev/null
        # who runs where: the scheduler's switches and wake-ups, and the
        # system calls that post work requests and wait (write to the
        # verbs device, epoll_wait)
        echo 1 >"$t/events/sched/sched_switch/enable"
        echo 1 >"$t/events/sched/sched_wakeup/enable"
        echo 1 >"$t/events/syscalls/sys_enter_write/enable" 2>/dev/null
        echo 1 >"$t/events/syscalls/sys_exit_write/enable" 2>/dev/null
        echo 1 >"$t/events/syscalls/sys_enter_epoll_wait/enable" 2>/dev/null
        echo 1 >"$t/events/syscalls/sys_exit_epoll_wait/enable" 2>/dev/null
        # every system call's number, of the target's threads only
        if [ -d "$t/events/raw_syscalls/sys_enter" ]; then
            echo 'comm ~ "reactor*"' >"$t/events/raw_syscalls/sys_enter/filter" 2>/dev/null &&
                echo 1 >"$t/events/raw_syscalls/sys_enter/enable"
        fi
        touch /tmp/perop-trace-on
        note "perop trace: events on"
    fi
    echo 1 >"$t/tracing_on"
    fio --name=trace --filename="$1/perop.dat" --size=64M --rw=randread --bs=4k --iodepth=1 \
        --ioengine=libaio --direct=1 --time_based --runtime=2 --randrepeat=0 --norandommap \
        --output=/dev/null >/dev/null 2>&1
    echo 0 >"$t/tracing_on"
    timeout 60 cat "$t/trace_pipe" >"$2/trace.txt" &
    local cp=$!
    # trace_pipe blocks once empty: stop reading when the file stops growing
    local last=-1 now=0
    while kill -0 "$cp" 2>/dev/null; do
        sleep 1
        now=$(stat -c %s "$2/trace.txt" 2>/dev/null || echo 0)
        [ "$now" = "$last" ] && break
        last=$now
    done
    kill "$cp" 2>/dev/null
    wait "$cp" 2>/dev/null
    note "perop trace: $(wc -l <"$2/trace.txt") lines"
}

# Rounds: in each, both servers in turn, and on each the two versions in
# turn, the order of both flipping from round to round (kernel then ours
# with 3 then 4.2, then ours then kernel with 4.2 then 3, ...), so that a drift in the guest's speed weighs on both; the
# target's system calls are counted in the first round only.
ROUNDS=${NFS4_PEROP_ROUNDS:-1}
# ours on each backend of $NFS4_FIO_BACKEND ("mem uring": ours-mem,
# ours-uring), and the baseline build the same way when it is there
SERVERS=kernel
for be in ${NFS4_PEROP_BACKEND:-${NFS4_FIO_BACKEND:-mem}}; do
    [ -x "$BIN/base/rpcrdma-target" ] && SERVERS="$SERVERS base-$be"
    SERVERS="$SERVERS ours-$be"
    # NFS4_PEROP_NODELEG=1: ours again with nfs4.delegations off ("nod")
    [ "${NFS4_PEROP_NODELEG:-0}" = 1 ] && SERVERS="$SERVERS nod-$be"
    # NFS4_PEROP_VARIANT="VAR=value ...": ours again with those
    # variables in its environment (gen_config.py's TARGET_*), "var"
    [ -n "${NFS4_PEROP_VARIANT:-}" ] && SERVERS="$SERVERS var-$be"
done
# NFS4_PEROP_RESTART=1: ours restarted for each version, so that its log's
# core and engine totals at exit (loops, sleeps, spin_caught, ...) are per
# version (kept as DIR/target.log)
RESTART=${NFS4_PEROP_RESTART:-0}
for r in $(seq 1 "$ROUNDS"); do
    vers="3 4.2"
    servers=$SERVERS
    if [ $((r % 2)) = 0 ]; then
        vers="4.2 3"
        servers=$(echo "$SERVERS" | tr ' ' '\n' | tac | tr '\n' ' ')
    fi
    for s in $servers; do
        unset TARGET_BIN
        export OURS_TAG=$s
        be=${s#*-}
        if [ "$s" = kernel ]; then start=knfsd_start stop=knfsd_stop; else start=ours_start stop=ours_stop; fi
        [ "${s%%-*}" = base ] && export TARGET_BIN=$BIN/base/rpcrdma-target
        for kv in ${NFS4_PEROP_VARIANT:-}; do
            if [ "${s%%-*}" = var ]; then export "${kv?}"; else unset "${kv%%=*}"; fi
        done
        deleg=1
        [ "${s%%-*}" = nod ] && deleg=0
        mkdir -p "$OUT/kernel" "$OUT/$s"
        note "perop round $r: $s (load $(cut -d' ' -f1-3 /proc/loadavg))"
        each=0
        [ "$RESTART" = 1 ] && [ "$s" != kernel ] && each=1
        if [ $each = 0 ]; then TARGET_DELEGATIONS=$deleg TARGET_BACKEND=$be $start || continue; fi
        for v in $vers; do
            d=$BASE/r$r/$s/v$v
            mkdir -p "$d"
            if [ $each = 1 ]; then TARGET_DELEGATIONS=$deleg TARGET_BACKEND=$be $start || continue; fi
            mp=/mnt/perop-$s-$v
            if ! NFS_VERS=$v nfs_mount "$SRC" "$mp"; then
                flunk "perop $s vers=$v: mount"
                continue
            fi
            fio --name=layout --filename="$mp/perop.dat" --size=64M --rw=write --bs=1M --direct=1 \
                --ioengine=libaio --iodepth=4 --end_fsync=1 --output=/dev/null >/dev/null 2>&1
            job rand-read-4k-qd1 randread "$mp" "$d"
            job rand-write-4k-qd1 randwrite "$mp" "$d"
            if [ "$r" = 1 ] && [ "${NFS4_PEROP_TRACE:-0}" = 1 ]; then
                trace_job "$mp" "$d"
            fi
            if [ "${s%%-*}" = ours ] && [ "$r" = 1 ] && [ "${NFS4_PEROP_STRACE:-1}" != 0 ]; then
                mkdir -p "$d/strace"
                job rand-read-4k-qd1 randread "$mp" "$d/strace" strace
                job rand-write-4k-qd1 randwrite "$mp" "$d/strace" strace
            fi
            rm -f "$mp/perop.dat"
            nfs_umount "$mp" || flunk "perop $s vers=$v: umount"
            if [ $each = 1 ]; then
                $stop
                cp "$OUT/$s/target.log" "$d/target.log" 2>/dev/null
            fi
        done
        if [ $each = 0 ]; then
            if [ "$s" != kernel ] && [ -n "$TARGET_PID" ]; then
                "$BIN/rpcrdma-target" -c "$OUT/$s/target.json" stats >"$BASE/r$r/$s/stats.txt" 2>&1 || true
            fi
            $stop
        fi
    done
done
export OURS_TAG=ours
unset TARGET_BIN
python3 "$G/perop_table.py" "$BASE" | tee "$BASE/table.txt"
python3 "$G/perop_engine.py" "$BASE" | tee -a "$BASE/table.txt"
python3 "$G/perop_stacks.py" "$BASE" | tee -a "$BASE/table.txt"
python3 "$G/perop_trace.py" "$BASE" | tee -a "$BASE/table.txt"
python3 "$G/perop_cpu.py" "$BASE" | tee -a "$BASE/table.txt"
