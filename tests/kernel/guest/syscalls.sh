#!/usr/bin/env bash
# tests/kernel/guest/syscalls.sh TAG PID — the system calls our target makes
# per Call at queue depth 1 (issue 24 part 1: where ours loses at qd 1 in
# the guest), run by single.sh after the perf tool when KINTEROP_SYSCALLS=1.
# For each of: nothing (idle, the baseline of the admin core and timers),
# perf NULL, perf READ 4 KiB, READ 1 MiB and WRITE 4 KiB (qd 1, one
# connection),
# strace -c -f counts every system call of every thread of PID over
# $SYSCALL_SECONDS (default 5) of the run; the calls per Call (idle rate
# subtracted) go to $OUT/TAG/syscalls.txt, strace's tables to
# $OUT/TAG/strace-<job>.txt. strace stops each thread at every system call,
# so the target runs slower meanwhile: the counts per Call are what to read,
# not the rates; the time per Call (p50) comes from the same perf run
# just before without strace (syscalls-plain-<job>.json). An epoll_pwait2 is one block of a core.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
: "${BIN:=/host/bin}"

TAG=$1
PID=$2
D=$OUT/$TAG
SECS=${SYSCALL_SECONDS:-5}
mkdir -p "$D"
command -v strace >/dev/null || {
    note "$TAG: syscalls: no strace in the guest"
    exit 0
}

# one JOB ARGS... : strace over a perf run of ARGS (or over SECS idle
# seconds when ARGS is empty); prints "ops" (0 when idle).
one() {
    local job=$1 sp ops=0
    shift
    # the same run without strace first: the time per Call
    [ $# = 0 ] || timeout 120 "$BIN/perf" "$@" --fabric verbs --target "$VMLAB_IP:20049" --duration "$SECS" \
        --idle-sleep-us "${PERF_IDLE_SLEEP_US:-20}" --no-progress --json "$D/syscalls-plain-$job.json" \
        >"$D/syscalls-plain-$job.log" 2>&1
    strace -c -f -qq -p "$PID" -o "$D/strace-$job.txt" &
    sp=$!
    sleep 1
    if [ $# = 0 ]; then
        sleep "$SECS"
    else
        timeout 120 "$BIN/perf" "$@" --fabric verbs --target "$VMLAB_IP:20049" --duration "$SECS" \
            --idle-sleep-us "${PERF_IDLE_SLEEP_US:-20}" --no-progress --json "$D/syscalls-perf-$job.json" \
            >"$D/syscalls-perf-$job.log" 2>&1
        ops=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ops"])' \
            "$D/syscalls-perf-$job.json" 2>/dev/null || echo 0)
    fi
    kill -INT $sp
    wait $sp 2>/dev/null
    echo "$ops"
}

mount_args=(--mount-addr "$VMLAB_IP")
[ -n "${MOUNT_PORT:-}" ] && mount_args+=(--mount-port "$MOUNT_PORT")
one idle >/dev/null
declare -A ops
ops[null]=$(one null null --qd 1)
ops[read4k]=$(one read4k read "${mount_args[@]}" --export /export --file perf.dat --create --file-size 16M --size 4k --qd 1)
ops[read1m]=$(one read1m read "${mount_args[@]}" --export /export --file perf.dat --create --file-size 16M --size 1m --qd 1)
ops[write4k]=$(one write4k write "${mount_args[@]}" --export /export --file perf-w.dat --create --file-size 16M --size 4k --qd 1)
python3 - "$D" "$SECS" "${ops[null]}" "${ops[read4k]}" "${ops[read1m]}" "${ops[write4k]}" <<'PY' | tee "$D/syscalls.txt"
import re, sys
d, secs = sys.argv[1], float(sys.argv[2])
JOBS = ("null", "read4k", "read1m", "write4k")
ops = dict(zip(JOBS, (int(x) if x.isdigit() else 0 for x in sys.argv[3:3 + len(JOBS)])))

def table(job):
    calls = {}
    try:
        for line in open("%s/strace-%s.txt" % (d, job)):
            f = line.split()
            # % time, seconds, usecs/call, calls, [errors], syscall
            if len(f) >= 5 and re.match(r"^[0-9.]+$", f[0]) and f[-1] != "total":
                calls[f[-1]] = calls.get(f[-1], 0) + int(f[3])
    except OSError:
        pass
    return calls

idle = table("idle")
# the idle run lasts SECS + 1 s (strace attached 1 s before); a perf run's
# strace lasts about SECS + 2 s (1 s before, perf's 1 s warm-up)
names = sorted(set(idle) | {n for j in ops for n in table(j)})
print("system calls of the target per Call, qd 1 (strace -c -f, idle rate over %.0f s subtracted)" % (secs + 1))
print("%-22s %9s %s" % ("syscall", "idle/s", " ".join("%9s" % j for j in JOBS)))
rows = {j: table(j) for j in ops}
tot = {j: 0.0 for j in ops}
for n in names:
    cells = []
    for j in ops:
        per = (rows[j].get(n, 0) - idle.get(n, 0) * (secs + 2) / (secs + 1)) / ops[j] if ops[j] else None
        if per is not None:
            tot[j] += per
        cells.append("%9.2f" % per if per is not None else "%9s" % "-")
    print("%-22s %9.1f %s" % (n, idle.get(n, 0) / (secs + 1), " ".join(cells)))
print("%-22s %9s %s" % ("total per Call", "", " ".join("%9.2f" % tot[j] for j in ops)))
print("%-22s %9s %s" % ("Calls under strace", "", " ".join("%9d" % ops[j] for j in ops)))
import json
def p50(j):
    try:
        return "%9.1f" % json.load(open("%s/syscalls-plain-%s.json" % (d, j)))["latency_us"]["p50"]
    except (OSError, ValueError, KeyError):
        return "%9s" % "-"
print("%-22s %9s %s" % ("p50 us without strace", "", " ".join(p50(j) for j in ops)))
PY
