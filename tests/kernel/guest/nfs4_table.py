#!/usr/bin/env python3
"""tests/kernel/guest/nfs4_table.py DIR [OURS] — the NFSv4.2-over-RDMA comparison of
tests/kernel/guest/nfs4_compare.sh: for every fio job and perf run, the
median over the rounds DIR/r<N>/<server>/ of IOPS, MB/s and p50/p99
latency against the Linux server ("kernel") and rpcrdma-target ("ours"),
and the ratio of the medians, oriented as report.py's: above 1.0 means ours
is better (IOPS ours/kernel; latency kernel/ours, lower is better). Also
per row: every round's IOPS ratio (the two servers of one round) and the
Linux server against itself, max/min of its IOPS over its own rounds: the
noise floor a ratio has to clear. Summary lines: the fio rows at or above
1.0x per figure, and the noise floor over the fio rows. The order of each
round (DIR/r<N>/order.txt) is printed. Writes DIR/results.json. OURS: the
name of the results compared with the Linux server's (ours, or ours-uring
for another backend of the same rounds: DIR/results-ours-uring.json).
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import fio_figures, perf_figures, ratio  # noqa: E402

base = sys.argv[1]
# OURS: the name of ours' results (another backend's: ours-uring)
OURS = sys.argv[2] if len(sys.argv) > 2 else "ours"
rounds = sorted(glob.glob(os.path.join(base, "r[0-9]*")), key=lambda p: int(os.path.basename(p)[1:]))
rows = {}  # name -> server -> {round number: figures}
order = []
orders = []
for rd in rounds:
    n = int(os.path.basename(rd)[1:])
    try:
        orders.append(open(os.path.join(rd, "order.txt")).read().split())
    except OSError:
        orders.append(["?"])
    for server, name_in in (("kernel", "kernel"), ("ours", OURS)):
        for kind, pat, fig in (("fio", "fio-*.json", fio_figures), ("perf", "perf-*.json", perf_figures)):
            for p in sorted(glob.glob(os.path.join(rd, name_in, pat))):
                name = kind + " " + os.path.basename(p).split("-", 1)[1][:-5]
                try:
                    f = fig(p)
                except (KeyError, ValueError, TypeError, IndexError, json.JSONDecodeError):
                    continue
                if name not in rows:
                    rows[name] = {"kernel": {}, "ours": {}}
                    order.append(name)
                rows[name][server][n] = f


def med(figs, key):
    v = [f[key] for f in figs.values() if f.get(key)]
    return statistics.median(v) if v else None


def spread(figs, key):
    """max/min of one server's figure over its own rounds (None below 2 rounds)."""
    v = [f[key] for f in figs.values() if f.get(key)]
    return max(v) / min(v) if len(v) >= 2 else None


def fmt(v, w=9):
    if v is None:
        return "-".rjust(w)
    return ("%.0f" % v if v >= 100 else "%.2f" % v).rjust(w)


def fx(v, w=5):
    return ("%.2f" % v if v is not None else "-").rjust(w)


METRICS = ("iops", "latency_us_p50", "latency_us_p99")
out = {"rounds": len(rounds), "order": orders, "rows": {}}
print("NFSv4.2 over RDMA (Soft-RoCE): the Linux server (kernel) and rpcrdma-target (ours%s) in one boot," % (
    "" if OURS == "ours" else ": " + OURS))
print("%d round(s), order %s; medians over the rounds" % (len(rounds), ", ".join("-".join(o) for o in orders)))
print("x = ratio of the medians, above 1.0 = ours better (IOPS: ours/kernel; p50, p99 latency: kernel/ours);")
print("k max/min = the Linux server's IOPS over its own rounds, the noise floor")
head = "%-24s %8s %8s %5s %8s %8s %9s %9s %5s %9s %9s %5s %9s  %s" % (
    "job", "IOPS k", "IOPS o", "x", "MB/s k", "MB/s o", "p50us k", "p50us o", "x", "p99us k", "p99us o", "x",
    "k max/min", "IOPS x per round")
