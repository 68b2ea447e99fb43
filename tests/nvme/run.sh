#!/usr/bin/env bash
# tests/nvme/run.sh — run the `nvme` backend against real NVMe namespaces:
# QEMU's emulated NVMe controllers in the small Debian 12 VM (kernel 6.1) of
# ../shared/tools/softroce-vm.sh.
#
#   1. builds the example nvme_check (release) on the host;
#   2. creates two 64 MiB raw images under target/ and boots the VM with two
#      NVMe controllers on them (512-byte and 4096-byte LBAs); the VM tool has
#      no option for extra QEMU arguments, so a wrapper named
#      qemu-system-x86_64 placed first on PATH adds them;
#   3. in the guest: loads the nvme driver without poll queues and runs
#      nvme_check on each namespace (passthrough on /dev/ngXn1 with
#      interrupt completions reaped by polling the CQ, O_DIRECT on
#      /dev/nvmeXn1), then reloads it with poll_queues=1 and runs it again
#      (passthrough ring with IORING_SETUP_IOPOLL); each run also checks what
#      df and cp onto a device file see (FSSTAT within the capacity, no links
#      in the features, a truncation accepted with the size left, growth
#      refused: issue 21 item 11);
#   4. prints the guest's output and a final "nvme: PASS" when all four runs
#      passed; exits 1 when one failed, 3 when the VM could not be had at all
#      (tool, image or qemu missing): CI reports that as skipped.
#
# Under software emulation (no KVM) a run takes about two minutes.
# Usage: tests/nvme/run.sh            Env: VMLAB_CACHE, VMLAB_ACCEL (see the VM tool)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
STAGE=$ROOT/target/nvme-vm
WRAP=$ROOT/target/nvme-vm-bin
IMG0=$ROOT/target/nvme-vm-512.img
IMG1=$ROOT/target/nvme-vm-4k.img
t_start=$(date +%s)

fail() { echo "nvme: FAIL: $*"; exit 1; }
unavailable() { echo "nvme: VM UNAVAILABLE: $*"; exit 3; }
. tests/lib/vm.sh
vm_locate

echo "== build (release): nvme_check"
bash scripts/build-deps.sh || fail "build dependencies (scripts/build-deps.sh)"
cargo build --release --quiet -p rpcrdma-apps --example nvme_check || fail "cargo build"
rm -rf "$STAGE" "$WRAP"; mkdir -p "$STAGE" "$WRAP"
cp "$TARGET/release/examples/nvme_check" "$STAGE/"

# Fresh, zeroed namespaces each run.
rm -f "$IMG0" "$IMG1"
truncate -s 64M "$IMG0"
truncate -s 64M "$IMG1"

# Two NVMe controllers (the VM tool has no option for extra QEMU arguments).
vm_qemu_wrapper "$WRAP" \
    -drive "file=$IMG0,if=none,id=nvm,format=raw" \
    -device nvme,serial=rpcrdma0,drive=nvm \
    -drive "file=$IMG1,if=none,id=nvm1,format=raw" \
    -device nvme,serial=rpcrdma1,drive=nvm1,logical_block_size=4096,physical_block_size=4096

cat > "$STAGE/guest.sh" <<'EOF'
cd /host
wait_nvme() {
    i=0
    while [ $i -lt 120 ]; do
        [ -e /dev/ng0n1 ] && [ -e /dev/ng1n1 ] && [ -e /sys/block/nvme0n1 ] && [ -e /sys/block/nvme1n1 ] && return 0
        sleep 0.5; i=$((i + 1))
    done
    echo "guest: NVMe namespaces did not appear"; ls -l /dev/ng* /dev/nvme* 2>&1; return 1
}
echo "guest: $(uname -r)"
rc=0
modprobe nvme || rc=1
wait_nvme || exit 1
for n in 0 1; do
    echo "guest: nvme${n}n1: lba $(cat /sys/block/nvme${n}n1/queue/logical_block_size)," \
        "io_poll $(cat /sys/block/nvme${n}n1/queue/io_poll), $(ls -l /dev/ng${n}n1)"
done
for n in 0 1; do ./nvme_check --iopoll no /dev/ng${n}n1 /dev/nvme${n}n1 || rc=1; done
echo "guest: reloading nvme with poll_queues=1"
rmmod nvme && modprobe nvme poll_queues=1 || rc=1
wait_nvme || exit 1
for n in 0 1; do echo "guest: nvme${n}n1 io_poll $(cat /sys/block/nvme${n}n1/queue/io_poll)"; done
for n in 0 1; do ./nvme_check --iopoll yes /dev/ng${n}n1 /dev/nvme${n}n1 || rc=1; done
exit $rc
EOF

echo "== VM run (softroce-vm.sh run -s $STAGE, two NVMe controllers)"
t_vm=$(date +%s)
set +e
PATH="$WRAP:$PATH" bash "$VM" run -s "$STAGE" -f "$STAGE/guest.sh" 2>&1 | tee "$STAGE/vm.log"
vm_rc=${PIPESTATUS[0]}
set -e
t_end=$(date +%s)
echo "== VM run: $((t_end - t_vm)) s (exit $vm_rc); whole script $((t_end - t_start)) s"

# The serial console ends lines with CR LF.
tr -d '\r' < "$STAGE/vm.log" > "$STAGE/vm.txt"
grep -q 'vmlab-init: ready' "$STAGE/vm.txt" || unavailable "the VM did not boot (log: $STAGE/vm.log)"
passes=$(grep -c '^nvme_check: PASS ' "$STAGE/vm.txt" || true)
[ "$passes" = 4 ] || fail "$passes of 4 nvme_check runs passed (log: $STAGE/vm.log)"
# A guest kernel whose passthrough polling is unsafe (before 6.6) must have
# refused it; any other must have used an IOPOLL ring.
if grep -q 'passthrough polling refused on this kernel' "$STAGE/vm.txt"; then
    if grep -q 'iopoll true' "$STAGE/vm.txt"; then
        fail "an IOPOLL ring on a kernel whose passthrough polling is unsafe"
    fi
else
    grep -q 'iopoll true' "$STAGE/vm.txt" || fail "no run used an IOPOLL ring"
fi
[ "$vm_rc" = 0 ] || fail "guest exit status $vm_rc"
echo "nvme: PASS"
