#!/usr/bin/env python3
"""tests/kernel/guest/perop_table.py DIR — the table of nfs4_perop.sh: for
each server (kernel, ours), NFS version (v3, v4.2) and 4 KiB qd-1 fio job,
the median over the rounds DIR/r<N>/ of fio's IOPS and p50 completion
latency with every round's IOPS; the ratios that matter: vers=4.2 against
vers=3 on one server (the cost of v4 itself; IOPS v4.2/v3, per round and
of the medians) and ours against the Linux server per version (IOPS
ours/kernel), and ours against "base" (another build, when it ran). Then, from the first round, the RPCs the kernel client sent
per fio op (the mountstats counters before and after the job: operations
whose count moved, with their mean RTT and execute time in microseconds)
and for ours the target's system calls per fio op (strace -c -f over a
second run of the job)."""
import glob
import json
import os
import re
import statistics
import sys

base = sys.argv[1]
JOBS = ("rand-read-4k-qd1", "rand-write-4k-qd1")
rounds = sorted(glob.glob(os.path.join(base, "r[0-9]*")), key=lambda p: int(os.path.basename(p)[1:]))
# kernel, then ours-<backend> and base-<backend> as they ran
SERVERS = ["kernel"] + sorted({os.path.basename(p) for rd in rounds for p in glob.glob(os.path.join(rd, "*-*"))},
                              key=lambda n: (n.split("-", 1)[1], n))
VERS = ("v3", "v4.2")


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


def fmt(x):
    return "%.2f" % x if x is not None else "-"


fig = {}  # (server, vers, job) -> [(round, ios, iops, p50)]
for rd in rounds:
    n = int(os.path.basename(rd)[1:])
    for s in SERVERS:
        for v in VERS:
            for j in JOBS:
                r = fio(os.path.join(rd, s, v, j + ".json"))
                if r:
                    fig.setdefault((s, v, j), []).append((n,) + r)


def med(key, i):
    xs = [x[i] for x in fig.get(key, [])]
    return statistics.median(xs) if xs else None


def per_round(a, b):
    ra = {x[0]: x[2] for x in fig.get(a, [])}
    rb = {x[0]: x[2] for x in fig.get(b, [])}
    return " ".join("%.2f" % (ra[k] / rb[k]) for k in sorted(ra) if k in rb and rb[k] > 0)


print("rounds: %d (medians over them; 'per round': each round's ratio)" % len(rounds))
print("%-12s %-5s %-18s %8s %9s  %s" % ("server", "vers", "job", "IOPS", "p50 us", "IOPS per round"))
for s in SERVERS:
    for v in VERS:
        for j in JOBS:
            k = (s, v, j)
            if k not in fig:
                continue
            print("%-12s %-5s %-18s %8.0f %9.0f  %s" % (s, v, j, med(k, 2), med(k, 3),
                                                    " ".join("%.0f" % x[2] for x in fig[k])))
print()
print("vers=4.2 against vers=3 on the same server (IOPS 4.2/3; above 1.0: v4.2 faster):")
for s in SERVERS:
    for j in JOBS:
        a, b = (s, "v4.2", j), (s, "v3", j)
        if a in fig and b in fig:
            print("  %-12s %-18s x %s  per round %s" % (s, j, fmt(med(a, 2) / med(b, 2)), per_round(a, b)))
print("ours against the Linux server (IOPS ours/kernel; the issue's figure is v4.2 at 1.0 or more):")
for o in SERVERS[1:]:
    for v in VERS:
        for j in JOBS:
            a, b = (o, v, j), ("kernel", v, j)
            if a in fig and b in fig:
                print("  %-12s %-5s %-18s x %s  per round %s" % (o, v, j, fmt(med(a, 2) / med(b, 2)), per_round(a, b)))
if any(k[0].startswith("base-") for k in fig):
    print("ours against base, another build of the target (IOPS ours/base, same backend):")
    for o in SERVERS[1:]:
        if not o.startswith("ours-"):
            continue
        bse = "base-" + o.split("-", 1)[1]
        for v in VERS:
            for j in JOBS:
                a, b = (o, v, j), (bse, v, j)
                if a in fig and b in fig:
                    print("  %-12s %-5s %-18s x %s  per round %s" % (o, v, j, fmt(med(a, 2) / med(b, 2)), per_round(a, b)))
print()
first = rounds[0] if rounds else None
for s in SERVERS:
    for v in VERS:
        d = os.path.join(first, s, v) if first else ""
        for j in JOBS:
            r = fio(os.path.join(d, j + ".json"))
            if r is None:
                continue
            ios = r[0]
            print("%s %s %s (round 1, %d ops): RPCs per fio op" % (s, v, j, ios))
            a = counters(os.path.join(d, j + ".before"))
            b = counters(os.path.join(d, j + ".after"))
            for op in sorted(b):
                n = b[op][0] - a.get(op, (0, 0, 0))[0]
                if n <= 0:
                    continue
                rtt = (b[op][1] - a.get(op, (0, 0, 0))[1]) * 1e3 / n
                ex = (b[op][2] - a.get(op, (0, 0, 0))[2]) * 1e3 / n
                print("    %-14s %6d RPCs  %.3f per fio op  rtt %.0f us  exec %.0f us" % (op, n, n / max(ios, 1), rtt, ex))
            st = os.path.join(d, "strace", j + ".strace")
            if os.path.exists(st):
                calls = strace(st)
                r2 = fio(os.path.join(d, "strace", j + ".json"))
                ios2 = r2[0] if r2 else 0
                tot = sum(calls.values())
                top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
                print("    target syscalls (strace run, %d ops): %.1f per fio op: %s" % (
                    ios2, tot / max(ios2, 1), ", ".join("%s %.2f" % (k, c / max(ios2, 1)) for k, c in top)))
