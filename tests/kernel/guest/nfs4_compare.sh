#!/usr/bin/env bash
# tests/kernel/guest/nfs4_compare.sh ROUNDS — NFSv4.2 over RDMA against the
# Linux server (vmlab-nfsd-rdma, knfsd on a tmpfs /export) and rpcrdma-target
# ($NFS4_FIO_BACKEND, default mem), side by side on the same fabric, for
# tests/kernel/nfs4.sh (issue 22): each round starts one server, runs the
# fio matrix of tests/kernel/run.sh (fio.sh: 4 KiB random read and write at
# qd 1 and 16, 1 MiB sequential read and write at qd 1 and 4, on the same
# 64 MiB file laid out afresh) on a vers=4.2,proto=rdma mount and, unless
# NFS4_FIO_PERF=0, the perf tool with NFSv4.1 COMPOUNDs (perf.sh,
# PERF_NFS=4.1), stops it, then the other server. The servers alternate
# in one boot and the order of each pair flips from round to round
# (kernel ours, ours kernel, kernel ours, ...: a drift in the guest's or the
# host's speed over the run then weighs on both), written to
# $OUT/v42/r<N>/order.txt. Results: $OUT/v42/r<N>/<server>/; nfs4_table.py
# prints the medians over the rounds, the ratios of the medians (latency:
# lower is better), every round's IOPS ratio, the Linux server's spread over
# its own rounds (the noise floor) and how many fio rows are at or above
# 1.0x, into $OUT/v42/table.txt.
# Env: OUT, BIN, VMLAB_IP, FIO_SECONDS, PERF_SECONDS (servers.sh, fio.sh),
# NFS4_FIO_PERF (1), NFS4_FIO_BACKEND (mem; several, e.g. "mem uring": ours
# on each in every round, the others as "ours-<backend>", with a table each),
# NFS4_SPIN_US (below; ours on the first backend).
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${1:-1}
export CHECKS=${CHECKS:-$OUT/checks.txt}
. "$G/lib.sh"
. "$G/servers.sh"
BASE=$OUT/v42
mkdir -p "$BASE"
SRC=$VMLAB_IP:/export
unset MOUNT_PORT TARGET_BACKEND TARGET_NFS4_STATE_DIR

# $NFS4_FIO_BACKEND may name several backends ("mem uring"): ours runs on
# each in every round, the first as "ours", the others as "ours-<backend>".
BACKENDS=${NFS4_FIO_BACKEND:-mem}
FIRST_BE=${BACKENDS%% *}
SERVERS="kernel ours"
for be in ${BACKENDS#"$FIRST_BE"}; do SERVERS="$SERVERS ours-$be"; done
for r in $(seq 1 "$ROUNDS"); do
    order=$SERVERS
    [ $((r % 2)) = 0 ] && order=$(echo "$SERVERS" | tr ' ' '\n' | tac | tr '\n' ' ')
    export OUT=$BASE/r$r
    mkdir -p "$OUT/kernel" "$OUT/ours"
    echo "$order" >"$OUT/order.txt"
    for s in $order; do
        be=$FIRST_BE
        if [ "$s" = kernel ]; then start=knfsd_start stop=knfsd_stop; else start=ours_start stop=ours_stop; fi
        [ "$s" != "${s#ours-}" ] && be=${s#ours-}
        export OURS_TAG=ours
        [ "$s" = kernel ] || OURS_TAG=$s
        note "v4.2 comparison round $r: $s (load $(cut -d' ' -f1-3 /proc/loadavg))"
        if TARGET_BACKEND=$be $start; then
            NFS_VERS=4.2 bash "$G/fio.sh" "$SRC" "$s"
            [ "${NFS4_FIO_PERF:-1}" = 0 ] || PERF_NFS=4.1 bash "$G/perf.sh" "$s"
        fi
        $stop
    done
done
export OURS_TAG=ours
# Where ours loses the time at qd 1: the same jobs against ours with its
# cores spinning $NFS4_SPIN_US before they block (spin_then_wait's spin_us;
# the shipped 50 us lets a core sleep between a kernel client's Calls, and
# waking it costs a scheduler round trip in this guest). 0: skip.
if [ "${NFS4_SPIN_US:-5000}" != 0 ]; then
    export OUT=$BASE/spin
    mkdir -p "$OUT/ours"
    note "v4.2 comparison: ours with spin_us ${NFS4_SPIN_US:-5000}"
    if TARGET_BACKEND=${NFS4_FIO_BACKEND:-mem} TARGET_SPIN_US=${NFS4_SPIN_US:-5000} ours_start; then
        FIO_ONLY="rand-read-4k-qd1 rand-write-4k-qd1" NFS_VERS=4.2 bash "$G/fio.sh" "$SRC" ours
        [ "${NFS4_FIO_PERF:-1}" = 0 ] || PERF_ONLY="null-qd1" PERF_NFS=4.1 bash "$G/perf.sh" ours
    fi
    ours_stop
fi
python3 "$G/nfs4_table.py" "$BASE" | tee "$BASE/table.txt"
for be in ${BACKENDS#"$FIRST_BE"}; do
    echo
    python3 "$G/nfs4_table.py" "$BASE" "ours-$be"
done | tee -a "$BASE/table.txt"
