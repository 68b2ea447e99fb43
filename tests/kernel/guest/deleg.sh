#!/usr/bin/env bash
# tests/kernel/guest/deleg.sh server|client — read delegations and their
# recall over RDMA with two kernel clients (issue 23), in the two-guest run
# of tests/kernel/nfs4.sh (softroce-vm.sh pair -p: the wire is captured).
#   server guest (10.0.2.15): rpcrdma-target, and client B: its own mounts
#       of 10.0.2.15 (NFSv4.2 over RDMA, then NFSv3 over RDMA), whose
#       traffic rxe loops inside the guest;
#   client guest (10.0.2.16): client A, an NFSv4.2 mount over RDMA, whose
#       traffic (the CB_RECALLs to it among it) crosses the wire.
# Steps (the guests meet through files in $SYNC, the shared directory):
#   1. A mounts; its mountstats show the backchannel answering (below);
#      A opens and reads a file B wrote and keeps it open: the target's
#      statistics show a delegation held;
#   2. B (vers=4.2) writes the file: the target recalls A's delegation
#      (CB_RECALL on A's connection), A returns it, B's write completes,
#      A reads B's data (checksums);
#   3. the same with B on vers=3 as the writer (its WRITE waits for the
#      recall: NFS3ERR_JUKEBOX until A returned the delegation);
#   4. $DELEG_ROUNDS rounds of A opening a file (a delegation) and B
#      overwriting it (a recall), a file per round: the target's recall-to-DELEGRETURN time,
#      p50 and p99, into $OUT/recall-latency.txt;
#   5. write delegations: A creates a file for reading and writing and
#      writes it (buffered, no fsync, kept open): the target's statistics
#      show a write delegation held and A's mountstats no WRITE sent yet;
#      B (vers=4.2) reads the file: the target recalls A's delegation, A
#      flushes (its WRITEs) and returns it, B reads A's data exactly
#      (checksums); the same with B on vers=3 as the reader (its GETATTR
#      and READ wait for the return) on a second file.
# Results go to /host/out/deleg-<role>/ (checks.txt).
set -uo pipefail
ROLE=$1
# Both guests boot as "softroce", and the Linux client names itself to the
# server by its node name (EXCHANGE_ID's co_ownerid, "Linux NFSv4.1
# <nodename>", unless nfs4_unique_id is set): with one name the target
# rightly takes B's EXCHANGE_ID for A restarting and drops A's state (its
# delegation with it, no recall). Each guest gets a name of its own before
# it mounts.
hostname "deleg-$ROLE"
export OUT=/host/out/deleg-$ROLE
mkdir -p "$OUT/ours"
G=$(cd "$(dirname "$0")" && pwd)
. "$G/lib.sh"
. "$G/servers.sh"
SYNC=/host/out/deleg-sync
: "${DELEG_ROUNDS:=40}"
RDMA42=vers=4.2,proto=rdma,port=20049

# signal NAME [TEXT]: tell the other guest (TEXT: what it should know)
signal() { printf '%s\n' "${2:-}" >"$SYNC/$1.tmp" && mv "$SYNC/$1.tmp" "$SYNC/$1"; }
# await NAME [SECONDS]: the other guest's signal (1: it gave up, or timed out)
await() {
    local n=$((${2:-300} * 10))
    while [ $n -gt 0 ]; do
        [ -e "$SYNC/$1" ] && return 0
        [ -e "$SYNC/abort" ] && return 1
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}
said() { cat "$SYNC/$1"; }
# a guest that stops early (or at the end) lets the other stop waiting
trap 'touch "$SYNC/abort"' EXIT
sha() { sha256sum <"$1" | cut -c1-64; }

