# scripts/perf-lib.sh — sourced by perf-report.sh and perf-ratios.sh (from the
# repository root): the configuration they read, the binaries they run, and
# starting and stopping the target.
#
# Environment: CONFIG (target configuration, default configs/cores.json),
# CLIENT_CPU (CPU of perf's thread, default 0), ECHO_CPU (CPU of the raw
# floor's echo thread, default 1), CARGO_TARGET_DIR.

CONFIG=${CONFIG:-configs/cores.json}
CLIENT_CPU=${CLIENT_CPU:-0}
ECHO_CPU=${ECHO_CPU:-1}
TDIR=${CARGO_TARGET_DIR:-target}
SOCK=$(sed -n 's/.*"socket_path": *"\([^"]*\)".*/\1/p' "$CONFIG" | head -n1)
SOCK=${SOCK:-/tmp/rpcrdma/fabric.sock}
MOUNT_PORT=$(sed -n 's/.*"mount_tcp_port": *\([0-9]*\).*/\1/p' "$CONFIG" | head -n1)
MOUNT_PORT=${MOUNT_PORT:-20048}
PERF="$TDIR/release/perf"
TARGET="$TDIR/release/rpcrdma-target"

build_perf_and_target() {
    bash scripts/build-deps.sh
    cargo build --release "$@" -p rpcrdma-apps --bin rpcrdma-target -p rpcrdma-perf --bin perf
}

# start_target LOG: start rpcrdma-target -c $CONFIG in the background (TPID)
# and wait for its fabric socket; stop_target runs on exit.
start_target() {
    "$TARGET" -c "$CONFIG" >"$1" 2>&1 &
    TPID=$!
    trap stop_target EXIT
    for _ in $(seq 1 300); do
        [ -S "$SOCK" ] && return 0
        kill -0 "$TPID" 2>/dev/null || { cat "$1"; echo "rpcrdma-target exited" >&2; exit 1; }
        sleep 0.1
    done
    echo "no fabric socket at $SOCK" >&2
    exit 1
}

# stop_target: SIGTERM (after SIGCONT, in case it was frozen) and wait.
stop_target() {
    kill -CONT "$TPID" 2>/dev/null || true
    kill -TERM "$TPID" 2>/dev/null || true
    wait "$TPID" 2>/dev/null || true
    trap - EXIT
}
