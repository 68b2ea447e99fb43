#!/usr/bin/env bash
# tests/kernel/guest/perf.sh TAG — the perf tool (rpcrdma-perf) against the
# server now running in this guest, over the verbs provider on rxe0,
# RPC-over-RDMA version 1: NULL round trips and 4 KiB NFS READs (of a 16 MiB
# file it creates and fills), at queue depths 1 and 16, and 64 KiB FILE_SYNC
# WRITEs from 4 connections at once (also over version 2 on ours), $PERF_SECONDS
# (default 5) each after a 1 s warm-up, to RPC-over-RDMA port $PERF_PORT
# (default 20049). MOUNT is reached at $MOUNT_PORT when set, else through
# rpcbind. Writes $OUT/TAG/perf-<job>.json and checks that
# each run exited 0 and completed operations without errors.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
: "${BIN:=/host/bin}"

TAG=$1
D=$OUT/$TAG
PERF_SECONDS=${PERF_SECONDS:-5}
mkdir -p "$D"
mount_args=(--mount-addr "$VMLAB_IP")
[ -n "${MOUNT_PORT:-}" ] && mount_args+=(--mount-port "$MOUNT_PORT")

run_perf() {
    local job=$1 t rc=0 summary
    shift
    # PERF_ONLY: the jobs to run (names, space separated), when set
    [ -n "${PERF_ONLY:-}" ] && [[ " $PERF_ONLY " != *" $job "* ]] && return 0
    t=$(now)
    rm -f "$D/perf-$job.json"
    # --idle-sleep-us: the guest's vCPUs also run rxe's work; a client that
    # busy-polls between replies starves the fabric under emulation.
    timeout 180 "$BIN/perf" "$@" --fabric verbs --target "$VMLAB_IP:${PERF_PORT:-20049}" --vers "${VERS:-1}" --duration "$PERF_SECONDS" \
        --idle-sleep-us "${PERF_IDLE_SLEEP_US:-20}" --no-progress --json "$D/perf-$job.json" >"$D/perf-$job.log" 2>&1 || rc=$?
    summary=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["ops"], r["errors"], "%.0f IOPS, %.2f MB/s, p50 %.1f us, p99 %.1f us"
      % (r["iops"], r["mb_per_s"], r["latency_us"]["p50"], r["latency_us"]["p99"]))' "$D/perf-$job.json" 2>/dev/null) ||
        summary="x x (no JSON result)"
    read -r ops errors rest <<<"$summary"
    if [ $rc = 0 ] && [ "$errors" = 0 ] && [ "$ops" -gt 0 ] 2>/dev/null; then
        pass "$TAG: perf $job: $ops ops, $rest ($(elapsed "$t") s)"
    elif [ "${PERF_SOFT:-0}" = 1 ]; then
        note "$TAG: perf $job FAILED, not counted (PERF_SOFT): exit $rc, ops $ops, errors $errors: $(tail -3 "$D/perf-$job.log" | tr '\n' ' ')"
    else
        flunk "$TAG: perf $job (exit $rc, ops $ops, errors $errors): $(tail -3 "$D/perf-$job.log" | tr '\n' ' ')"
    fi
}

# PERF_NFS=4.1 (tests/kernel/guest/nfs4_compare.sh): the same over NFSv4.1
# COMPOUNDs (a session per connection; NULL is SEQUENCE alone, READ and
# WRITE are SEQUENCE + PUTFH + the operation), no MOUNT.
if [ "${PERF_NFS:-3}" = 4.1 ]; then
    v4=(--nfs 4.1)
    run_perf null-qd1 null "${v4[@]}" --qd 1
    run_perf null-qd16 null "${v4[@]}" --qd 16
    # a 1 MiB file: perf fills it with 4 KiB FILE_SYNC WRITEs one at a time,
    # and 16 MiB of them took longer than the run's time limit in the guest.
    # (perf's READ COMPOUND offers its Write chunk alone: the Linux 6.1
    # server drops the connection when a READ's Call offers a Reply chunk
    # too, counting the Write chunk's data against the Reply chunk's length.)
    run_perf read-4k-qd1 read "${v4[@]}" --export /export --file perf4.dat --create --file-size 1M --size 4k --qd 1
    run_perf read-4k-qd16 read "${v4[@]}" --export /export --file perf4.dat --create --file-size 1M --size 4k --qd 16
    run_perf write-64k-qd8x4 write "${v4[@]}" --export /export --file perf4w.dat --create --file-size 32M \
        --size 64k --qd 8 --conns 4 --stable file
    exit 0
fi
run_perf null-qd1 null --qd 1
run_perf null-qd16 null --qd 16
run_perf read-4k-qd1 read "${mount_args[@]}" --export /export --file perf.dat --create --file-size 16M --size 4k --qd 1
run_perf read-4k-qd16 read "${mount_args[@]}" --export /export --file perf.dat --create --file-size 16M --size 4k --qd 16
# several connections writing at once (64 KiB FILE_SYNC WRITEs through Read
# chunks, 4 connections x 8 outstanding): every Call must be answered, so
# the run ends without errors; on ours over RPC-over-RDMA version 2 as well
# (the kernel's server speaks version 1 only). 64 KiB, not 1 MiB: the
# kernel's server answers perf's 1 MiB WRITEs with RDMA_ERROR (perf at the
# session-9 commit as well; the kernel client's own 1 MiB WRITEs work), an
# open question about perf's Read chunks, not about either server.
run_perf write-64k-qd8x4 write "${mount_args[@]}" --export /export --file perfw.dat --create --file-size 32M \
    --size 64k --qd 8 --conns 4 --stable file
if [ "$TAG" = ours ]; then
    VERS=2 run_perf write-64k-qd8x4-v2 write "${mount_args[@]}" --export /export --file perfw.dat --create \
        --file-size 32M --size 64k --qd 8 --conns 4 --stable file
fi