if [ "$ROLE" = server ]; then
    # (the server guest boots first; the client only looks after server-ready)
    rm -rf "$SYNC"
    mkdir -p "$SYNC"
    unset MOUNT_PORT
    # nfs4_stat KEY...: the target's "nfs4" statistics (delegations,
    # recalls, callbacks; `rpcrdma-target stats --json`), one value per KEY
    # ("callbacks.recalls_sent" for a nested one; -1s when unreadable)
    nfs4_stat() {
        "$BIN/rpcrdma-target" stats -c "$OUT/ours/target.json" --json >"$OUT/ours/stats.json" 2>>"$OUT/ours/stats.err"
        python3 - "$OUT/ours/stats.json" "$@" <<'PY' 2>>"$OUT/ours/stats.err" || echo "-1 -1 -1 -1 -1"
import json, sys
doc = json.load(open(sys.argv[1]))["nfs4"]
out = []
for k in sys.argv[2:]:
    v = doc
    for part in k.split("."):
        v = v[part]
    out.append(str(v))
print(" ".join(out))
PY
    }
    if ! ours_start; then
        touch "$SYNC/abort"
        exit 1
    fi
    B=/mnt/b
    F=$B/deleg/f
    mkdir -p $B
    if ! timeout 120 mount -t nfs -o "$RDMA42" "$VMLAB_IP:/export" $B; then
        flunk "deleg: client B mounts $VMLAB_IP:/export ($RDMA42)"
        touch "$SYNC/abort"
        ours_stop
        exit 1
    fi
    pass "deleg: client B mounts $VMLAB_IP:/export ($RDMA42)"
    rm -rf $B/deleg
    mkdir -p $B/deleg
    head -c 1M /dev/urandom >/tmp/v0
    check "deleg: B writes the file" cp /tmp/v0 $F
    # part 3 and each round on a file of its own: the target grants no
    # delegation on a file it recalled one from lately (deleg.rs,
    # REGRANT_AFTER_RECALL)
    cp /tmp/v0 $B/deleg/f3
    for i in $(seq 1 "$DELEG_ROUNDS"); do echo start >$B/deleg/r$i; done
    # B created those files for writing: it holds write delegations on
    # them (issue 23). Had A to recall them, the files would be "recently
    # recalled" and A granted no read delegation; a remount returns them
    # (the client's state goes with its last mount of the server).
    if timeout 180 umount $B && timeout 120 mount -t nfs -o "$RDMA42" "$VMLAB_IP:/export" $B; then
        pass "deleg: B remounts after writing the files"
    else
        flunk "deleg: B remounts after writing the files"
    fi
    no_delegs() { [ "$(nfs4_stat delegations_held)" = 0 ]; }
    wait_for 30 no_delegs
    check_eq "deleg: B's write delegations went with its remount (delegations_held)" "$(nfs4_stat delegations_held)" 0
    signal server-ready "$(sha /tmp/v0)"

    # 2. B's vers=4.2 write recalls A's delegation
    if await a-holds; then
        check_eq "deleg: A read B's first version" "$(said a-holds)" "$(sha /tmp/v0)"
        check_eq "deleg: the target's statistics show A's delegation held (delegations_held)" \
            "$(nfs4_stat delegations_held)" 1
        read -r r0 s0 a0 <<<"$(nfs4_stat recalls callbacks.recalls_sent returned_after_recall)"
        head -c 1M /dev/urandom >/tmp/v1
        t=$(now)
        check "deleg: B (vers=4.2) writes the file A holds a delegation on" \
            timeout 300 dd if=/tmp/v1 of=$F bs=1M conv=fsync,notrunc status=none
        note "deleg: B's vers=4.2 write took $(elapsed "$t") s"
        read -r r1 s1 a1 rv <<<"$(nfs4_stat recalls callbacks.recalls_sent returned_after_recall revoked)"
        check_eq "deleg: B's OPEN recalled A's delegation (recalls $r0 -> $r1)" "$((r1 - r0))" 1
        check_eq "deleg: a CB_RECALL went to A (recalls_sent $s0 -> $s1)" "$((s1 - s0))" 1
        check_eq "deleg: A returned it (DELEGRETURN after the recall, $a0 -> $a1), none revoked" "$((a1 - a0)) $rv" "1 0"
        signal b-wrote "$(sha /tmp/v1)"
    else
        flunk "deleg: client A opened the file (no signal from the client guest)"
    fi
    await a-read

    # 3. the same with NFSv3 as the writer
    B3=/mnt/b3
    if nfs_mount "$VMLAB_IP:/export" $B3; then
        pass "deleg: client B mounts $VMLAB_IP:/export (vers=3 over RDMA)"
        signal b3-ready
        if await a-holds2; then
            # (A may still hold one on the first file too)
            check "deleg: the target's statistics show A's delegation on the second file (delegations_held $(nfs4_stat delegations_held))" \
                test "$(nfs4_stat delegations_held)" -ge 1
            read -r r0 a0 <<<"$(nfs4_stat recalls returned_after_recall)"
            head -c 1M /dev/urandom >/tmp/v2
            t=$(now)
            check "deleg: B (vers=3) writes the file A holds a delegation on" \
                timeout 300 dd if=/tmp/v2 of=$B3/deleg/f3 bs=1M conv=fsync,notrunc status=none
            note "deleg: B's vers=3 write took $(elapsed "$t") s"
            read -r r1 a1 rv <<<"$(nfs4_stat recalls returned_after_recall revoked)"
            check_eq "deleg: B's NFSv3 WRITE recalled A's delegation (recalls $r0 -> $r1)" "$((r1 - r0))" 1
            check_eq "deleg: A returned it ($a0 -> $a1), none revoked" "$((a1 - a0)) $rv" "1 0"
            signal b-wrote2 "$(sha /tmp/v2)"
        else
            flunk "deleg: client A reopened the file (no signal)"
        fi
        await a-read2
        check "deleg: B umounts vers=3" nfs_umount $B3
    else
        flunk "deleg: client B mounts $VMLAB_IP:/export (vers=3 over RDMA)"
        signal b3-ready
    fi

    # 4. recall after recall: A opens (a delegation), B overwrites (a recall)
    read -r a0 <<<"$(nfs4_stat returned_after_recall)"
    for i in $(seq 1 "$DELEG_ROUNDS"); do
        await "a-$i" 120 || break
        printf 'round %d\n' "$i" >$B/deleg/r$i
        signal "b-$i"
    done
    await rounds-done 120
    read -r a1 rv p50 p99 n <<<"$(nfs4_stat returned_after_recall revoked recall_to_return_us.p50 \
        recall_to_return_us.p99 recall_to_return_us.samples)"
    # (A may find the file contended when B's CLOSE is late: no delegation,
    # no recall in that round)
    want=$((DELEG_ROUNDS * 3 / 4))
    check "deleg: $DELEG_ROUNDS rounds: A returned at least $want recalled delegations ($((a1 - a0))), none revoked ($rv)" \
        test "$((a1 - a0))" -ge "$want" -a "$rv" = 0
    echo "recall_to_delegreturn_us p50=$p50 p99=$p99 samples=$n rounds=$DELEG_ROUNDS" | tee "$OUT/recall-latency.txt"

    # 5. write delegations: B reads what A wrote under one
    if await a-wholds 300; then
        read -r wh wr0 wt0 rv0 <<<"$(nfs4_stat write_delegations_held write_recalls write_returned revoked)"
        check "deleg write: the target's statistics show A's write delegation held (write_delegations_held $wh)" \
            test "$wh" -ge 1
        t=$(now)
        got=$(timeout 300 sha256sum <$B/deleg/w | cut -c1-64)
        note "deleg write: B's vers=4.2 read took $(elapsed "$t") s"
        check_eq "deleg write: B reads exactly what A wrote under its write delegation, vers=4.2 (checksum)" \
            "$got" "$(said a-wholds)"
        read -r wr1 wt1 rv1 <<<"$(nfs4_stat write_recalls write_returned revoked)"
        check_eq "deleg write: B's read recalled A's write delegation (write_recalls $wr0 -> $wr1), A returned it ($wt0 -> $wt1), none revoked" \
            "$((wr1 - wr0)) $((wt1 - wt0)) $((rv1 - rv0))" "1 1 0"
        signal b-wread
    else
        flunk "deleg write: client A wrote a file under a write delegation (no signal)"
    fi
    if nfs_mount "$VMLAB_IP:/export" $B3; then
        signal b3-wready
        if await a-wholds2 300; then
            read -r wh wr0 wt0 rv0 <<<"$(nfs4_stat write_delegations_held write_recalls write_returned revoked)"
            check "deleg write: the target's statistics show A's write delegation on the second file (write_delegations_held $wh)" \
                test "$wh" -ge 1
            t=$(now)
            got=$(timeout 300 sha256sum <$B3/deleg/w3 | cut -c1-64)
            note "deleg write: B's vers=3 read took $(elapsed "$t") s"
            check_eq "deleg write: B reads exactly what A wrote under its write delegation, vers=3 (checksum)" \
                "$got" "$(said a-wholds2)"
            read -r wr1 wt1 rv1 <<<"$(nfs4_stat write_recalls write_returned revoked)"
            check_eq "deleg write: B's NFSv3 read recalled A's write delegation (write_recalls $wr0 -> $wr1), A returned it ($wt0 -> $wt1), none revoked" \
                "$((wr1 - wr0)) $((wt1 - wt0)) $((rv1 - rv0))" "1 1 0"
        fi
        signal b-wread2
        check "deleg write: B umounts vers=3" nfs_umount $B3
    else
        flunk "deleg write: client B mounts $VMLAB_IP:/export (vers=3 over RDMA)"
        signal b3-wready
    fi
    cp "$OUT/ours/stats.json" "$OUT/stats-final.json"
    check "deleg: B umounts" nfs_umount $B
    signal server-done
    await client-done 300
    ours_stop
    grep -q '^not ok' "$CHECKS" && exit 1
    exit 0
