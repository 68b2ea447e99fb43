# shellcheck shell=bash
# tests/kernel/guest/nfs4_state.sh — the NFSv4 state steps of
# tests/kernel/guest/nfs4.sh (issue 22), sourced after lib.sh and servers.sh,
# each run against rpcrdma-target already started (ours_start) on a `uring`
# backend with `nfs4.state_dir` set:
#   nfs4_restart   a writer of checksummed files on a vers=4.2 RDMA mount and a
#                  process holding a POSIX lock; the target is killed (SIGKILL)
#                  mid-write and started again; the client reclaims, the writer
#                  finishes, the lock is still held against another process,
#                  and every file reads back with its checksum after a remount
#   nfs4_locks     locks.py on a local file and on vers=4.1 and vers=4.2 RDMA
#                  mounts: every case as on the local file system
#   nfs4_nconnect  vers=4.1 and vers=4.2 with nconnect=4 over RDMA and TCP:
#                  the transports in mountstats (4; over RDMA 1 on kernels
#                  that ignore it), as many connections at the target, the
#                  workload passes, fio traffic on every transport
# Uses $VMLAB_IP, $OUT, $BIN, $TARGET_PID (servers.sh), the `workload`
# function of nfs4.sh.

NFS4_SRC=$VMLAB_IP:/export
NFS4_RDMA=proto=rdma,port=20049

# nfs4_mount OPTS MOUNTPOINT WHAT: mount, one check line
nfs4_mount() {
    mkdir -p "$2"
    if timeout 120 mount -t nfs -o "$1" "$NFS4_SRC" "$2" 2>"$OUT/ours/mount.err"; then
        pass "$3: mount -o $1"
    else
        flunk "$3: mount -o $1: $(tr '\n' ' ' <"$OUT/ours/mount.err")"
        dmesg | tail -10
        return 1
    fi
}

# The target's live connection count (rpcrdma-target stats, all cores).
target_connections() {
    local doc=$OUT/ours/stats.json
    "$BIN/rpcrdma-target" stats -c "$OUT/ours/target.json" --json >"$doc" 2>"$doc.err"
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["total"]["live"]["connections"])' "$doc" \
        2>>"$doc.err" || echo "?"
}

target_has_connections() { [ "$(target_connections)" = "$1" ]; }

nfs4_restart() {
    local mp=/mnt/restart what="restart vers=4.2 rdma" src=/tmp/restart-src n=${NFS4_RESTART_FILES:-16} i
    local w writer holder rc k t
    nfs4_mount "vers=4.2,$NFS4_RDMA" "$mp" "$what" || return 0
    rm -rf "$src" /tmp/restart-progress /tmp/restart-held
    mkdir -p "$src"
    for i in $(seq 1 "$n"); do head -c 4M /dev/urandom >"$src/f$i"; done
    (cd "$src" && sha256sum f*) >/tmp/restart.sha
    w=$mp/restart
    rm -rf "$w"
    mkdir -p "$w"
    # A process holding a POSIX write lock on bytes 0-99 across the restart
    # (the client reclaims it in the grace period), until /tmp/restart-hold goes.
    touch /tmp/restart-hold
    python3 - "$w/locked" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
open("/tmp/restart-held", "w").close()
while os.path.exists("/tmp/restart-hold"):
    time.sleep(0.2)
fcntl.lockf(fd, fcntl.LOCK_UN, 100, 0)
os.close(fd)
PY
    holder=$!
    check "$what: a process holds a POSIX lock on the mount" wait_for 60 test -e /tmp/restart-held
    # The writer: 4 MiB files, every third written with fsync, the rest left
    # to the client's write-back (UNSTABLE WRITEs and COMMIT), then sync.
    (
        for i in $(seq 1 "$n"); do
            if [ $((i % 3)) = 0 ]; then
                dd if="$src/f$i" of="$w/f$i" bs=1M conv=fsync status=none || exit 1
            else
                cp "$src/f$i" "$w/f$i" || exit 1
            fi
            echo "$i" >>/tmp/restart-progress
            sleep 0.3 # paced, so that the kill lands mid-write
        done
        sync
    ) &
    writer=$!
    check "$what: the writer wrote 3 files before the kill" wait_for 300 sh -c '[ "$(wc -l </tmp/restart-progress 2>/dev/null || echo 0)" -ge 3 ]'
    k=$(wc -l </tmp/restart-progress)
    kill -KILL "$TARGET_PID"
    wait "$TARGET_PID" 2>/dev/null
    TARGET_PID=
    if kill -0 "$writer" 2>/dev/null; then
        pass "$what: target killed (SIGKILL) while the writer ran ($k of $n files done)"
    else
        flunk "$what: the writer had finished before the kill (make NFS4_RESTART_FILES larger)"
    fi
    cp "$OUT/ours/target.log" "$OUT/ours/target-killed.log"
    sleep 2
    t=$(now)
    ours_start || return 0
    rc=0
    if wait_for 600 sh -c "! kill -0 $writer"; then
        wait "$writer" || rc=$?
        check_eq "$what: the writer finished after the restart ($(elapsed "$t") s after it)" "$rc" 0
    else
        flunk "$what: the writer still runs 600 s after the restart"
        kill "$writer" 2>/dev/null
    fi
    # The lock was reclaimed: another process still cannot take it.
    check_eq "$what: the POSIX lock is still held after the restart (another process's attempt)" \
        "$(python3 -c '
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
    print("granted")
except OSError as e:
    print("conflict" if e.errno in (errno.EAGAIN, errno.EACCES) else errno.errorcode[e.errno])' "$w/locked" 2>&1)" conflict
    rm -f /tmp/restart-hold
    rc=0
    wait "$holder" || rc=$?
    check_eq "$what: the lock holder unlocked and exited" "$rc" 0
    check "$what: umount" nfs_umount "$mp"
    nfs4_mount "vers=4.2,$NFS4_RDMA" "$mp" "$what: remount" || return 0
    check "$what: all $n files read back with their checksums" sh -c "cd '$w' && sha256sum --quiet -c /tmp/restart.sha"
    rm -rf "$w"
    check "$what: umount after the check" nfs_umount "$mp"
    check_eq "$what: the client's dmesg has no failed reclaim" \
        "$(dmesg | grep -ciE 'reclaim.*fail|lost.*lock|lock.*lost')" 0
}

