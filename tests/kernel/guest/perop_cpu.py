#!/usr/bin/env python3
"""Where the CPU went in each perop job (tests/kernel/guest/nfs4_perop.sh).

Usage: perop_cpu.py BASE [HOSTSCHED]

BASE is the perop output directory (r<round>/<server>/v<vers>/<job>.*).
Per fio job: IOPS; each guest vCPU's busy time per fio op, split into user,
system and interrupt time (from /proc/stat around the job); the Soft-RoCE
device's counters per fio op that moved (RNR NAKs, retries, duplicate
requests would show here). With HOSTSCHED (the host's samples of every QEMU
thread's /proc/<pid>/task/<tid>/schedstat, written by
tests/kernel/hostsched.sh while the VM ran), also each busy QEMU thread's
share of the job's wall time running and waiting runnable on the host's
run queue (a vCPU the host does not run shows as waiting).
"""
import collections
import glob
import json
import os
import sys


def pstat(path):
    """cpuN -> (total, idle+iowait, user+nice, system, irq+softirq) ticks"""
    d = {}
    for line in open(path):
        p = line.split()
        v = list(map(int, p[1:]))
        d[p[0]] = (sum(v), v[3] + v[4], v[0] + v[1], v[2], v[5] + v[6])
    return d


def counters(path):
    d = {}
    for line in open(path):
        p = line.split()
        if len(p) == 2 and p[1].lstrip("-").isdigit():
            d[p[0]] = int(p[1])
    return d


def host_samples(path):
    """tid -> [(time, run_ns, wait_ns)] in time order"""
    s = collections.defaultdict(list)
    for line in open(path):
        p = line.split()
        if len(p) != 6:
            continue
        s[p[1]].append((float(p[0]), int(p[3]), int(p[4])))
    return s


def sample_at(lst, t):
    best = None
    for x in lst:
        if x[0] > t:
            break
        best = x
    return best


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    base = sys.argv[1]
    host = host_samples(sys.argv[2]) if len(sys.argv) > 2 and os.path.exists(sys.argv[2]) else None
    rows = []
    for w in sorted(glob.glob(os.path.join(base, "r*", "*", "v*", "*.when"))):
        stem = w[: -len(".when")]
        try:
            t0, t1 = [float(x) for x in open(w).read().split()[:2]]
            job = json.load(open(stem + ".json"))["jobs"][0]
            ops = job["read"]["total_ios"] + job["write"]["total_ios"]
            iops = job["read"]["iops"] + job["write"]["iops"]
            before, after = pstat(stem + ".pstat.before"), pstat(stem + ".pstat.after")
        except (OSError, ValueError, KeyError, IndexError):
            continue
        if ops == 0:
            continue
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        cpus = []
        for c in sorted(after):
            d = [a - b for a, b in zip(after[c], before.get(c, after[c]))]
            if d[0] <= 0:
                continue
            per_op = lambda ticks: ticks / hz / ops * 1e6
            cpus.append("%s busy %4.0f (usr %4.0f sys %4.0f irq %3.0f)" % (
                c, per_op(d[0] - d[1]), per_op(d[2]), per_op(d[3]), per_op(d[4])))
        moved = ""
        try:
            rb, ra = counters(stem + ".rxe.before"), counters(stem + ".rxe.after")
            moved = " ".join("%s %.3f" % (k, (ra[k] - rb.get(k, 0)) / ops)
                             for k in sorted(ra) if ra[k] != rb.get(k, 0))
        except OSError:
            pass
        hs = ""
        if host:
            parts = []
            for tid, lst in sorted(host.items()):
                a, b = sample_at(lst, t0), sample_at(lst, t1)
                if not a or not b or b[0] - a[0] < 1:
                    continue
                dt = (b[0] - a[0]) * 1e9
                run, wait = (b[1] - a[1]) / dt, (b[2] - a[2]) / dt
                if run > 0.05:
                    parts.append("%s run %.2f wait %.2f" % (tid, run, wait))
            hs = "; ".join(parts)
        name = os.path.relpath(stem, base)
        rows.append((name, iops, cpus, moved, hs))
    print("\nCPU per fio op (us of each guest vCPU per op, /proc/stat around each job); Soft-RoCE counters per op; host QEMU threads (share of wall time)")
    for name, iops, cpus, moved, hs in rows:
        print("%-42s IOPS %6.0f | %s" % (name, iops, " | ".join(cpus)))
        if moved:
            print("    rxe per op: %s" % moved)
        if hs:
            print("    host: %s" % hs)


if __name__ == "__main__":
    main()