fi

# client A
A=/mnt/a
F=$A/deleg/f
# the mountstats line "xprt: rdma 0 bind_count connect_count connect_time
# idle_time sends recvs bad_xids ..." of kernel 6.1 (xprt_rdma_print_stats)
# has no backchannel counter of its own, but the client's Replies to
# backward Calls go out through the forward transport's xprt_transmit
# (rpc_run_bc_task; RDMA's send_request sends them with
# xprt_rdma_bc_send_reply): each counts in `sends` and never in `recvs`
# (which counts Replies to the client's own Calls). On an idle mount
# sends - recvs is then the number of backward Calls the client answered
# over RDMA: the CB_NULL probe, then each CB_RECALL.
bc_replies() {
    xprt_rdma "$1" | awk '{ print $8 - $9 }'
}
# op_count MP OP: the mount's count of NFS operation OP (mountstats)
op_count() {
    awk -v mp="$1" -v op="$2:" '$1 == "device" { on = ($5 == mp) } on && $1 == op { print $2; exit }' /proc/self/mountstats
}
if ! await server-ready 300; then
    flunk "deleg: the server guest started rpcrdma-target"
    exit 1
fi
mkdir -p $A
if ! timeout 120 mount -t nfs -o "$RDMA42" "$VMLAB_PEER_IP:/export" $A; then
    flunk "deleg: client A mounts $VMLAB_PEER_IP:/export ($RDMA42)"
    dmesg | tail -20
    touch "$SYNC/abort"
    exit 1
