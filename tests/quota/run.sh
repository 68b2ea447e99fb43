#!/usr/bin/env bash
# tests/quota/run.sh — quota limits hold for the caller (issue 21 item 6):
# runs the ignored tests of apps/tests/nfs_safety_quota.rs as root in the
# small Debian 12 VM (kernel 6.1) of shared/tools/softroce-vm.sh, whose
# kernel has ext4 user quota (quota_v2) and loop devices, which a build host
# may not have.
#
#   1. builds the test binary (`cargo test --no-run`) on the host;
#   2. boots the VM with it in the shared directory;
#   3. in the guest: each test makes a 64 MiB ext4 image with the `quota`
#      feature on a loop device in /tmp, mounts it `usrquota`, gives user
#      1000 a 1 MiB block limit, exports it through a `uring` backend and
#      writes as user 1000 through the NFS service (v3, and v4.1) until the
#      Call is answered DQUOT; user 2000 and root still write.
# "quota: PASS" when every test ran and passed; exit 1 when one failed, 3
# when the VM could not be had (tool, image or qemu missing): CI reports
# that as skipped.
#
# QUOTA_ALSO=PATH runs a second build of the test binary after the first
# (for instance one built without a fix, to see the tests fail); its result
# is printed, not judged.
# Usage: tests/quota/run.sh   Env: SOFTROCE_VM, QUOTA_ALSO, VMLAB_CACHE, VMLAB_ACCEL
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
STAGE=$ROOT/target/quota-vm
t_start=$(date +%s)

fail() { echo "quota: FAIL: $*"; exit 1; }
unavailable() { echo "quota: VM UNAVAILABLE: $*"; exit 3; }
. tests/lib/vm.sh
vm_locate

echo "== build: the test binary nfs_safety_quota"
bash scripts/build-deps.sh || fail "build dependencies (scripts/build-deps.sh)"
BIN=$(cargo test -p rpcrdma-apps --test nfs_safety_quota --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "nfs_safety_quota":
        print(m["executable"])')
[ -n "$BIN" ] && [ -x "$BIN" ] || fail "cargo test --no-run gave no nfs_safety_quota binary"
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp "$BIN" "$STAGE/nfs_safety_quota"
[ -n "${QUOTA_ALSO:-}" ] && cp "$QUOTA_ALSO" "$STAGE/also"

cat > "$STAGE/guest.sh" <<'EOF'
cd /host
echo "guest: $(uname -r)"
modprobe loop 2>/dev/null || true
modprobe quota_v2 2>/dev/null || true
rc=0
./nfs_safety_quota --ignored --test-threads 1 nfs_safety_quota 2>&1 | tee /host/result.txt || rc=1
if [ -x ./also ]; then
    echo "guest: QUOTA_ALSO (not judged):"
    ./also --ignored --test-threads 1 nfs_safety_quota 2>&1 | tail -40
fi
exit $rc
EOF

echo "== VM run (softroce-vm.sh run -s $STAGE)"
t_vm=$(date +%s)
set +e
bash "$VM" run -s "$STAGE" -f "$STAGE/guest.sh" 2>&1 | tee "$STAGE/vm.log"
vm_rc=${PIPESTATUS[0]}
set -e
echo "== VM run: $(($(date +%s) - t_vm)) s (exit $vm_rc); whole script $(($(date +%s) - t_start)) s"
tr -d '\r' < "$STAGE/vm.log" > "$STAGE/vm.txt"
grep -q 'vmlab-init: ready' "$STAGE/vm.txt" || unavailable "the VM did not boot (log: $STAGE/vm.log)"
[ -s "$STAGE/result.txt" ] || fail "no test output (log: $STAGE/vm.log)"
# Both end-to-end tests ran (not ignored) and passed.
grep -q '^test result: ok\. 2 passed; 0 failed; 0 ignored' "$STAGE/result.txt" ||
    fail "$(grep '^test result' "$STAGE/result.txt" || echo 'no result line') (log: $STAGE/vm.log)"
[ "$vm_rc" = 0 ] || fail "guest exit status $vm_rc"
echo "quota: PASS"
