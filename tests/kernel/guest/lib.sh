# shellcheck shell=bash
# tests/kernel/guest/lib.sh — helpers sourced by the guest scripts (bash).
#
# Every check prints one line, "ok - WHAT" or "not ok - WHAT (details)", and
# appends the same line to $OUT/checks.txt, which the host reads for the
# verdict. A failed check does not stop the script: later checks still run
# and report, unless the caller gives up on a section (for example when the
# mount itself failed).

: "${OUT:=/host/out}"
: "${CHECKS:=$OUT/checks.txt}"

note() { echo "[guest $(cut -d' ' -f1 /proc/uptime)s] $*"; }

pass() { echo "ok - $*" | tee -a "$CHECKS"; }
flunk() { echo "not ok - $*" | tee -a "$CHECKS"; }

# check WHAT CMD... : the check holds when CMD exits 0.
check() {
    local what=$1 rc=0
    shift
    "$@" || rc=$?
    if [ $rc = 0 ]; then pass "$what"; else flunk "$what (exit $rc: $*)"; fi
    return 0
}

# check_fails WHAT CMD... : the check holds when CMD exits non-zero.
check_fails() {
    local what=$1 rc=0
    shift
    "$@" 2>/dev/null || rc=$?
    if [ $rc != 0 ]; then pass "$what"; else flunk "$what (succeeded: $*)"; fi
    return 0
}

# check_eq WHAT GOT WANT
check_eq() {
    if [ "$2" = "$3" ]; then pass "$1 ($2)"; else flunk "$1 (got '$2', want '$3')"; fi
    return 0
}

# the mountstats transport line of the NFS mount on MOUNTPOINT ("rdma", "tcp", ...)
mount_xprt() {
    awk -v mp="$1" '$1 == "device" { cur = ($5 == mp) } cur && $1 == "xprt:" { print $2; exit }' /proc/self/mountstats
}

# nfs_mount SRC MOUNTPOINT [extra options]: NFSv3 over RDMA on 20049, the
# plain way: no mountport or mountproto, the mount helper asks the server's
# rpcbind where MOUNT is (both servers: the kernel's mountd registers with
# rpcbind, rpcrdma-target registers too or answers port 111 itself).
# $MOUNT_PORT (optional) pins the MOUNT port. NFS_PROTO=tcp mounts NFSv3
# over TCP on 2049 instead (fio.sh's transport comparison). NFS_VERS=4.2
# (or 4.1) mounts that NFSv4 minor version instead, with its own locking.
# $NFS_PORT (optional) is the RPC-over-RDMA port instead of 20049.
nfs_mount() {
    local src=$1 mp=$2 extra=${3:-} opts
    opts="vers=3,proto=rdma,port=${NFS_PORT:-20049},nolock"
    [ "${NFS_PROTO:-rdma}" = tcp ] && opts="vers=3,proto=tcp,port=2049,nolock"
    [ -n "${NFS_VERS:-}" ] && opts="${opts/vers=3/vers=$NFS_VERS}" && opts=${opts%,nolock}
    [ -n "${MOUNT_PORT:-}" ] && opts="$opts,mountproto=tcp,mountport=$MOUNT_PORT"
    [ -n "$extra" ] && opts="$opts,$extra"
    mkdir -p "$mp"
    timeout 120 mount -t nfs -o "$opts" "$src" "$mp"
}

# nfs_umount MOUNTPOINT: unmount (flushing dirty data), bounded in time.
nfs_umount() {
    timeout 180 umount "$1"
}

# cpu_jiffies: "BUSY TOTAL" from the first line of /proc/stat (busy: all but
# idle and iowait), for CPU per MB over an interval
cpu_jiffies() {
    awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}

# seconds since boot with centiseconds, for timing sections
now() { cut -d' ' -f1 /proc/uptime; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME: the functional workload's steps are timed one after the other,
# each from its own `step` call to the next (or to `step_end`), into
# $OUT/$TAG/steps.txt as "NAME SECONDS"; compare_steps.py holds the two
# servers' times side by side. NAME has no spaces.
STEP_NAME=
STEP_T=
step() {
    step_end
    STEP_NAME=$1
    STEP_T=$(now)
}
step_end() {
    if [ -n "$STEP_NAME" ]; then
        echo "$STEP_NAME $(elapsed "$STEP_T")" >>"$OUT/$TAG/steps.txt"
    fi
    STEP_NAME=
}

# The fio matrix (fio.sh, and paired.sh's slices): job name, rw, block size,
# queue depth.
FIO_JOBS="rand-read-4k-qd1 randread 4k 1
rand-read-4k-qd16 randread 4k 16
rand-write-4k-qd1 randwrite 4k 1
rand-write-4k-qd16 randwrite 4k 16
seq-read-1m-qd1 read 1M 1
seq-read-1m-qd4 read 1M 4
seq-write-1m-qd1 write 1M 1
seq-write-1m-qd4 write 1M 4"

# fio_job NAME RW BS QD FILE MIB JSON: one job of the matrix on FILE (MIB
# MiB), O_DIRECT through libaio, $FIO_SECONDS (default 5) after a 1 s ramp,
# the result with total-latency percentiles as JSON in JSON.
fio_job() {
    fio --name="$1" --filename="$5" --size="${6}M" --rw="$2" --bs="$3" --iodepth="$4" \
        --ioengine=libaio --direct=1 --time_based --runtime="${FIO_SECONDS:-5}" --ramp_time=1 \
        --lat_percentiles=1 --randrepeat=0 --norandommap \
        --output-format=json --output="$7"
}

# xprt_rdma MP: the "xprt: rdma ..." line of mount MP in /proc/self/mountstats
# (kernel 6.1, xprt_rdma_print_stats: "xprt: rdma 0 bind_count connect_count
# connect_time idle_time sends recvs bad_xids ..."); empty if MP has none.
xprt_rdma() {
    awk -v mp="$1" '$1 == "device" { on = ($5 == mp) } on && $1 == "xprt:" && $2 == "rdma" { print; exit }' /proc/self/mountstats
}