fi
pass "deleg: client A mounts $VMLAB_PEER_IP:/export ($RDMA42)"
check_eq "deleg: A's transport" "$(mount_xprt $A)" rdma
# the CB_NULL probe follows CREATE_SESSION; give it time to be answered
probe_answered() { [ "$(bc_replies $A)" -ge 1 ]; }
wait_for 20 probe_answered
bc0=$(bc_replies $A)
check "deleg: A's mountstats show the backchannel in use: it answered the CB_NULL probe over RDMA (xprt rdma sends - recvs = $bc0)" \
    test "$bc0" -ge 1
# 1. open, read, hold
exec 3<"$F"
signal a-holds "$(sha "$F")"
# 2.
if await b-wrote 400; then
    check_eq "deleg: A reads B's vers=4.2 write (checksum)" "$(sha "$F")" "$(said b-wrote)"
    bc1=$(bc_replies $A)
    check "deleg: A answered the CB_RECALL over RDMA (xprt rdma sends - recvs $bc0 -> $bc1)" test "$bc1" -gt "$bc0"
    check "deleg: A sent DELEGRETURN ($(op_count $A DELEGRETURN) in mountstats)" test "$(op_count $A DELEGRETURN)" -ge 1
fi
exec 3<&-
signal a-read
# 3.
if await b3-ready 300; then
    signal a-holds2 "$(sha $A/deleg/f3)"
    if await b-wrote2 400; then
        check_eq "deleg: A reads B's vers=3 write (checksum)" "$(sha $A/deleg/f3)" "$(said b-wrote2)"
    fi
fi
signal a-read2
# 4.
bad=0
for i in $(seq 1 "$DELEG_ROUNDS"); do
    cat $A/deleg/r$i >/dev/null
    signal "a-$i"
    await "b-$i" 120 || { bad=$((bad + 1)); break; }
    [ "$(cat $A/deleg/r$i)" = "round $i" ] || bad=$((bad + 1))
done
signal rounds-done
check_eq "deleg: $DELEG_ROUNDS rounds: A read each of B's overwrites" "$bad" 0
# 5. write delegations: A writes (buffered, no fsync) and keeps the file
# open; B's read recalls the delegation and A's flush is what B reads
# wdeleg_round FILE FD DATA SIGNAL WAIT: one write-delegation round
wdeleg_round() {
    local f=$1 fd=$2 data=$3 w0 w1 d0 d1
    d0=$(op_count $A DELEGRETURN)
    eval "exec $fd<>\"\$f\""
    cat "$data" >&"$fd"
    w0=$(op_count $A WRITE)
    note "deleg write: A wrote $(stat -c %s "$f") bytes to $f, WRITEs sent so far $w0"
    signal "$4" "$(sha "$data")"
    if await "$5" 400; then
        w1=$(op_count $A WRITE)
        d1=$(op_count $A DELEGRETURN)
        # (the client may have written some back before the recall)
        check "deleg write: A returned the delegation on the recall (DELEGRETURN $d0 -> $d1; WRITEs $w0 before the recall, $w1 after)" \
            test "$d1" -gt "$d0"
        check_eq "deleg write: A still reads its own data ($f)" "$(sha "$f")" "$(sha "$data")"
    fi
    eval "exec $fd>&-"
}
head -c 3M /dev/urandom >/tmp/w1
head -c 2M /dev/urandom >/tmp/w2
wdeleg_round $A/deleg/w 4 /tmp/w1 a-wholds b-wread
if await b3-wready 300; then
    wdeleg_round $A/deleg/w3 5 /tmp/w2 a-wholds2 b-wread2
fi
note "deleg: A's mountstats: DELEGRETURN $(op_count $A DELEGRETURN), OPEN $(op_count $A OPEN), xprt rdma sends - recvs $(bc_replies $A)"
cp /proc/self/mountstats "$OUT/mountstats.txt"
await server-done 600
check "deleg: A umounts" nfs_umount $A
signal client-done
grep -q '^not ok' "$CHECKS" && exit 1
exit 0
