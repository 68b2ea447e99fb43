#!/usr/bin/env python3
"""tests/kernel/guest/report.py OUT — the side-by-side table of the kernel-interop
test: every fio job and perf tool run against the kernel's NFS server
("kernel") and rpcrdma-target ("ours") on the same fabric, with IOPS, MB/s,
p50 and p99 latency, and the perftest floor of the fabric.

The "x" columns are ours relative to the kernel, oriented so that above 1.0
means ours is better: ours/kernel for IOPS and MB/s, kernel/ours for
latencies. Writes OUT/results.json (every figure and ratio) and prints the
table and how many ratios reach 1.0 (the goal) and 2.0 (the long-term goal).

Inputs (any may be missing; a missing figure prints as "-"):
  OUT/<server>/fio-<job>.json   fio --output-format=json --lat_percentiles=1
  OUT/<server>/perf-<job>.json  the perf tool's --json output
  OUT/floor/<tool>-<size>.txt   perftest output
"""
import glob
import json
import os
import re
import sys

SERVERS = ("kernel", "ours")


def fio_figures(path):
    job = json.load(open(path))["jobs"][0]
    side = job["read"] if job["read"]["total_ios"] > 0 else job["write"]
    pct = side["lat_ns"].get("percentile", {})
    return {
        "iops": side["iops"],
        "mb_per_s": side["bw_bytes"] / 1e6,
        "latency_us_p50": pct["50.000000"] / 1e3 if "50.000000" in pct else None,
        "latency_us_p99": pct["99.000000"] / 1e3 if "99.000000" in pct else None,
    }


def perf_figures(path):
    """The perf tool's --json result (perf/src/stats.rs RunResult)."""
    r = json.load(open(path))
    return {
        "iops": r["iops"],
        "mb_per_s": r["mb_per_s"] if r["size_bytes"] > 0 else None,
        "latency_us_p50": r["latency_us"]["p50"],
        "latency_us_p99": r["latency_us"]["p99"],
    }


def floor_figures(path):
    size = re.search(r"-(\d+)\.txt$", path).group(1)
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) >= 9 and f[0] == size and f[1].isdigit():
            return {"iops": None, "mb_per_s": None, "latency_us_p50": float(f[4]), "latency_us_p99": float(f[7])}
    return None


def ratio(metric, kernel, ours):
    if kernel is None or ours is None or kernel <= 0 or ours <= 0:
        return None
    return ours / kernel if metric in ("iops", "mb_per_s") else kernel / ours


def fmt(v, width):
    if v is None:
        return "-".rjust(width)
    if v >= 1000:
        return ("%.0f" % v).rjust(width)
    if v >= 100:
        return ("%.1f" % v).rjust(width)
    return ("%.2f" % v).rjust(width)


def main():
    out = sys.argv[1]
    rows = []  # (name, {server: figures})
    names = []
    for server in SERVERS:
        for p in sorted(glob.glob(os.path.join(out, server, "perf-*.json"))):
            n = "perf " + os.path.basename(p)[5:-5]
            if n not in names:
                names.append(n)
        for p in sorted(glob.glob(os.path.join(out, server, "fio-*.json"))):
            n = "fio " + os.path.basename(p)[4:-5]
            if n not in names:
                names.append(n)
    for n in names:
        kind, job = n.split(" ", 1)
        figs = {}
        for server in SERVERS:
            p = os.path.join(out, server, "%s-%s.json" % (kind, job))
            try:
                figs[server] = (fio_figures if kind == "fio" else perf_figures)(p)
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                figs[server] = None
        rows.append((n, figs))

    metrics = ("iops", "mb_per_s", "latency_us_p50", "latency_us_p99")
    heads = ("IOPS", "MB/s", "p50 us", "p99 us")
    w = 9
    line = "%-24s" % "workload" + "".join(
        " | %s %s %s" % (("%s kern" % h).rjust(w + 2), "ours".rjust(w), "x".rjust(5)) for h in heads)
    print("Side by side: the kernel's NFS server (kern) and rpcrdma-target (ours), NFSv3 over RDMA on rxe0;")
    print("x = ours relative to kernel, above 1.0 = ours better (IOPS, MB/s: ours/kern; latency: kern/ours)")
    print(line)
    print("-" * len(line))
    results = {"rows": [], "floor": []}
    ratios = []
    for n, figs in rows:
        cells = []
        rec = {"workload": n}
        for m in metrics:
            k = figs["kernel"][m] if figs["kernel"] else None
            o = figs["ours"][m] if figs["ours"] else None
            r = ratio(m, k, o)
            if r is not None:
                ratios.append((n, m, r))
            rec[m] = {"kernel": k, "ours": o, "ratio": r}
            cells.append(" | %s %s %s" % (fmt(k, w + 2), fmt(o, w), ("%.2f" % r).rjust(5) if r is not None else "-".rjust(5)))
        print("%-24s" % n + "".join(cells))
        results["rows"].append(rec)
    floor = sorted(glob.glob(os.path.join(out, "floor", "ib_*_lat-*.txt")))
    floor = [p for p in floor if not p.endswith(".server.txt")]
    if floor:
        print("-" * len(line))
        print("fabric floor (perftest on rxe0, loopback in the guest; t_typical as p50, 99% percentile as p99):")
        for p in floor:
            f = floor_figures(p)
            name = os.path.basename(p)[:-4].replace("-", " ") + " B"
            results["floor"].append({"test": name, **(f or {})})
            print("  %-22s p50 %s us   p99 %s us" % (name, fmt(f and f["latency_us_p50"], 8), fmt(f and f["latency_us_p99"], 8)))
    if ratios:
        ge1 = sum(1 for _, _, r in ratios if r >= 1.0)
        ge2 = sum(1 for _, _, r in ratios if r >= 2.0)
        print("ratios >= 1.0x (goal): %d of %d; >= 2.0x (long-term goal): %d of %d" % (ge1, len(ratios), ge2, len(ratios)))
        below = ["%s %s %.2f" % (n, m, r) for n, m, r in ratios if r < 1.0]
        if below:
            print("below 1.0x: " + "; ".join(below))
        results["goal_1x_met"] = ge1
        results["goal_2x_met"] = ge2
        results["ratios"] = len(ratios)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
