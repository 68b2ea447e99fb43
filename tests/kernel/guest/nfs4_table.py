#!/usr/bin/env python3
"""tests/kernel/guest/nfs4_table.py DIR — the NFSv4.2-over-RDMA comparison of
tests/kernel/guest/nfs4_compare.sh: for every fio job and perf run, the
median over the rounds DIR/r<N>/<server>/ of IOPS, MB/s and p50/p99
latency against the Linux server ("kernel") and rpcrdma-target ("ours"),
and the ratio (IOPS ours/kernel: above 1.0 means ours is better). Also
prints every round's IOPS ratio, so the spread shows. Writes DIR/results.json.
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import fio_figures, perf_figures  # noqa: E402

base = sys.argv[1]
rounds = sorted(glob.glob(os.path.join(base, "r[0-9]*")), key=lambda p: int(os.path.basename(p)[1:]))
rows = {}  # name -> server -> [figures per round]
order = []
for rd in rounds:
    for server in ("kernel", "ours"):
        for kind, pat, fig in (("fio", "fio-*.json", fio_figures), ("perf", "perf-*.json", perf_figures)):
            for p in sorted(glob.glob(os.path.join(rd, server, pat))):
                name = kind + " " + os.path.basename(p).split("-", 1)[1][:-5]
                try:
                    f = fig(p)
                except (KeyError, ValueError, TypeError, IndexError, json.JSONDecodeError):
                    continue
                if name not in rows:
                    rows[name] = {"kernel": [], "ours": []}
                    order.append(name)
                rows[name][server].append(f)


def med(figs, key):
    v = [f[key] for f in figs if f.get(key)]
    return statistics.median(v) if v else None


def fmt(v, w=9):
    if v is None:
        return "-".rjust(w)
    return ("%.0f" % v if v >= 100 else "%.2f" % v).rjust(w)


out = {}
print("NFSv4.2 over RDMA (Soft-RoCE), Linux server (kernel) against rpcrdma-target (ours), %d round(s), medians"
      % len(rounds))
print("%-24s %9s %9s %7s %9s %9s %9s %9s  %s" % ("job", "IOPS k", "IOPS o", "x", "MB/s k", "MB/s o", "p50us k",
                                                "p50us o", "x per round"))
at_least = total = 0
for name in order:
    k, o = rows[name]["kernel"], rows[name]["ours"]
    ik, io = med(k, "iops"), med(o, "iops")
    x = io / ik if ik and io else None
    per_round = [b["iops"] / a["iops"] for a, b in zip(k, o) if a.get("iops") and b.get("iops")]
    if x is not None:
        total += 1
        at_least += x >= 1.0
    print("%-24s %9s %9s %7s %9s %9s %9s %9s  %s" % (
        name, fmt(ik), fmt(io), ("%.2f" % x) if x else "-", fmt(med(k, "mb_per_s")), fmt(med(o, "mb_per_s")),
        fmt(med(k, "latency_us_p50")), fmt(med(o, "latency_us_p50")), " ".join("%.2f" % r for r in per_round)))
    out[name] = {"kernel": k, "ours": o, "iops_ratio": x, "iops_ratio_per_round": per_round}
print("IOPS ratios >= 1.0: %d of %d" % (at_least, total))
# ours again with spinning cores (nfs4_compare.sh, $NFS4_SPIN_US)
spin = os.path.join(base, "spin", "ours")
if os.path.isdir(spin):
    print("ours with cores spinning before they block (spin_then_wait spin_us raised), against the kernel's median:")
    for kind, pat, fig in (("fio", "fio-*.json", fio_figures), ("perf", "perf-*.json", perf_figures)):
        for p in sorted(glob.glob(os.path.join(spin, pat))):
            name = kind + " " + os.path.basename(p).split("-", 1)[1][:-5]
            try:
                f = fig(p)
            except (KeyError, ValueError, TypeError, IndexError, json.JSONDecodeError):
                continue
            ik = med(rows.get(name, {}).get("kernel", []), "iops")
            print("%-24s %9s %9s %7s %9s %9s" % (name, fmt(ik), fmt(f["iops"]), ("%.2f" % (f["iops"] / ik)) if ik else "-",
                                              fmt(med(rows.get(name, {}).get("kernel", []), "latency_us_p50")),
                                              fmt(f["latency_us_p50"])))
            out["spin " + name] = {"ours": f, "iops_ratio": f["iops"] / ik if ik else None}
json.dump(out, open(os.path.join(base, "results.json"), "w"), indent=1)
