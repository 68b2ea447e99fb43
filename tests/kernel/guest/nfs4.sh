#!/usr/bin/env bash
# tests/kernel/guest/nfs4.sh — the kernel's NFS client mounting rpcrdma-target
# with NFSv4.1 and NFSv4.2, over TCP (2049) and RDMA (20049), in one guest
# (run by tests/kernel/nfs4.sh through softroce-vm.sh run, the stage directory
# at /host). For each mount: the transport in /proc/self/mountstats and the
# version in /proc/mounts, then a small workload (a file written and read
# back, directories, a rename, a symlink, a hard link, removal) and the
# unmount. Then the target stops and must have answered every Call.
# Then, per $NFS4_STEPS (all by default but deleg and fio):
#   tshark    dissects the two-guest capture of a vers=4.2 mount over RDMA
#             and over TCP (tshark4.sh, when $PAIR_PCAP is there);
#   restart   the target killed mid-write, the client reclaims, no data lost;
#   locks     two processes' fcntl and flock locks as on a local file system;
#   nconnect  nconnect=4 with vers=4.1 and 4.2 over RDMA
#             (the last three: nfs4_state.sh, one target on `uring` with
#             nfs4.state_dir);
#   deleg     issue 23: the two-guest capture of deleg.sh (two clients, a
#             read delegation recalled over RDMA) dissected (tshark_cb.sh,
#             when $DELEG_PCAP is there); a read-mostly job with
#             delegations on and off (nfs4_deleg.sh);
#   fio       vers=4.2 over RDMA against the Linux server, fio and perf side
#             by side, $NFS4_FIO_ROUNDS rounds (nfs4_compare.sh);
#   paired    the same rows with both servers up at once, pair by pair,
#             $NFS4_PAIRS pairs (paired.sh: the figures the emulator's drift
#             moves least);
#   perop     the RPCs and target system calls per 4 KiB qd-1 fio op,
#             vers=3 against vers=4.2, both servers (nfs4_perop.sh).
# Exits non-zero when a check failed. Settings come from /host/env.sh.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
export OUT=/host/out BIN=/host/bin
[ -f /host/env.sh ] && . /host/env.sh
. "$G/lib.sh"
. "$G/servers.sh"
. "$G/nfs4_state.sh"
. "$G/nfs4_deleg.sh"
mkdir -p "$OUT/ours"
: "${NFS4_MOUNTS:=4.1/tcp 4.1/rdma 4.2/rdma 4.2/tcp default/rdma default/tcp}"
: "${NFS4_BACKENDS:=mem uring}"
: "${NFS4_STEPS:=matrix tshark restart locks nconnect}"
note "guest: kernel $(uname -r), $(nproc) CPUs; mounts: $NFS4_MOUNTS; backends: $NFS4_BACKENDS; steps: $NFS4_STEPS"
has_step() { [[ " $NFS4_STEPS " == *" $1 "* ]]; }

workload() {
    local mp=$1 what=$2 d
    d=$mp/w-$RANDOM
    check "$what: mkdir" mkdir -p "$d/sub/deeper"
    check "$what: write 8 MiB" dd if=/dev/urandom of=/tmp/src bs=1M count=8 status=none
    check "$what: copy in" cp /tmp/src "$d/file"
    check "$what: sync" sync
    echo 3 >/proc/sys/vm/drop_caches
    check "$what: read back equal" cmp /tmp/src "$d/file"
    check_eq "$what: size" "$(stat -c %s "$d/file")" 8388608
    check "$what: rename" mv "$d/file" "$d/sub/moved"
    check "$what: symlink" ln -s sub/moved "$d/link"
    check_eq "$what: readlink" "$(readlink "$d/link")" sub/moved
    check "$what: hard link" ln "$d/sub/moved" "$d/hard"
    check_eq "$what: link count" "$(stat -c %h "$d/hard")" 2
    check "$what: chmod" chmod 600 "$d/hard"
    check_eq "$what: mode" "$(stat -c %a "$d/sub/moved")" 600
    check "$what: append" sh -c "echo tail >>'$d/hard'"
    check_eq "$what: listing" "$(ls "$d" | tr '\n' ' ')" "hard link sub "
    check "$what: remove all" rm -rf "$d"
    check_fails "$what: gone" stat "$d"
}

# A capture of NFS over TCP and RoCE (UDP 4791), kept for tshark when a
# COMPOUND is refused.
if command -v dumpcap >/dev/null; then
    dumpcap -q -i any -f "tcp port 2049 or udp port 4791" -w "$OUT/ours/nfs4.pcapng" 2>/dev/null &
    CAP_PID=$!
