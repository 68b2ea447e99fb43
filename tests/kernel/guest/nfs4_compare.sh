#!/usr/bin/env bash
# tests/kernel/guest/nfs4_compare.sh ROUNDS — NFSv4.2 over RDMA against the
# Linux server (vmlab-nfsd-rdma, knfsd on a tmpfs /export) and rpcrdma-target
# (mem backend), side by side on the same fabric, for tests/kernel/nfs4.sh
# (issue 22): each round starts one server, runs the fio matrix of
# tests/kernel/run.sh (fio.sh: 4 KiB random read and write at qd 1 and 16,
# 1 MiB sequential read and write at qd 1 and 4) on a vers=4.2 RDMA mount
# and the perf tool with NFSv4.1 COMPOUNDs (perf.sh, PERF_NFS=4.1), stops
# it, then the other server; the order alternates from round to round.
# Results: $OUT/v42/r<N>/<server>/; nfs4_table.py prints the medians over
# the rounds and ours/kernel ratios into $OUT/v42/table.txt.
# Env: OUT, BIN, VMLAB_IP, FIO_SECONDS, PERF_SECONDS (servers.sh, fio.sh).
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

for r in $(seq 1 "$ROUNDS"); do
    order="kernel ours"
    [ $((r % 2)) = 0 ] && order="ours kernel"
    export OUT=$BASE/r$r
    mkdir -p "$OUT/kernel" "$OUT/ours"
    for s in $order; do
        if [ "$s" = kernel ]; then start=knfsd_start stop=knfsd_stop; else start=ours_start stop=ours_stop; fi
        note "v4.2 comparison round $r: $s"
        if $start; then
            NFS_VERS=4.2 bash "$G/fio.sh" "$SRC" "$s"
            PERF_NFS=4.1 bash "$G/perf.sh" "$s"
        fi
        $stop
    done
done
python3 "$G/nfs4_table.py" "$BASE" | tee "$BASE/table.txt"
