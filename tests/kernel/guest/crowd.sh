#!/usr/bin/env bash
# tests/kernel/guest/crowd.sh SRC TAG PID — the crowded-CPU move
# (reactor.move_when_crowded, docs/CONFIG.md) with the kernel client: fio
# 4 KiB random reads at queue depth 1 pinned to the io core's CPU (the
# client crowding the core, as when the kernel places it there) while the
# other vCPU idles. Checks that the target logged its watcher at start, that
# the io core's thread ends pinned to another CPU, and that fio ran; writes
# the IOPS and the core's CPU before and after to $OUT/TAG/crowd.txt.
# PID: the target's (servers.sh's TARGET_PID); its log: $OUT/TAG/target.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

SRC=$1
TAG=$2
TARGET_PID=$3
MP=/mnt/$TAG-crowd
D=$OUT/$TAG
mkdir -p "$D"
LOG=$D/target.log

io_tid() {
    local t
    for t in /proc/"$TARGET_PID"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = reactor-core-1 ] && basename "$t"
    done
}
tid=$(io_tid)
if [ -z "$tid" ]; then
    flunk "$TAG: crowd: the io core's thread (reactor-core-1) of pid ${TARGET_PID:-?}"
    exit 1
fi
if [ "$(nproc)" -lt 2 ]; then
    note "$TAG: crowd: one CPU, nothing to move to (skipped)"
    exit 0
fi
check "$TAG: crowd: the target watches its cores for crowding (start-up log)" \
    grep -q "crowded-CPU move watching the cores" "$LOG"
home=$(taskset -pc "$tid" | sed 's/.*: //')
if ! nfs_mount "$SRC" "$MP"; then
    flunk "$TAG: crowd: mount"
    exit 1
fi
fio --name=crowd-fill --filename="$MP/crowd.dat" --size=16M --rw=write --bs=1M --direct=1 \
    --ioengine=libaio --output=/dev/null >/dev/null 2>&1
# fio on the core's own CPU, for long enough for a few 100 ms windows
taskset -c "$home" fio --name=crowd --filename="$MP/crowd.dat" --size=16M --rw=randread --bs=4k \
    --iodepth=1 --ioengine=libaio --direct=1 --time_based --runtime=6 --randrepeat=0 --norandommap \
    --output-format=json --output="$D/crowd-fio.json" >/dev/null 2>&1
rc=$?
after=$(taskset -pc "$tid" | sed 's/.*: //')
iops=$(python3 -c "import json; print('%.0f' % json.load(open('$D/crowd-fio.json'))['jobs'][0]['read']['iops'])" 2>/dev/null)
echo "io core thread $tid: CPU $home before, $after after; fio on CPU $home: ${iops:-?} IOPS" | tee "$D/crowd.txt"
check_eq "$TAG: crowd: fio pinned to the io core's CPU ran" "$rc" 0
check "$TAG: crowd: the io core moved off the CPU the client crowds (was $home, now $after)" \
    test -n "$after" -a "$after" != "$home"
# The threads kept off the cores' CPUs (the TCP listeners and their
# connections, the statistics thread, and when started the NFS helper pool
# and the NFSv4 record writer: docs/CONFIG.md) follow the move: none may run
# on the io core's new CPU.
helpers=""
for t in /proc/"$TARGET_PID"/task/*; do
    case "$(cat "$t/comm" 2>/dev/null)" in
    nfs-helper-* | nfs4-records | stats | tcp-[0-9]* | tcp-conn-*)
        helpers+="$(cat "$t/comm"):$(taskset -pc "$(basename "$t")" | sed 's/.*: //') " ;;
    esac
done
echo "helper threads after the move: $helpers" | tee -a "$D/crowd.txt"
check "$TAG: crowd: helper threads found" test -n "$helpers"
check "$TAG: crowd: no helper thread may run on the io core's new CPU $after ($helpers)" \
    python3 -c "
import sys
def cpus(s):
    out = set()
    for p in s.split(','):
        a, _, b = p.partition('-')
        out.update(range(int(a), int(b or a) + 1))
    return out
bad = [h for h in sys.argv[2].split() if int(sys.argv[1]) in cpus(h.split(':')[1])]
sys.exit(1 if bad else 0)" "$after" "$helpers"
check "$TAG: crowd: the target logged that the helpers follow" grep -q "helper threads follow" "$LOG"
# The live statistics show where the core runs now and its moves.
check "$TAG: crowd: rpcrdma-target stats shows the io core on CPU $after with a move" \
    sh -c "'${BIN:-/host/bin}/rpcrdma-target' stats -c '$D/target.json' --json | python3 -c \"
import json, sys
d = json.load(sys.stdin)
c = [c for c in d['cores'] if c['core'] == 1][0]
sys.exit(0 if c['cpu'] == $after and c['crowd_moves'] >= 1 and d['total']['crowd_moves'] >= 1 else 1)\""
nfs_umount "$MP"
