#!/usr/bin/env bash
# tests/crash/run.sh — acknowledged means durable (issue 21 item 2): cut the
# power of the server right after its replies, and check that every change
# it acknowledged is on disk.
#
# One boot of the small Debian 12 VM of shared/tools/softroce-vm.sh, with two
# NVMe disk images (tests/lib/vm.sh adds the controllers):
#   - each disk gets ext4, mounted commit=600 (the journal's timer commits
#     nothing during the test, so only the server's fsyncs make a change
#     durable); rpcrdma-target exports one `uring` backend per disk over TCP:
#     /sync with the default `sync` export, /async with `"async": true`;
#   - the kernel's NFS client mounts both and makes the same changes on each
#     (tests/crash/guest.sh): `mv a b`, the temp-file / fsync / rename
#     pattern, 20 create-and-rename pairs, then metadata only (LINK, SYMLINK,
#     SETATTR, MKDIR, a RENAME across directories, REMOVE, RMDIR); it writes
#     the state the replies acknowledged to the shared directory, and
#     `echo b > /proc/sysrq-trigger` resets the guest at once (no sync, no
#     unmount; QEMU runs with -no-reboot, so it exits);
#   - on the host, e2fsck replays each disk's journal (what a mount after the
#     crash does) and debugfs reads every acknowledged name, type, mode and
#     content.
# PASS when the `sync` disk lost nothing AND the `async` disk lost something:
# the counter-check shows that the test sees a loss when there is one.
# CRASH_ASYNC=0 leaves the counter-check out (its loss is then not required).
#
# Exits 0 on PASS, 1 on a lost acknowledged change (or a counter-check that
# saw none), 3 when the VM could not be had (CI reports that as skipped).
# Under software emulation (no KVM) the VM run takes about 3 minutes.
# Usage: tests/crash/run.sh   Env: SOFTROCE_VM, CRASH_ASYNC, VMLAB_CACHE, VMLAB_ACCEL
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
STAGE=$ROOT/target/crash-vm
WRAP=$ROOT/target/crash-vm-bin
ASYNC=${CRASH_ASYNC:-1}
t_start=$(date +%s)

fail() { echo "crash: FAIL: $*"; exit 1; }
unavailable() { echo "crash: VM UNAVAILABLE: $*"; exit 3; }
. tests/lib/vm.sh
vm_locate

echo "== build (release): rpcrdma-target"
bash scripts/build-deps.sh || fail "build dependencies (scripts/build-deps.sh)"
if ! command -v debugfs >/dev/null || ! command -v e2fsck >/dev/null; then
    [ "$(id -u)" = 0 ] || fail "the check needs e2fsprogs (debugfs, e2fsck); install it (root)"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends e2fsprogs >/dev/null ||
        fail "apt-get install e2fsprogs"
fi
cargo build --release --quiet -p rpcrdma-apps --bin rpcrdma-target || fail "cargo build"
rm -rf "$STAGE" "$WRAP"
mkdir -p "$STAGE"
cp "$TARGET/release/rpcrdma-target" tests/crash/guest.sh "$STAGE/"

# The server's disks. The reset loses what the guest had not handed to its
# disk yet (its page cache, its journal in memory), which is what a power
# cut loses; what it handed over is in the image file.
for e in sync async; do
    rm -f "$STAGE/$e.img"
    truncate -s 128M "$STAGE/$e.img"
done
vm_qemu_wrapper "$WRAP" \
    -drive "file=$STAGE/sync.img,if=none,id=crashsync,format=raw" \
    -device nvme,serial=crashsync,drive=crashsync \
    -drive "file=$STAGE/async.img,if=none,id=crashasync,format=raw" \
    -device nvme,serial=crashasync,drive=crashasync

echo "== VM run: changes on /sync and /async, then the power cut"
t_vm=$(date +%s)
set +e
PATH="$WRAP:$PATH" bash "$VM" run -s "$STAGE" -f "$STAGE/guest.sh" 2>&1 | tee "$STAGE/vm.log"
set -e
echo "== VM run: $(($(date +%s) - t_vm)) s"
tr -d '\r' < "$STAGE/vm.log" > "$STAGE/vm.txt"
grep -q 'vmlab-init: ready' "$STAGE/vm.txt" || unavailable "the VM did not boot (log: $STAGE/vm.log)"
grep -q 'vmlab-init: done' "$STAGE/vm.txt" && fail "the guest stopped before the power cut (log: $STAGE/vm.log)"
# The guest's last lines may not reach the console before the reset; the
# kernel's own message does.
grep -q 'sysrq: Resetting' "$STAGE/vm.txt" || fail "the guest did not reach the power cut (log: $STAGE/vm.log)"
cat "$STAGE/guest.log" 2>/dev/null || true

# check E: replay E's journal and count the acknowledged facts that are not
# on the disk; sets LOST and FACTS.
check() {
    local e=$1 img=$STAGE/$1.img facts=$STAGE/facts-$1 kind name want st
    [ -s "$facts" ] || fail "no acknowledged changes recorded for /$e"
    # -E journal_only: replay the journal, as the mount after a crash does,
    # and nothing else.
    e2fsck -E journal_only -y "$img" >/dev/null 2>&1 || true
    LOST=0
    FACTS=$(wc -l < "$facts")
    while read -r kind name want; do
        st=$(debugfs -R "stat /export/$name" "$img" 2>&1)
        case "$kind" in
        absent)
            echo "$st" | grep -q 'File not found' || { echo "crash: /$e LOST: $name is still there"; LOST=$((LOST + 1)); } ;;
        dir)
            echo "$st" | grep -q 'Type: directory' || { echo "crash: /$e LOST: directory $name"; LOST=$((LOST + 1)); } ;;
        symlink)
            echo "$st" | grep -q "Fast link dest: \"$want\"" || { echo "crash: /$e LOST: symlink $name -> $want"; LOST=$((LOST + 1)); } ;;
        mode)
            echo "$st" | grep -Eq "Mode: +0?$want " || { echo "crash: /$e LOST: mode $want of $name"; LOST=$((LOST + 1)); } ;;
        file)
            if ! echo "$st" | grep -q 'Type: regular'; then
                echo "crash: /$e LOST: $name is missing"
                LOST=$((LOST + 1))
            elif [ "$(debugfs -R "cat /export/$name" "$img" 2>/dev/null | sha256sum | cut -d' ' -f1)" != "$want" ]; then
                echo "crash: /$e LOST: the content of $name"
                LOST=$((LOST + 1))
            fi ;;
        *) fail "unknown fact '$kind' in $facts" ;;
        esac
    done < "$facts"
}

check sync
sync_lost=$LOST sync_facts=$FACTS
echo "crash: sync export: $sync_lost of $sync_facts acknowledged facts lost"
if [ "$ASYNC" != 0 ]; then
    check async
    echo "crash: async export (the counter-check): $LOST of $FACTS acknowledged facts lost"
fi
echo "== whole script $(($(date +%s) - t_start)) s"
[ "$sync_lost" = 0 ] || fail "the sync export lost acknowledged changes (log: $STAGE/vm.log)"
if [ "$ASYNC" != 0 ] && [ "$LOST" = 0 ]; then
    fail "the async export lost nothing: the test saw no loss to see"
fi
echo "crash: PASS"