print(head)
print("-" * len(head))
at_least = {m: 0 for m in METRICS}
n_fio = 0
k_spreads = []
for name in order:
    k, o = rows[name]["kernel"], rows[name]["ours"]
    mk = {m: med(k, m) for m in METRICS + ("mb_per_s",)}
    mo = {m: med(o, m) for m in METRICS + ("mb_per_s",)}
    x = {m: ratio(m, mk[m], mo[m]) for m in METRICS}
    per_round = [ratio("iops", k[r]["iops"], o[r]["iops"]) for r in sorted(k) if r in o]
    per_round = [r for r in per_round if r is not None]
    ks = spread(k, "iops")
    if name.startswith("fio ") and x["iops"] is not None:
        n_fio += 1
        for m in METRICS:
            at_least[m] += x[m] is not None and x[m] >= 1.0
        if ks is not None:
            k_spreads.append(ks)
    print("%-24s %8s %8s %5s %8s %8s %9s %9s %5s %9s %9s %5s %9s  %s" % (
        name, fmt(mk["iops"], 8), fmt(mo["iops"], 8), fx(x["iops"]), fmt(mk["mb_per_s"], 8), fmt(mo["mb_per_s"], 8),
        fmt(mk["latency_us_p50"]), fmt(mo["latency_us_p50"]), fx(x["latency_us_p50"]),
        fmt(mk["latency_us_p99"]), fmt(mo["latency_us_p99"]), fx(x["latency_us_p99"]), fx(ks, 9),
        " ".join("%.2f" % r for r in per_round)))
    out["rows"][name] = {"kernel": k, "ours": o, "kernel_median": mk, "ours_median": mo, "ratio": x,
                         "iops_ratio_per_round": per_round, "kernel_iops_max_over_min": ks,
                         "ours_iops_max_over_min": spread(o, "iops")}
print("fio rows at or above 1.0x (ratio of medians), of %d: IOPS %d, p50 %d, p99 %d" % (
    n_fio, at_least["iops"], at_least["latency_us_p50"], at_least["latency_us_p99"]))
if k_spreads:
    print("noise floor, the Linux server against itself (IOPS max/min over its own rounds, fio rows): "
          "median %.2f, from %.2f to %.2f" % (statistics.median(k_spreads), min(k_spreads), max(k_spreads)))
else:
    print("noise floor: fewer than 2 rounds, none")
out["fio_rows"] = n_fio
out["fio_rows_at_least_1x"] = at_least
out["kernel_iops_max_over_min_fio"] = k_spreads
# ours again with spinning cores (nfs4_compare.sh, $NFS4_SPIN_US)
spin = os.path.join(base, "spin", "ours")
if os.path.isdir(spin) and OURS == "ours":
    print("ours with cores spinning before they block (spin_then_wait spin_us raised), against the kernel's median:")
    for kind, pat, fig in (("fio", "fio-*.json", fio_figures), ("perf", "perf-*.json", perf_figures)):
        for p in sorted(glob.glob(os.path.join(spin, pat))):
            name = kind + " " + os.path.basename(p).split("-", 1)[1][:-5]
            try:
                f = fig(p)
            except (KeyError, ValueError, TypeError, IndexError, json.JSONDecodeError):
                continue
            kr = rows.get(name, {}).get("kernel", {})
            ik = med(kr, "iops")
            print("%-24s %8s %8s %5s %9s %9s" % (name, fmt(ik, 8), fmt(f["iops"], 8), fx(ratio("iops", ik, f["iops"])),
                                               fmt(med(kr, "latency_us_p50")), fmt(f["latency_us_p50"])))
            out["spin " + name] = {"ours": f, "iops_ratio": ratio("iops", ik, f["iops"])}
json.dump(out, open(os.path.join(base, "results.json" if OURS == "ours" else "results-%s.json" % OURS), "w"), indent=1)
