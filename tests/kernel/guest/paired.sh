#!/usr/bin/env bash
# tests/kernel/guest/paired.sh — the ratio rows of the kernel-interop test
# (the fio matrix and the perf tool) measured pair by pair, with the Linux
# server and rpcrdma-target up at the same time.
#
# Why: the emulated guest's speed drifts by tens of per cent over seconds
# (one server's qd-1 4 KiB IOPS moves 1.5x between two 5 s jobs of one
# process), so figures taken minutes apart, as the passes of single.sh are,
# compare the drift as much as the servers. Here each job runs against one
# server and at once against the other, the order alternating from job to
# job and pair to pair, $KINTEROP_PAIRS times (default 3); each row's figure
# is the median over the pairs of the per-pair ratio (medians.py, the same
# arithmetic as KINTEROP_ROUNDS), with the kernel's server against itself
# from pair to pair as the noise band.
#
# The Linux server keeps the standard ports (RDMA 20049, NFS 2049, rpcbind);
# ours runs beside it with configs/cores.json's settings on RDMA port 20050,
# NFS 2050/TCP and MOUNT 20050/TCP, not registered with rpcbind, and is
# mounted with mountport= (TARGET_RDMA_PORT, TARGET_NFS_TCP_PORT,
# TARGET_MOUNT_PORT, TARGET_RPCBIND of gen_config.py). Each server's export
# is its own mount (nosharecache), checked to be that server's by a file
# made in the Linux server's tmpfs.
#
# PAIRED_VERS (3, or 4.2: both mounts NFSv4.2 over RDMA and the perf tool
# with NFSv4.1 COMPOUNDs, for tests/kernel/nfs4.sh) and PAIRED_NAME (paired)
# name the run. Results: $OUT/$PAIRED_NAME/<server>[.rN]/{fio,perf}-<job>.json,
# the table in $OUT/$PAIRED_NAME-medians.txt (and medians.json beside the
# results).
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
. "$G/lib.sh"
. "$G/servers.sh"
export CHECKS
PAIRS=${KINTEROP_PAIRS:-3}
VERS=${PAIRED_VERS:-3}
NAME=${PAIRED_NAME:-paired}
P=$OUT/$NAME
rm -rf "$P"
mkdir -p "$P" "$OUT/kernel"
SRC=$VMLAB_IP:/export
MK=/mnt/$NAME-kernel MO=/mnt/$NAME-ours
unset NFS_VERS PERF_NFS
if [ "$VERS" != 3 ]; then
    export NFS_VERS=$VERS PERF_NFS=4.1
fi
OURS_PORT=20050
FIO_FILE_MIB=${FIO_FILE_MIB:-64}

export OURS_TAG=$NAME-ours TARGET_RDMA_PORT=$OURS_PORT TARGET_NFS_TCP_PORT=2050 \
    TARGET_MOUNT_PORT=$OURS_PORT TARGET_RPCBIND=off
