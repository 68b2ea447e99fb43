#!/usr/bin/env python3
"""tests/kernel/guest/perop_table.py DIR — the table of nfs4_perop.sh: for
each server (kernel, ours), NFS version (v3, v4.2) and 4 KiB qd-1 fio job,
fio's IOPS and p50 completion latency, then the RPCs the kernel client
sent per fio op (from the mountstats counters before and after the job:
operations whose count moved, with their mean RTT and execute time in
microseconds), and for ours the target's system calls per fio op (strace
-c -f over a second run of the job)."""
import glob
import json
import os
import re
import sys

base = sys.argv[1]
JOBS = ("rand-read-4k-qd1", "rand-write-4k-qd1")


def counters(path):
    out = {}
    try:
        for line in open(path):
            f = line.split()
            if len(f) == 4:
                out[f[0]] = tuple(int(x) for x in f[1:])
    except (OSError, ValueError):
        pass
    return out


def fio(path):
    try:
        job = json.load(open(path))["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    side = job["read"] if job["read"]["total_ios"] else job["write"]
    p50 = side.get("clat_ns", {}).get("percentile", {}).get("50.000000", 0) / 1e3
    return side["total_ios"], side["iops"], p50


def strace(path):
    calls = {}
    try:
        for line in open(path):
            f = line.split()
            if len(f) >= 5 and re.match(r"^[0-9.]+$", f[0]) and f[-1] != "total":
                calls[f[-1]] = calls.get(f[-1], 0) + int(f[3])
    except (OSError, ValueError):
        pass
    return calls


for server in ("kernel", "ours"):
    for vers in ("v3", "v4.2"):
        d = os.path.join(base, server, vers)
        if not os.path.isdir(d):
            continue
        for job in JOBS:
            r = fio(os.path.join(d, job + ".json"))
            if r is None:
                print("%s %s %s: no fio result" % (server, vers, job))
                continue
            ios, iops, p50 = r
            print("%s %s %s: %.0f IOPS, p50 %.0f us, %d ops" % (server, vers, job, iops, p50, ios))
            a = counters(os.path.join(d, job + ".before"))
            b = counters(os.path.join(d, job + ".after"))
            for op in sorted(b):
                n = b[op][0] - a.get(op, (0, 0, 0))[0]
                if n <= 0:
                    continue
                rtt = (b[op][1] - a.get(op, (0, 0, 0))[1]) * 1e3 / n
                ex = (b[op][2] - a.get(op, (0, 0, 0))[2]) * 1e3 / n
                print("    %-14s %8d RPCs  %.3f per fio op  rtt %.0f us  exec %.0f us" % (op, n, n / max(ios, 1), rtt, ex))
            st = os.path.join(d, "strace", job + ".strace")
            if os.path.exists(st):
                s = strace(st)
                r2 = fio(os.path.join(d, "strace", job + ".json"))
                ios2 = r2[0] if r2 else 0
                tot = sum(s.values())
                top = sorted(s.items(), key=lambda kv: -kv[1])[:8]
                print("    target syscalls (strace run, %d ops): %.1f per fio op: %s" % (
                    ios2, tot / max(ios2, 1), ", ".join("%s %.2f" % (k, v / max(ios2, 1)) for k, v in top)))
for f in glob.glob(os.path.join(base, "ours", "v4.2", "v42-ops.txt")):
    print("first COMPOUNDs of ours' vers=4.2 jobs (frame xid msgtyp ops status): see", f)
