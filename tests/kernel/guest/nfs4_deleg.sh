# shellcheck shell=bash
# tests/kernel/guest/nfs4_deleg.sh — the one-guest part of the `deleg` step
# of tests/kernel/guest/nfs4.sh (issue 23), sourced after lib.sh, servers.sh
# and nfs4_state.sh:
#   nfs4_deleg_fio   a read-mostly job on one vers=4.2 RDMA mount, with
#                    `nfs4.delegations` on and off in $DELEG_FIO_PAIRS (3)
#                    pairs in this one boot, the order alternating (on off,
#                    off on, on off, ...; the target started again each
#                    time): (1) fio, 4 KiB random reads of a
#                    64 MiB file at qd 1 (buffered, the page cache dropped
#                    first); (2) a loop of open, one 4 KiB read at a random
#                    offset, close, on the same file (what close-to-open
#                    consistency costs without a delegation). For each: the
#                    rate, and the GETATTR, ACCESS, OPEN and CLOSE Calls the
#                    client sent (its mountstats, before and after), into
#                    $OUT/ours/deleg-fio.txt. Checks: a delegation was
#                    granted with them on and none with them off; with them
#                    on the client sent no more GETATTR, ACCESS, OPEN and
#                    CLOSE Calls in fio, and fewer in the open-read-close
#                    loop (none: it opens under the delegation, where
#                    without one each open is an OPEN and a CLOSE, whose
#                    attributes stand for close-to-open's GETATTR).
# The two-client part (the recall over RDMA) runs in the two-guest run
# (tests/kernel/guest/deleg.sh); its capture is dissected by tshark_cb.sh.

# mount_ops MP: "GETATTR ACCESS OPEN CLOSE READ" counts of the mount
# (OPEN: OPEN and OPEN_NOATTR, which the client counts apart: an open by
# file handle of a file it has looked up already goes as OPEN_NOATTR)
mount_ops() {
    awk -v mp="$1" '$1 == "device" { on = ($5 == mp) }
        on && $1 ~ /^(GETATTR|ACCESS|OPEN|OPEN_NOATTR|CLOSE|READ):$/ { n[$1] = $2 }
        END { print n["GETATTR:"] + 0, n["ACCESS:"] + 0, n["OPEN:"] + n["OPEN_NOATTR:"], n["CLOSE:"] + 0, n["READ:"] + 0 }' /proc/self/mountstats
}

# the target's count of delegations granted
delegs_granted() {
    "$BIN/rpcrdma-target" stats -c "$OUT/ours/target.json" --json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["nfs4"]["delegations_granted"])' 2>/dev/null || echo "?"
}

