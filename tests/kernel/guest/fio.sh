#!/usr/bin/env bash
# tests/kernel/guest/fio.sh SRC TAG [PROTO] — the fio matrix of the
# kernel-interop test against one server: 4 KiB random read and write at
# queue depths 1 and 16, 1 MiB sequential read and write at queue depths 1
# and 4, O_DIRECT, libaio, $FIO_SECONDS (default 5) each after a 1 s ramp, on
# one 64 MiB file, over PROTO (rdma, the default, or tcp: NFSv3 over TCP on
# 2049, for the transport comparison of issue 24 part 2).
# Writes $OUT/TAG/fio-<job>.json (rdma) or $OUT/TAG/tcp/fio-<job>.json (tcp)
# (fio --output-format=json, with total-latency percentiles), and the guest's
# CPU time over each job from /proc/stat ("BUSY TOTAL" jiffies before, the
# same after, and the job's wall seconds) to $OUT/TAG/fiocpu-PROTO-<job>.txt
# (report.py turns it into CPU per MB); checks that every job ran without
# errors and did I/O.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

SRC=$1
TAG=$2
PROTO=${3:-rdma}
export NFS_PROTO=$PROTO
MP=/mnt/$TAG
D=$OUT/$TAG
JD=$D
if [ "$PROTO" != rdma ]; then
    MP=/mnt/$TAG-$PROTO
    JD=$D/$PROTO
    mkdir -p "$JD"
    TAG="$TAG $PROTO"
fi
FIO_SECONDS=${FIO_SECONDS:-5}
FIO_FILE_MIB=${FIO_FILE_MIB:-64}
mkdir -p "$D"
t_all=$(now)

if ! nfs_mount "$SRC" "$MP"; then
    flunk "$TAG: mount for fio"
    exit 1
fi
check_eq "$TAG: fio mount transport" "$(mount_xprt "$MP")" "$PROTO"
F=$MP/fio.dat
t=$(now)
check "$TAG: lay out the ${FIO_FILE_MIB} MiB fio file" \
    fio --name=layout --filename="$F" --size="${FIO_FILE_MIB}M" --rw=write --bs=1M --direct=1 \
    --ioengine=libaio --iodepth=4 --end_fsync=1 --output=/dev/null
note "$TAG: fio layout $(elapsed "$t") s"

while read -r name rw bs qd; do
    # FIO_ONLY: the jobs to run (names, space separated), when set
    [ -n "${FIO_ONLY:-}" ] && [[ " $FIO_ONLY " != *" $name "* ]] && continue
    t=$(now)
    rc=0
    c0=$(cpu_jiffies)
    fio_job "$name" "$rw" "$bs" "$qd" "$F" "$FIO_FILE_MIB" "$JD/fio-$name.json" || rc=$?
    echo "$c0 $(cpu_jiffies) $(elapsed "$t")" >"$D/fiocpu-$PROTO-$name.txt"
    summary=$(python3 - "$JD/fio-$name.json" "$rw" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
side = job["read"] if "read" in sys.argv[2] else job["write"]
print("%d %d %.0f %.1f" % (job["error"], side["total_ios"], side["iops"], side["bw_bytes"] / 1e6))
PY
) || summary="unparsable"
    # shellcheck disable=SC2086
    set -- $summary
    if [ $rc = 0 ] && [ "${1:-x}" = 0 ] && [ "${2:-0}" -gt 0 ]; then
        pass "$TAG: fio $name: ${2} I/Os, ${3} IOPS, ${4} MB/s ($(elapsed "$t") s)"
    else
        flunk "$TAG: fio $name (fio exit $rc, error/ios/iops/MBps: $summary)"
    fi
done <<<"$FIO_JOBS"

rm -f "$F"
check "$TAG: umount after fio" nfs_umount "$MP"
note "$TAG: fio matrix done in $(elapsed "$t_all") s"
