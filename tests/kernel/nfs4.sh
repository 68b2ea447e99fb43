#!/usr/bin/env bash
# tests/kernel/nfs4.sh — the Linux kernel's NFS client against rpcrdma-target
# with NFSv4.1 and NFSv4.2, over TCP and over RDMA (Soft-RoCE), in one
# Debian 12 guest (the VM tool of tests/kernel/run.sh). Quicker than run.sh:
# builds rpcrdma-target (release), stages it with the guest scripts under
# target/kernel-vm-nfs4 and runs tests/kernel/guest/nfs4.sh there; prints
# every failed check and, as its last line, "kernel-nfs4: PASS" when all held.
# Exit status: 0 pass, 1 a check failed, 3 the VM could not be had.
# Env: NFS4_MOUNTS ("4.1/tcp 4.1/rdma 4.2/rdma 4.2/tcp default/rdma default/tcp";
#      "default": no vers= option, which must land on 4.2), NFS4_BACKENDS
#      ("mem uring": the target's backend, each in turn), SOFTROCE_VM,
#      VMLAB_CACHE, CARGO_TARGET_DIR. Run under the shared VM lock:
#      flock /tmp/rpcrdma-vm.lock bash tests/kernel/nfs4.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
STAGE=$ROOT/target/kernel-vm-nfs4
BUILD_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/release
unavailable() {
    echo "kernel-nfs4: VM UNAVAILABLE: $*"
    exit 3
}
# The VM tool and its image (built here when missing, so this suite runs
# alone on a fresh machine).
. tests/lib/vm.sh
vm_locate
bash scripts/build-deps.sh
cargo build --release --quiet -p rpcrdma-apps --bin rpcrdma-target -p rpcrdma-perf --bin perf
rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/out"
cp -r tests/kernel/guest "$STAGE/guest"
cp configs/cores.json "$STAGE/bin/cores.json"
cp "$BUILD_DIR/rpcrdma-target" "$BUILD_DIR/perf" "$STAGE/bin/"
echo "NFS4_MOUNTS='${NFS4_MOUNTS:-4.1/tcp 4.1/rdma 4.2/rdma 4.2/tcp default/rdma default/tcp}'" >"$STAGE/env.sh"
echo "NFS4_BACKENDS='${NFS4_BACKENDS:-mem uring}'" >>"$STAGE/env.sh"
printf '#!/bin/sh\nexec bash /host/guest/nfs4.sh\n' >"$STAGE/nfs4.sh"
rc=0
bash "$VM" run -m 3072 -s "$STAGE" -f "$STAGE/nfs4.sh" 2>&1 | tr -d '\r' | tee "$STAGE/nfs4.log" || rc=${PIPESTATUS[0]}
grep -q 'vmlab-init: ready' "$STAGE/nfs4.log" || { echo "kernel-nfs4: VM UNAVAILABLE: no guest came up"; exit 3; }
checks=$STAGE/out/checks.txt
echo "checks: $(grep -c '^ok' "$checks" || true) ok, $(grep -c '^not ok' "$checks" || true) not ok"
grep '^not ok' "$checks" || true
[ "$rc" = 0 ] && ! grep -q '^not ok' "$checks" && grep -q '^ok - mount' "$checks" || { echo "kernel-nfs4: FAIL"; exit 1; }
echo "kernel-nfs4: PASS"
