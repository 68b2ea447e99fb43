#!/usr/bin/env bash
# tests/kernel/guest/posix.sh SRC TAG — POSIX permission, set-id, sticky-bit,
# hard link and rename cases (posix_checks.py) run as non-root users through
# the kernel client against one server (issue 21 item 6). Mounts SRC with
# `noac`, so each stat asks the server, runs the cases in a fresh directory
# and writes their results to $OUT/TAG/posix.txt ("PASS NAME" /
# "FAIL NAME: ..."); compare_posix.py holds both servers' results side by
# side and turns them into checks. Leaves SRC unmounted.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

SRC=$1
TAG=$2
MP=/mnt/$TAG-posix
mkdir -p "$OUT/$TAG"
RES=$OUT/$TAG/posix.txt
rm -f "$RES"
if ! nfs_mount "$SRC" "$MP" noac; then
    flunk "$TAG: posix: mount $SRC with noac"
    exit 1
fi
W=$MP/posix
rm -rf "$W" 2>/dev/null
mkdir "$W" && chmod 0777 "$W" || { flunk "$TAG: posix: make the work directory"; nfs_umount "$MP"; exit 1; }
t=$(now)
python3 "$(dirname "$0")/posix_checks.py" "$W" >"$RES" 2>"$OUT/$TAG/posix.err"
note "$TAG: posix cases: $(grep -c '^PASS' "$RES") pass, $(grep -c '^FAIL' "$RES") fail ($(elapsed "$t") s)"
grep '^FAIL' "$RES" | sed "s/^/$TAG: /"
check "$TAG: posix: the cases ran (no error output)" test ! -s "$OUT/$TAG/posix.err"
rm -rf "$W"
check "$TAG: posix: umount" nfs_umount "$MP"
