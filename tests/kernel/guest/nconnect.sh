#!/usr/bin/env bash
# tests/kernel/guest/nconnect.sh SRC TAG — many connections from one client
# (issue 24 item 4): for nconnect 1, 4 and 16, mount SRC over RDMA with
# that many connections and run fio 4 KiB random reads at queue depth 16
# per connection (numjobs = nconnect), O_DIRECT, $FIO_SECONDS each. Checks
# that the mount has that many RDMA transports, that fio did I/O without
# errors, and that rxe counted no RNR retries during the run (the server
# never let a Send find no posted receive: its credits match its receives).
# Writes $OUT/TAG/nconnect-<n>.json and one "nconnect" line per run (IOPS,
# p99 completion latency, RNR counters, and for our target its engines'
# receive-refill stalls, grants ahead of receives and credit overruns from
# `rpcrdma-target stats`), kept in $OUT/TAG/nconnect-<n>.counters for
# report.py's table. Enabled by KINTEROP_NCONNECT=1.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

SRC=$1
TAG=$2
MP=/mnt/$TAG-nc
D=$OUT/$TAG
FIO_SECONDS=${FIO_SECONDS:-5}
mkdir -p "$D"

# rnr: the sum of rxe's RNR counters over every device and port.
rnr() {
    local sum=0 f
    for f in /sys/class/infiniband/*/ports/*/hw_counters/*rnr*; do
        [ -r "$f" ] && sum=$((sum + $(cat "$f")))
    done
    echo "$sum"
}

# stalls FILE: for our target, its engines' credit and receive stalls from
# the live statistics (`rpcrdma-target stats --json`, issue 24 part 3),
# summed over cores: "recv_refill_stalls grants_ahead_of_receives
# credit_overruns"; "- - -" for the kernel's server or when the statistics
# cannot be had. Keeps the JSON document (or the error) in FILE.
stalls() {
    if [ "$TAG" = ours ] && [ -x "${BIN:-/host/bin}/rpcrdma-target" ] && [ -f "$OUT/ours/target.json" ]; then
        "${BIN:-/host/bin}/rpcrdma-target" stats -c "$OUT/ours/target.json" --json >"$1" 2>&1 || true
        python3 - "$1" <<'PY' || echo "- - -"
import json, sys
keys = ("recv_refill_stalls", "grants_ahead_of_receives", "credit_overruns")
try:
    cores = json.load(open(sys.argv[1]))["cores"]
    if not cores:
        raise ValueError("no core has published")
    print(" ".join(str(sum(c["engine"][k] for c in cores)) for k in keys))
except Exception:
    print("- - -")
PY
    else
        echo "- - -"
    fi
}
# d A B: B - A for numbers, "-" otherwise
d() { [[ "$1" =~ ^[0-9]+$ && "$2" =~ ^[0-9]+$ ]] && echo $(($2 - $1)) || echo -; }

for n in 1 4 16; do
    t=$(now)
    if ! nfs_mount "$SRC" "$MP" "nconnect=$n"; then
        flunk "$TAG: mount with nconnect=$n"
        continue
    fi
    # One "xprt: rdma" line per transport in mountstats.
    xprts=$(awk -v mp="$MP" '$1 == "device" { on = ($5 == mp) } on && $1 == "xprt:" && $2 == "rdma" { n++ } END { print n + 0 }' /proc/self/mountstats)
    check_eq "$TAG: nconnect=$n mount has $n RDMA transports" "$xprts" "$n"
    F=$MP/nc.dat
    fio --name=layout --filename="$F" --size=64M --rw=write --bs=1M --direct=1 --ioengine=libaio \
        --iodepth=4 --end_fsync=1 --output=/dev/null >/dev/null 2>&1
    r0=$(rnr)
    read -r s0a s0b s0c <<<"$(stalls "$D/nconnect-$n.stats-before.json")"
    rc=0
    fio --name="nc$n" --filename="$F" --size=64M --rw=randread --bs=4k --iodepth=16 --numjobs="$n" \
        --ioengine=libaio --direct=1 --time_based --runtime="$FIO_SECONDS" --ramp_time=1 \
        --group_reporting --lat_percentiles=1 --randrepeat=0 --norandommap \
        --output-format=json --output="$D/nconnect-$n.json" || rc=$?
    r1=$(rnr)
    read -r s1a s1b s1c <<<"$(stalls "$D/nconnect-$n.stats-after.json")"
    summary=$(python3 - "$D/nconnect-$n.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
r = job["read"]
p99 = r.get("lat_ns", {}).get("percentile", {}).get("99.000000", 0) / 1000
print("%d %d %.0f %.0f" % (job["error"], r["total_ios"], r["iops"], p99))
PY
) || summary="unparsable"
    # shellcheck disable=SC2086
    set -- $summary
    if [ $rc = 0 ] && [ "${1:-x}" = 0 ] && [ "${2:-0}" -gt 0 ]; then
        pass "$TAG: nconnect=$n fio 4k randread qd16 x $n: ${3} IOPS, p99 ${4} us"
    else
        flunk "$TAG: nconnect=$n fio (fio exit $rc, error/ios/iops/p99: $summary)"
    fi
    check_eq "$TAG: nconnect=$n: no RNR retries during fio (rxe RNR counters before/after $r0/$r1)" "$((r1 - r0))" 0
    if [ "$TAG" = ours ]; then
        check "$TAG: nconnect=$n: credit and receive stalls read from rpcrdma-target stats --json (before/after: $s0a $s0b $s0c / $s1a $s1b $s1c)" \
            test "$(d "$s0a" "$s1a")" != -
    fi
    counters="rnr=$((r1 - r0)) recv_refill_stalls=$(d "$s0a" "$s1a") grants_ahead_of_receives=$(d "$s0b" "$s1b") credit_overruns=$(d "$s0c" "$s1c")"
    # for report.py's nconnect table
    echo "$counters" >"$D/nconnect-$n.counters"
    note "nconnect $TAG n=$n iops=${3:-0} p99_us=${4:-0} $counters ($(elapsed "$t") s)"
    rm -f "$F"
    check "$TAG: umount nconnect=$n" nfs_umount "$MP"
done
