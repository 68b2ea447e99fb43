#!/usr/bin/env bash
# tests/libnfs/run.sh — an independent NFSv3 client over TCP (Debian's
# libnfs-utils: nfs-cp, nfs-ls, nfs-cat) against rpcrdma-target.
#
#   1. installs libnfs-utils when missing (root);
#   2. builds rpcrdma-target and starts it on a generated configuration
#      (shm fabric on a private socket, free TCP ports, the `mem` and `uring`
#      backends each behind an export);
#   3. per export: writes files of several sizes with nfs-cp, lists them with
#      nfs-ls, reads them back with nfs-cat and nfs-cp and compares checksums;
#   4. stops the target with SIGTERM (must exit 0: drained, backends synced),
#      restarts it, and checks that the `uring` export still has every file
#      byte for byte (durability across a restart) and under the same names;
#   5. prints `libnfs: PASS` last only when every check held; exits 1 otherwise.
#
# Usage: tests/libnfs/run.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PROFILE=debug
[ "${1:-}" = "--release" ] && PROFILE=release
STAGE=$ROOT/target/libnfs
fails=0
pass() { echo "  ok: $*"; }
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }
die() { echo "libnfs: FAIL: $*"; exit 1; }

if ! command -v nfs-cp >/dev/null; then
    echo "== installing libnfs-utils"
    [ "$(id -u)" = 0 ] || die "libnfs-utils missing and not root"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnfs-utils >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnfs-utils >/dev/null; } ||
        die "apt-get install libnfs-utils"
fi

bash scripts/build-deps.sh || die "build dependencies (scripts/build-deps.sh)"
echo "== build rpcrdma-target ($PROFILE)"
if [ "$PROFILE" = release ]; then
    cargo build --release --quiet -p rpcrdma-apps --bin rpcrdma-target || die "cargo build"
else
    cargo build --quiet -p rpcrdma-apps --bin rpcrdma-target || die "cargo build"
fi
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE/rpcrdma-target

rm -rf "$STAGE"
mkdir -p "$STAGE/data" "$STAGE/files"
read -r NFS_PORT MOUNT_PORT < <(python3 - <<'EOF'
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
EOF
)
python3 - "$ROOT/configs/cores.json" "$STAGE" "$NFS_PORT" "$MOUNT_PORT" > "$STAGE/cores.json" <<'EOF'
import json, sys
src, stage, nfs, mnt = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = json.load(open(src))
c["fabric"] = {"provider": "shm", "socket_path": stage + "/fabric.sock"}
c["listeners"]["nfs_tcp_port"] = nfs
c["listeners"]["mount_tcp_port"] = mnt
c["backends"] = [
    {"type": "mem", "name": "mem0", "size_bytes": 64 << 20},
    {"type": "uring", "name": "disk0", "path": stage + "/data"},
]
base = {"clients": ["127.0.0.0/8"], "read_only": False, "root_squash": False}
c["exports"] = [dict(base, path="/mem", backend="mem0"), dict(base, path="/disk", backend="disk0")]
print(json.dumps(c, indent=2))
EOF
"$BIN" --check-config -c "$STAGE/cores.json" >/dev/null || die "generated configuration is invalid"

TPID=
start_target() {
    "$BIN" -c "$STAGE/cores.json" >>"$STAGE/target.log" 2>&1 &
    TPID=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$MOUNT_PORT") 2>/dev/null; then return 0; fi
        kill -0 "$TPID" 2>/dev/null || { tail -20 "$STAGE/target.log"; die "target exited at start"; }
        sleep 0.1
    done
    die "target did not open its MOUNT port"
}
stop_target() {
    kill -TERM "$TPID"
    local rc=0
    wait "$TPID" || rc=$?
    TPID=
    [ "$rc" = 0 ] && pass "target exited 0 after SIGTERM" || fail "target exit status $rc after SIGTERM"
}
trap '[ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null; true' EXIT

url() { echo "nfs://127.0.0.1$1?version=3&nfsport=$NFS_PORT&mountport=$MOUNT_PORT"; }

# Test files: empty, small, unaligned, multi-MiB.
for spec in "empty:0" "small:100" "odd:70001" "big:3145728" "bigger:9437184"; do
    name=${spec%%:*}; size=${spec##*:}
    head -c "$size" /dev/urandom > "$STAGE/files/$name"
done

echo "== start target"
start_target
for exp in /mem /disk; do
    echo "== export $exp"
    for f in "$STAGE"/files/*; do
        name=$(basename "$f")
        if nfs-cp "$f" "$(url "$exp/$name")" >/dev/null 2>"$STAGE/err"; then
            pass "nfs-cp $name ($(stat -c %s "$f") bytes) to $exp"
        else
            fail "nfs-cp $name to $exp: $(cat "$STAGE/err")"
        fi
    done
    listing=$(nfs-ls "$(url "$exp")" 2>"$STAGE/err") || fail "nfs-ls $exp: $(cat "$STAGE/err")"
    for f in "$STAGE"/files/*; do
        name=$(basename "$f")
        size=$(stat -c %s "$f")
        if echo "$listing" | grep -Eq "[[:space:]]$size[[:space:]].*[[:space:]]$name\$|[[:space:]]$name\$"; then
            pass "nfs-ls $exp lists $name"
        else
            fail "nfs-ls $exp does not list $name: $listing"
        fi
        want=$(sha256sum < "$f")
        got=$(nfs-cat "$(url "$exp/$name")" 2>"$STAGE/err" | sha256sum) || true
        [ "$got" = "$want" ] && pass "nfs-cat $exp/$name matches" || fail "nfs-cat $exp/$name differs"
        rm -f "$STAGE/back"
        if nfs-cp "$(url "$exp/$name")" "$STAGE/back" >/dev/null 2>"$STAGE/err" && cmp -s "$f" "$STAGE/back"; then
            pass "nfs-cp back $exp/$name matches"
        else
            fail "nfs-cp back $exp/$name: $(cat "$STAGE/err")"
        fi
    done
done

echo "== restart"
stop_target
start_target
for f in "$STAGE"/files/*; do
    name=$(basename "$f")
    want=$(sha256sum < "$f")
    got=$(nfs-cat "$(url "/disk/$name")" 2>"$STAGE/err" | sha256sum) || true
    [ "$got" = "$want" ] && pass "/disk/$name intact after restart" || fail "/disk/$name lost or changed after restart"
done
if nfs-cat "$(url /mem/small)" >/dev/null 2>&1; then
    fail "/mem/small survived a restart of a RAM backend"
else
    pass "/mem is empty after a restart (RAM backend)"
fi
stop_target

if [ "$fails" -gt 0 ]; then
    echo "target log: $STAGE/target.log"
    echo "libnfs: FAIL ($fails checks failed)"
    exit 1
fi
echo "libnfs: PASS"
