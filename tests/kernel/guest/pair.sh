#!/usr/bin/env bash
# tests/kernel/guest/pair.sh server|client — the two-guest capture run
# (softroce-vm.sh pair -p): the server guest (10.0.2.15) runs $PAIR_SERVER
# ("ours": rpcrdma-target, or "kernel": knfsd), the client guest (10.0.2.16)
# mounts it over RDMA and runs a small workload whose traffic crosses the
# wire, so the host's capture holds both directions. The guests meet through
# files in $SYNC (the shared directory). Results go to $OUT/pair-<role>/.
set -uo pipefail
ROLE=$1
: "${PAIR_SERVER:=ours}"
export OUT=/host/out/pair-$ROLE
mkdir -p "$OUT/kernel" "$OUT/ours"
G=$(cd "$(dirname "$0")" && pwd)
. "$G/lib.sh"
. "$G/servers.sh"
SYNC=/host/out/pair-sync

if [ "$ROLE" = server ]; then
    rm -rf "$SYNC"
    mkdir -p "$SYNC"
    if [ "$PAIR_SERVER" = ours ]; then ok=ours_start; stop=ours_stop; else ok=knfsd_start; stop=knfsd_stop; fi
    if $ok; then touch "$SYNC/server-ready"; else touch "$SYNC/server-failed"; fi
    check "pair: the client finished within 600 s" wait_for 600 test -e "$SYNC/client-done"
    $stop
    grep -q '^not ok' "$CHECKS" && exit 1
    exit 0
fi

# client
SRC=$VMLAB_PEER_IP:/export
MP=/mnt/pair
# no MOUNT port: the server guest runs no rpcbind, so ours answers port 111
unset MOUNT_PORT
wait_for 300 sh -c "test -e $SYNC/server-ready || test -e $SYNC/server-failed"
if [ ! -e "$SYNC/server-ready" ]; then
    flunk "pair: the server guest did not start $PAIR_SERVER"
    touch "$SYNC/client-done"
    exit 1
fi
note "pair client: rdma link: $(rdma link show | head -1)"
# pair_workload MP LABEL: 1 MiB writes and direct reads of 4 KiB and 256 KiB
# (inline, Read chunk, Write chunk and Reply chunk traffic), a directory
# listing and a symlink
pair_workload() {
    local mp=$1 l=$2 w=$1/pair
    rm -rf "$w"
    mkdir -p "$w/dir"
    printf 'small\n' >"$w/small"
    ln -s small "$w/sl"
    for i in 1 2 3 4 5; do : >"$w/dir/e$i"; done
    head -c 3M /dev/urandom >/tmp/pair.src
    check "$l: write 3 MiB" dd if=/tmp/pair.src of="$w/data" bs=1M conv=fsync status=none
    check_eq "$l: readdir" "$(ls "$w/dir" | tr '\n' ' ')" "e1 e2 e3 e4 e5 "
    # (the client keeps a new symlink's text: drop it, so that READLINK goes out)
    echo 3 >/proc/sys/vm/drop_caches
    check_eq "$l: readlink" "$(readlink "$w/sl")" small
    check "$l: 4 KiB O_DIRECT reads match" cmp <(dd if="$w/data" bs=4k count=16 iflag=direct status=none) \
        <(head -c 64k /tmp/pair.src)
    check "$l: 256 KiB O_DIRECT reads match" cmp <(dd if="$w/data" bs=256k iflag=direct status=none) /tmp/pair.src
    rm -rf "$w"
}
# NFS_VERS (tests/kernel/nfs4.sh: 4.2) mounts NFSv4 instead of v3
if nfs_mount "$SRC" "$MP"; then
    pass "pair: mount $SRC over RDMA from the second guest${NFS_VERS:+ (vers=$NFS_VERS)}"
    check_eq "pair: transport" "$(mount_xprt "$MP")" rdma
    if [ -z "${NFS_VERS:-}" ]; then
        check_eq "pair: showmount -e $VMLAB_PEER_IP (ours answers rpcbind on port 111)" \
            "$(timeout 30 showmount -e "$VMLAB_PEER_IP" 2>&1 | awk '$1 == "/export" { print $1 }')" /export
    fi
    pair_workload "$MP" pair
    check "pair: umount" nfs_umount "$MP"
else
    flunk "pair: mount $SRC over RDMA from the second guest"
    dmesg | tail -20
fi
# PAIR_TCP=1: the same over TCP on 2049 after it
if [ "${PAIR_TCP:-0}" = 1 ]; then
    if NFS_PROTO=tcp nfs_mount "$SRC" "$MP"; then
        pass "pair tcp: mount $SRC over TCP from the second guest${NFS_VERS:+ (vers=$NFS_VERS)}"
        check_eq "pair tcp: transport" "$(mount_xprt "$MP")" tcp
        pair_workload "$MP" "pair tcp"
        check "pair tcp: umount" nfs_umount "$MP"
    else
        flunk "pair tcp: mount $SRC over TCP from the second guest"
        dmesg | tail -20
    fi
fi
touch "$SYNC/client-done"
grep -q '^not ok' "$CHECKS" && exit 1
exit 0
