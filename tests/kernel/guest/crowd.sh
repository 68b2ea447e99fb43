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
nfs_umount "$MP"