fi
# Each backend in turn: mem, and uring (whose I/O completes later, so
# READ, WRITE and COMMIT are deferred and namespace COMPOUNDs run on the
# helper pool).
has_step matrix || NFS4_BACKENDS=
for be in $NFS4_BACKENDS; do
    export TARGET_BACKEND=$be
    ours_start || exit 1
    for m in $NFS4_MOUNTS; do
        v=${m%/*} p=${m#*/}
        mp=/mnt/$be-v$v-$p
        # "default": no vers= at all; the client must land on 4.2.
        if [ "$v" = default ]; then opts="proto=$p" want=4.2; else opts="vers=$v,proto=$p" want=$v; fi
        [ "$p" = rdma ] && opts="$opts,port=20049"
        what="$be $opts"
        mkdir -p "$mp"
        if timeout 120 mount -t nfs -o "$opts" "$VMLAB_IP:/export" "$mp" 2>"$OUT/ours/mount-$be-$v-$p.err"; then
            pass "mount $what"
        else
            flunk "mount $what: $(tr '\n' ' ' <"$OUT/ours/mount-$be-$v-$p.err")"
            dmesg | tail -20
            # What was refused, from the capture so far.
            command -v tshark >/dev/null && [ -s "$OUT/ours/nfs4.pcapng" ] &&
                timeout 300 tshark -r "$OUT/ours/nfs4.pcapng" -d udp.port==4791,infiniband \
                    -Y 'rpc.replystat != 0 || rpc.state_accept != 0 || nfs.nfsstat4 != 0 || rpcrdma.errcode || _ws.malformed' 2>&1 |
                head -40
            continue
        fi
        check_eq "$what: transport in mountstats" "$(mount_xprt "$mp")" "$p"
        check_eq "$what: version in /proc/mounts" "$(awk -v mp="$mp" '$2 == mp' /proc/mounts | grep -o "vers=[0-9.]*")" "vers=$want"
        workload "$mp" "$what"
        check "$what: umount" nfs_umount "$mp"
    done
    ours_stop
done
[ -n "${CAP_PID:-}" ] && kill "$CAP_PID" 2>/dev/null
# no_stall LABEL FILE: the client's log since the last `dmesg -C` has no
# RPC time-out (a Call the target never answered)
no_stall() {
    dmesg >"$2"
    check_eq "$1: the client's dmesg has no 'not responding'" "$(grep -c 'not responding' "$2")" 0
    dmesg -C
}
has_step matrix && no_stall matrix "$OUT/ours/dmesg.txt"

# The capture of the two-guest run (tests/kernel/nfs4.sh): NFSv4.2 over RDMA
# and TCP against ours, dissected with no malformed frame.
if has_step tshark; then
    if [ -n "${PAIR_PCAP:-}" ]; then
        bash "$G/tshark4.sh" "$OUT/$PAIR_PCAP" 10.0.2.15 pair4
    else
        flunk "tshark: no two-guest capture (PAIR_PCAP unset)"
    fi
fi

# Delegations (issue 23): the capture of the two-guest recall run, then
# the read-mostly job with them on and off (one target on mem each time).
if has_step deleg; then
    if [ -n "${DELEG_PCAP:-}" ]; then
        bash "$G/tshark_cb.sh" "$OUT/$DELEG_PCAP" 10.0.2.15 deleg-pcap
    else
        flunk "deleg: no two-guest capture (DELEG_PCAP unset)"
    fi
    export TARGET_BACKEND=mem
    nfs4_deleg_fio
    unset TARGET_BACKEND
fi

# State through the kernel client: one target on uring with client records.
if has_step restart || has_step locks || has_step nconnect; then
    export TARGET_BACKEND=uring TARGET_NFS4_STATE_DIR=/var/tmp/rpcrdma-nfs4-state
    rm -rf "$TARGET_NFS4_STATE_DIR"
    if ours_start; then
        # restart first: its grace period then waits for this one client only
        # (its own kill makes the client log 'not responding': no check)
        if has_step restart; then
            nfs4_restart
            dmesg >"$OUT/ours/dmesg-restart.txt"
            dmesg -C
        fi
        has_step locks && nfs4_locks
        has_step nconnect && nfs4_nconnect
    fi
    ours_stop
    unset TARGET_BACKEND TARGET_NFS4_STATE_DIR
fi

# vers=4.2 over RDMA, the Linux server and ours side by side.
if has_step fio; then
    timeout -s KILL 3000 bash "$G/nfs4_compare.sh" "${NFS4_FIO_ROUNDS:-1}" ||
        note "nfs4_compare.sh exit $?"
fi
# vers=4.2 over RDMA, both servers up at once, pair by pair (paired.sh)
if has_step paired; then
    PAIRED_VERS=4.2 PAIRED_NAME=paired-v42 KINTEROP_PAIRS=${NFS4_PAIRS:-3} \
        timeout -s KILL 3000 bash "$G/paired.sh" || note "paired.sh exit $?"
fi
if has_step perop; then
    timeout -s KILL 1200 bash "$G/nfs4_perop.sh" || note "nfs4_perop.sh exit $?"
fi
if has_step locks || has_step nconnect || has_step fio || has_step paired; then
    no_stall "locks, nconnect, fio, paired" "$OUT/ours/dmesg-after.txt"
fi
n_bad=$(grep -c '^not ok' "$CHECKS")
note "guest checks: $(grep -c '^ok' "$CHECKS") ok, $n_bad not ok"
[ "$n_bad" = 0 ]
