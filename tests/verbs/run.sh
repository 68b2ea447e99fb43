#!/usr/bin/env bash
# tests/verbs/run.sh — run the `verbs` provider for real, over Soft-RoCE
# (rdma_rxe) in a small Debian 12 VM (../shared/tools/softroce-vm.sh).
#
#   1. builds the examples verbs_raw (raw provider test), verbs_engine (the
#      transport engine, v1 and v2, every chunk pattern) and verbs_exposure
#      (memory exposure, issue 20 item 1: a raw peer with the responder's
#      real rkey, and one connection's window rkey on another connection, get
#      remote access errors) on the host, release;
#   2. builds the VM image if it is missing (about 10 minutes the first time);
#   3. boots the VM with the binaries shared in at /host and runs both against
#      the guest's rxe0 address ($VMLAB_IP, loopback through rxe);
#   4. prints their output and a final "verbs: PASS" only when both passed;
#      exits 1 when a test failed, and 3 when the VM could not be had at all
#      (tool missing, image build or qemu set-up failed): CI reports that as
#      skipped rather than failed.
#
# Needs root for the image build (debootstrap, apt-get). Under software
# emulation (no KVM) a run takes about a minute, most of it booting.
# Usage: tests/verbs/run.sh            Env: VMLAB_CACHE, VMLAB_ACCEL (see the VM tool)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VM=${SOFTROCE_VM:-$ROOT/../shared/tools/softroce-vm.sh}
CACHE=${VMLAB_CACHE:-/var/cache/softroce-vm}
STAGE=$ROOT/target/verbs-vm
t_start=$(date +%s)

fail() { echo "verbs: FAIL: $*"; exit 1; }
unavailable() { echo "verbs: VM UNAVAILABLE: $*"; exit 3; }
[ -f "$VM" ] || unavailable "VM tool not found at $VM (set SOFTROCE_VM)"

bash scripts/build-deps.sh || fail "build dependencies (scripts/build-deps.sh)"
echo "== build (release): verbs_raw, verbs_engine, verbs_exposure"
cargo build --release --quiet -p rpcrdma-dataplane --example verbs_raw --example verbs_engine \
    --example verbs_exposure || fail "cargo build"
rm -rf "$STAGE"; mkdir -p "$STAGE"
cp target/release/examples/verbs_raw target/release/examples/verbs_engine \
    target/release/examples/verbs_exposure "$STAGE/"

if [ ! -e "$CACHE/rootfs.img" ]; then
    echo "== VM image missing: bash $VM build"
    bash "$VM" build || unavailable "VM image build"
fi

# The tool may unpack qemu into $CACHE/qemu-root when the host's packages
# conflict; the libnl libraries it unpacks land in lib/, outside the library
# path the tool sets, so install them on the host (small, from Debian).
QEMU=$CACHE/qemu-root/usr/bin/qemu-system-x86_64
if ! command -v qemu-system-x86_64 >/dev/null && [ -x "$QEMU" ] &&
    LD_LIBRARY_PATH=$CACHE/qemu-root/usr/lib/x86_64-linux-gnu ldd "$QEMU" | grep -q 'libnl.*not found'; then
    echo "== installing libnl-3-200 libnl-route-3-200 for the unpacked qemu"
    [ "$(id -u)" = 0 ] || unavailable "qemu needs libnl-3-200 and libnl-route-3-200; install them (root)"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libnl-3-200 libnl-route-3-200 >/dev/null || unavailable "apt-get install libnl"
fi

cat > "$STAGE/guest.sh" <<'EOF'
cd /host
echo "guest: $(uname -r), $(rdma link show 2>/dev/null | head -1)"
rc=0
./verbs_raw "$VMLAB_IP:7471" || rc=1
./verbs_engine "$VMLAB_IP:7480" || rc=1
./verbs_exposure "$VMLAB_IP:7491" || rc=1
exit $rc
EOF

echo "== VM run (softroce-vm.sh run -s $STAGE)"
t_vm=$(date +%s)
set +e
bash "$VM" run -s "$STAGE" -f "$STAGE/guest.sh" 2>&1 | tee "$STAGE/vm.log"
vm_rc=${PIPESTATUS[0]}
set -e
t_end=$(date +%s)
echo "== VM run: $((t_end - t_vm)) s (exit $vm_rc); whole script $((t_end - t_start)) s"

# The serial console ends lines with CR LF.
tr -d '\r' < "$STAGE/vm.log" > "$STAGE/vm.txt"
grep -qx 'verbs_raw: PASS ([0-9]* ms)' "$STAGE/vm.txt" || fail "verbs_raw did not pass (log: $STAGE/vm.log)"
grep -qx 'verbs_engine: PASS ([0-9]* ms)' "$STAGE/vm.txt" || fail "verbs_engine did not pass (log: $STAGE/vm.log)"
grep -qx 'verbs_exposure: PASS ([0-9]* ms)' "$STAGE/vm.txt" || fail "verbs_exposure did not pass (log: $STAGE/vm.log)"
[ "$vm_rc" = 0 ] || fail "guest exit status $vm_rc"
echo "verbs: PASS"