nfs4_locks() {
    local v mp out line
    rm -f /tmp/locks-local.dat
    python3 "$GUEST_DIR/locks.py" /tmp/locks-local.dat >"$OUT/ours/locks-local.txt" 2>&1
    while read -r line; do
        set -- $line
        check_eq "locks on the local file system: $1" "$2" "$3"
    done <"$OUT/ours/locks-local.txt"
    for v in 4.1 4.2; do
        mp=/mnt/locks-$v
        nfs4_mount "vers=$v,$NFS4_RDMA" "$mp" "locks vers=$v rdma" || continue
        out=$OUT/ours/locks-$v.txt
        if ! timeout 600 python3 "$GUEST_DIR/locks.py" "$mp/locks.dat" >"$out" 2>&1; then
            flunk "locks vers=$v rdma: locks.py ran ($(tail -3 "$out" | tr '\n' ' '))"
        fi
        while read -r line; do
            set -- $line
            [ $# = 3 ] || continue
            check_eq "locks vers=$v rdma: $1 (as on the local file system)" "$2" "$3"
        done <"$out"
        check_eq "locks vers=$v rdma: as many cases as locally" "$(wc -l <"$out")" "$(wc -l <"$OUT/ours/locks-local.txt")"
        rm -f "$mp/locks.dat"
        check "locks vers=$v rdma: umount" nfs_umount "$mp"
    done
}

# xprt_count MOUNTPOINT KIND: transports of KIND ("rdma", "tcp") in mountstats
xprt_count() {
    awk -v mp="$1" -v k="$2" '$1 == "device" { on = ($5 == mp) } on && $1 == "xprt:" && $2 == k { n++ } END { print n + 0 }' /proc/self/mountstats
}
# server_connections KIND: the target's connections now: RDMA from its
# statistics, TCP from the sockets established on 2049
server_connections() {
    if [ "$1" = rdma ]; then target_connections; else ss -Htn state established "sport = :2049" | wc -l; fi
}
server_has_connections() { [ "$(server_connections "$1")" = "$2" ]; }

# nconnect=4 over RDMA and over TCP. The Linux client before 6.11 or so
# gives an NFSv4 mount its nconnect transports over TCP only (fs/nfs/
# nfs4client.c, nfs4_set_client: `if (proto == XPRT_TRANSPORT_TCP)
# cl_init.nconnect = nconnect`; RDMA came later): over RDMA on such a kernel
# the mount must work on one connection, and the target must see as many
# connections as the client has transports either way.
nfs4_nconnect() {
    local v p mp what sends n want
    for p in rdma tcp; do
        for v in 4.1 4.2; do
            mp=/mnt/nc-$v-$p
            what="nconnect=4 vers=$v $p"
            if [ "$p" = rdma ]; then opts="vers=$v,$NFS4_RDMA,nconnect=4"; else opts="vers=$v,proto=tcp,nconnect=4"; fi
            nfs4_mount "$opts" "$mp" "$what" || continue
            n=$(xprt_count "$mp" "$p")
            want=4
            if [ "$p" = rdma ] && [ "$n" = 1 ]; then
                want=1
                note "$what: the client made 1 RDMA transport: kernel $(uname -r) applies nconnect to NFSv4 over TCP only"
            fi
            check_eq "$what: $p transports in mountstats" "$n" "$want"
            check "$what: the target has $n connection(s)" wait_for 10 server_has_connections "$p" "$n"
            note "$what: the target's $p connections: $(server_connections "$p")"
            workload "$mp" "$what"
            # 4 jobs of 4 KiB random reads, so that every transport carries Calls
            fio --name=layout --filename="$mp/nc.dat" --size=16M --rw=write --bs=1M --direct=1 --ioengine=libaio \
                --iodepth=4 --end_fsync=1 --output=/dev/null >/dev/null 2>&1
            check "$what: fio 4k random reads, 4 jobs at qd 4" fio --name=nc --filename="$mp/nc.dat" --size=16M \
                --rw=randread --bs=4k --iodepth=4 --numjobs=4 --ioengine=libaio --direct=1 --time_based --runtime=3 \
                --group_reporting --output=/dev/null
            # mountstats' xprt line: "xprt: rdma srcport bind_count connect_count
            # connect_time idle_time sends ..." (sends: field 8); "xprt: tcp
            # srcport bind_count connect_count connect_time idle_time sends"
            sends=$(awk -v mp="$mp" -v k="$p" '$1 == "device" { on = ($5 == mp) } on && $1 == "xprt:" && $2 == k { printf "%s ", $8 }' /proc/self/mountstats)
            check "$what: every transport carried Calls (sends: $sends)" \
                sh -c "[ \"\$(echo $sends | tr ' ' '\n' | awk '\$1 > 0' | wc -l)\" = $n ]"
            rm -f "$mp/nc.dat"
            check "$what: umount" nfs_umount "$mp"
        done
    done
}