unset MOUNT_PORT
# PAIRED_OURS_ENV="VAR=VALUE ...": ours with other settings (gen_config.py's)
read -ra ours_env <<<"${PAIRED_OURS_ENV:-}"
for kv in "${ours_env[@]}"; do export "${kv?}"; done
[ ${#ours_env[@]} = 0 ] || note "$NAME: ours with ${ours_env[*]}"
knfsd_start || exit 1
if ! ours_start; then
    knfsd_stop
    exit 1
fi
# the kernel's MOUNT through rpcbind, ours' at its port
ok=1
nfs_mount "$SRC" "$MK" nosharecache || ok=0
if [ "$VERS" = 3 ]; then
    MOUNT_PORT=$OURS_PORT NFS_PORT=$OURS_PORT nfs_mount "$SRC" "$MO" nosharecache || ok=0
else
    NFS_PORT=$OURS_PORT nfs_mount "$SRC" "$MO" nosharecache || ok=0
fi
if [ $ok = 1 ]; then
    pass "$NAME: both servers mounted at once over RDMA, NFS version $VERS (ours on port $OURS_PORT)"
    marker=.paired-$$
    touch "/export/$marker"
    check "$NAME: each mount reaches its own server (a file in the Linux server's export shows on its mount only)" \
        sh -c "test -e $MK/$marker && ! test -e $MO/$marker"
    rm -f "/export/$marker"
    for mp in $MK $MO; do
        check "$NAME: lay out the ${FIO_FILE_MIB} MiB fio file on $mp" \
            fio --name=layout --filename="$mp/fio.dat" --size="${FIO_FILE_MIB}M" --rw=write --bs=1M --direct=1 \
            --ioengine=libaio --iodepth=4 --end_fsync=1 --output=/dev/null
    done
else
    flunk "$NAME: both servers mounted at once over RDMA, NFS version $VERS"
fi

passes=()
# run_on SERVER PASS WHAT...: one slice, fio (WHAT = fio NAME RW BS QD) or
# the perf tool (WHAT = perf JOB), against SERVER into $P/PASS
run_on() {
    local s=$1 pass=$2 kind=$3 rc=0
    shift 3
    mkdir -p "$P/$pass"
    if [ "$kind" = fio ]; then
        local mp=$MK
        [ "$s" = ours ] && mp=$MO
        fio_job "$1" "$2" "$3" "$4" "$mp/fio.dat" "$FIO_FILE_MIB" "$P/$pass/fio-$1.json" >/dev/null || rc=$?
        [ $rc = 0 ] || flunk "$NAME: fio $1 against $s (pair $pass): exit $rc"
    else
        if [ "$s" = ours ]; then
            OUT=$P PERF_ONLY=$1 PERF_PORT=$OURS_PORT MOUNT_PORT=$OURS_PORT bash "$G/perf.sh" "$pass" >/dev/null
        else
            OUT=$P PERF_ONLY=$1 bash "$G/perf.sh" "$pass" >/dev/null
        fi
    fi
}

# both WHAT...: the slice on both servers of pair $p, into $k and $o, the
# order alternating from slice to slice ($i) and from pair to pair, so
# neither server always runs first after the other's job
both() {
    if (((i + p) % 2)); then
        run_on kernel "$k" "$@"
        run_on ours "$o" "$@"
    else
        run_on ours "$o" "$@"
        run_on kernel "$k" "$@"
    fi
    i=$((i + 1))
}

PERF_JOBS="null-qd1 null-qd16 read-4k-qd1 read-4k-qd16 write-64k-qd8x4"
t=$(now)
if [ $ok = 1 ]; then
    for ((p = 1; p <= PAIRS; p++)); do
        if [ $p = 1 ]; then k=kernel o=ours; else k=kernel.r$p o=ours.r$p; fi
        passes+=("$k" "$o")
        i=0
        while read -r name rw bs qd; do
            [ -n "${FIO_ONLY:-}" ] && [[ " $FIO_ONLY " != *" $name "* ]] && continue
            both fio "$name" "$rw" "$bs" "$qd"
        done <<<"$FIO_JOBS"
        if [ -x "$BIN/perf" ]; then
            for job in $PERF_JOBS; do
                [ -n "${PERF_ONLY:-}" ] && [[ " $PERF_ONLY " != *" $job "* ]] && continue
                both perf "$job"
            done
        fi
        note "$NAME: pair $p of $PAIRS done ($(elapsed "$t") s)"
    done
fi

# How often each mount's transport (re)connected (mountstats "xprt: rdma
# 0 bind_count connect_count ...": 1 when it never reconnected), and the
# kernel's transport messages: a reconnect in the middle of a job leaves a
# Call of the old connection unanswered on the server's side.
for mp in $MK $MO; do
    note "$NAME: $mp transport connects: $(xprt_rdma "$mp" | awk '{ print $5 }')"
done
dmesg | grep -iE 'rpcrdma|xprtrdma|rpc-rdma|nfs: server' >"$OUT/paired-dmesg.txt" || true
note "$NAME: kernel transport messages: $(wc -l <"$OUT/paired-dmesg.txt") (paired-dmesg.txt)"
while read -r line; do note "$NAME: dmesg: $line"; done < <(tail -5 "$OUT/paired-dmesg.txt")

for mp in $MK $MO; do
    rm -f "$mp/fio.dat"
    mountpoint -q "$mp" && check "$NAME: umount $mp" nfs_umount "$mp"
done
ours_stop
knfsd_stop
if [ ${#passes[@]} -gt 0 ]; then
    {
        echo "Paired slices, NFS version $VERS over RDMA: both servers up at once, each row's figure the median over $PAIRS pairs of the per-pair ratio"
        python3 "$G/medians.py" "$P" "${passes[@]}"
    } | tee "$OUT/$NAME-medians.txt"
fi
note "$NAME: done in $(elapsed "$t") s"