nfs4_deleg_fio() {
    local on mp=/mnt/deleg-fio secs=${DELEG_FIO_SECONDS:-10} out=$OUT/ours/deleg-fio.txt
    local b a iops what pair order
    : >"$out"
    for pair in $(seq 1 "${DELEG_FIO_PAIRS:-3}"); do
    order="1 0"
    [ $((pair % 2)) = 0 ] && order="0 1"
    for on in $order; do
        what="deleg fio pair $pair delegations=$on"
        TARGET_DELEGATIONS=$on ours_start || continue
        if ! nfs4_mount "vers=4.2,$NFS4_RDMA" "$mp" "$what"; then
            ours_stop
            continue
        fi
        fio --name=layout --filename="$mp/d.dat" --size=64M --rw=write --bs=1M --direct=1 --ioengine=psync \
            --end_fsync=1 --output=/dev/null >/dev/null 2>&1
        # a fresh mount, so the reader's first OPEN is the job's
        check "$what: umount after the layout" nfs_umount "$mp"
        nfs4_mount "vers=4.2,$NFS4_RDMA" "$mp" "$what: remount" || {
            ours_stop
            continue
        }
        echo 3 >/proc/sys/vm/drop_caches
        b=$(mount_ops "$mp")
        fio --name=randread --filename="$mp/d.dat" --size=64M --rw=randread --bs=4k --iodepth=1 --ioengine=psync \
            --time_based --runtime="$secs" --output-format=json --output="$OUT/ours/deleg-fio-$on.json" >/dev/null 2>&1
        a=$(mount_ops "$mp")
        iops=$(python3 -c 'import json, sys; print("%.0f" % json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"])' \
            "$OUT/ours/deleg-fio-$on.json" 2>/dev/null || echo "?")
        echo "fio delegations=$on iops=$iops pair=$pair load=$(cut -d' ' -f1 /proc/loadavg) ops_before=$b ops_after=$a" >>"$out"
        b=$a
        # open, 4 KiB read, close, for $secs seconds
        iops=$(python3 - "$mp/d.dat" "$secs" <<'PY'
import os, random, sys, time
path, secs = sys.argv[1], float(sys.argv[2])
end, n = time.monotonic() + secs, 0
while time.monotonic() < end:
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, 4096, random.randrange(64 << 8) << 12)
    os.close(fd)
    n += 1
print("%.0f" % (n / secs))
PY
        )
        a=$(mount_ops "$mp")
        echo "open-read-close delegations=$on per_s=$iops pair=$pair load=$(cut -d' ' -f1 /proc/loadavg) ops_before=$b ops_after=$a" >>"$out"
        if [ "$on" = 1 ]; then
            check "$what: the target granted delegations ($(delegs_granted))" test "$(delegs_granted)" -ge 1
        else
            check_eq "$what: the target granted no delegation" "$(delegs_granted)" 0
        fi
        check "$what: umount" nfs_umount "$mp"
        ours_stop
    done
    done
    cat "$out"
    # per pair: the rates on and off and their ratio; the Calls of each
    # run; the median ratio over the pairs
    python3 - "$out" "$CHECKS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    job, on, rate, pair = f[0], f[1].split("=")[1], f[2].split("=")[1], f[3].split("=")[1]
    nums = [int(x) for x in line.split("ops_before=")[1].split("ops_after=")[0].split()]
    after = [int(x) for x in line.split("ops_after=")[1].split()]
    d = [y - x for x, y in zip(nums, after)]
    rows[(job, pair, on)] = (rate, d)
    print("%-16s pair %s delegations=%s rate %s/s; Calls: GETATTR %d ACCESS %d OPEN %d CLOSE %d READ %d" % ((job, pair, on, rate) + tuple(d)))
pairs = sorted({p for (_, p, _) in rows}, key=int)
with open(sys.argv[2], "a") as c:
    for job in ("fio", "open-read-close"):
        ratios, fails, calls_on, calls_off = [], 0, 0, 0
        for p in pairs:
            if (job, p, "1") not in rows or (job, p, "0") not in rows:
                fails += 1
                continue
            (r_on, on), (r_off, off) = rows[(job, p, "1")], rows[(job, p, "0")]
            m_on, m_off = sum(on[:4]), sum(off[:4])
            calls_on, calls_off = calls_on + m_on, calls_off + m_off
            fails += not (m_on <= m_off if job == "fio" else m_on < m_off)
            try:
                ratios.append(float(r_on) / float(r_off))
                print("deleg %s pair %s: on %s/s off %s/s ratio %.3f; GETATTR+ACCESS Calls on %d off %d" % (
                    job, p, r_on, r_off, ratios[-1], on[0] + on[1], off[0] + off[1]))
            except (ValueError, ZeroDivisionError):
                fails += 1
        med = "%.3f" % statistics.median(ratios) if ratios else "?"
        r = "%s - deleg %s: GETATTR+ACCESS+OPEN+CLOSE Calls with delegations on (%d) %s off (%d) in each of %d pairs; rate on/off median ratio %s (%s)" % (
            "ok" if fails == 0 and pairs else "not ok", job, calls_on, "no more than" if job == "fio" else "fewer than",
            calls_off, len(pairs), med, " ".join("%.3f" % x for x in ratios))
        print(r)
        c.write(r + "\n")
PY
}
