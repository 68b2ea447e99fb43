#!/usr/bin/env python3
"""tests/kernel/guest/report.py OUT [KERNEL OURS] — the side-by-side table of the kernel-interop
test: every fio job and perf tool run against the kernel's NFS server
("kernel") and rpcrdma-target ("ours") on the same fabric, with IOPS, MB/s,
p50 and p99 latency, and the perftest floor of the fabric.

The "x" columns are ours relative to the kernel, oriented so that above 1.0
means ours is better: ours/kernel for IOPS and MB/s, kernel/ours for
latencies. Writes OUT/results.json (every figure and ratio) and prints the
table and how many ratios reach 1.0 (the goal) and 2.0 (the long-term goal).

KERNEL and OURS name the two result directories under OUT ("kernel" and
"ours" unless given: single.sh's second kernel pass or a variant of ours);
the JSON then goes to OUT/results-KERNEL-OURS.json.

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
# the two directories compared (report.py OUT KERNEL OURS)
PAIR = tuple(sys.argv[2:4]) if len(sys.argv) >= 4 else SERVERS


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
    for server in PAIR:
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
        for role, server in zip(SERVERS, PAIR):
            p = os.path.join(out, server, "%s-%s.json" % (kind, job))
            try:
                figs[role] = (fio_figures if kind == "fio" else perf_figures)(p)
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                figs[role] = None
        rows.append((n, figs))

    metrics = ("iops", "mb_per_s", "latency_us_p50", "latency_us_p99")
    heads = ("IOPS", "MB/s", "p50 us", "p99 us")
    w = 9
    line = "%-24s" % "workload" + "".join(
        " | %s %s %s" % (("%s kern" % h).rjust(w + 2), "ours".rjust(w), "x".rjust(5)) for h in heads)
    print("Side by side: the kernel's NFS server (kern) and rpcrdma-target (ours), NFSv3 over RDMA on rxe0;")
    if PAIR != SERVERS:
        print("kern = the results in %s/, ours = those in %s/" % PAIR)
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
    if PAIR != SERVERS:
        with open(os.path.join(out, "results-%s-%s.json" % PAIR), "w") as f:
            json.dump(results, f, indent=1)
        return
    transports = transport_table(out)
    if transports:
        results["transports"] = transports
    nconnect = nconnect_table(out)
    if nconnect:
        results["nconnect"] = nconnect
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


def cpu_ms_per_mb(path, mb_per_s):
    """Guest CPU (all vCPUs, USER_HZ 100) per MB moved over one fio job, from
    fio.sh's "BUSY0 TOTAL0 BUSY1 TOTAL1 SECONDS" (the job's wall time, ramp
    included, at the measured rate)."""
    b0, _, b1, _, secs = (float(x) for x in open(path).read().split()[:5])
    if mb_per_s <= 0 or secs <= 0:
        return None
    return (b1 - b0) * 10.0 / (mb_per_s * secs)


def transport_table(out):
    """RDMA against TCP (issue 24 part 2): for each server whose fio matrix
    also ran over TCP (KINTEROP_FIO_TCP=1), MB/s and guest CPU per MB on each
    transport and RDMA's ratio (throughput rdma/tcp; CPU per MB tcp/rdma, so
    above 1.0 = RDMA better in both)."""
    rows = []
    for server in SERVERS:
        for p in sorted(glob.glob(os.path.join(out, server, "fiocpu-tcp-*.txt"))):
            job = os.path.basename(p)[len("fiocpu-tcp-"):-4]
            rec = {"server": server, "job": job}
            try:
                for proto, jp in (("rdma", os.path.join(out, server, "fio-%s.json" % job)),
                                  ("tcp", os.path.join(out, server, "tcp", "fio-%s.json" % job))):
                    f = fio_figures(jp)
                    cpu = cpu_ms_per_mb(os.path.join(out, server, "fiocpu-%s-%s.txt" % (proto, job)), f["mb_per_s"])
                    rec[proto] = {"mb_per_s": f["mb_per_s"], "iops": f["iops"], "cpu_ms_per_mb": cpu}
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                continue
            r, t = rec["rdma"], rec["tcp"]
            rec["throughput_x"] = r["mb_per_s"] / t["mb_per_s"] if t["mb_per_s"] > 0 else None
            rec["cpu_x"] = t["cpu_ms_per_mb"] / r["cpu_ms_per_mb"] if r["cpu_ms_per_mb"] and t["cpu_ms_per_mb"] else None
            rows.append(rec)
    if not rows:
        return rows
    print()
    print("RDMA against TCP (fio through the kernel client, proto=rdma and proto=tcp; guest CPU ms per MB, all vCPUs;")
    print("x = RDMA's advantage: MB/s rdma/tcp, CPU per MB tcp/rdma)")
    print("%-7s %-20s | %9s %9s %5s | %9s %9s %5s" % ("server", "fio job", "rdma MB/s", "tcp MB/s", "x", "rdma ms/MB", "tcp", "x"))
    for rec in rows:
        r, t = rec["rdma"], rec["tcp"]
        x1, x2 = rec["throughput_x"], rec["cpu_x"]
        print("%-7s %-20s | %9s %9s %5s | %9s %9s %5s" % (
            rec["server"], rec["job"], fmt(r["mb_per_s"], 9), fmt(t["mb_per_s"], 9),
            "%.2f" % x1 if x1 else "-", fmt(r["cpu_ms_per_mb"], 9), fmt(t["cpu_ms_per_mb"], 9),
            "%.2f" % x2 if x2 else "-"))
    return rows


def nconnect_table(out):
    """Many connections from one client (issue 24 part 4, KINTEROP_NCONNECT=1):
    per server and nconnect setting, fio 4 KiB random reads at qd 16 per
    connection (IOPS, p99) with the RNR retries rxe counted and, for ours, the
    engines' credit and receive stalls from `rpcrdma-target stats --json`
    over the run (nconnect.sh's OUT/<server>/nconnect-<n>.counters)."""
    keys = ("rnr", "recv_refill_stalls", "grants_ahead_of_receives", "credit_overruns")
    rows = []
    for server in SERVERS:
        for p in glob.glob(os.path.join(out, server, "nconnect-*.counters")):
            n = os.path.basename(p)[len("nconnect-"):-len(".counters")]
            rec = {"server": server, "nconnect": int(n) if n.isdigit() else n}
            try:
                kv = dict(w.split("=", 1) for w in open(p).read().split() if "=" in w)
                for k in keys:
                    v = kv.get(k, "-")
                    rec[k] = int(v) if v.lstrip("-").isdigit() else None
            except OSError:
                continue
            try:
                f = fio_figures(os.path.join(out, server, "nconnect-%s.json" % n))
                rec["iops"], rec["latency_us_p99"] = f["iops"], f["latency_us_p99"]
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                rec["iops"] = rec["latency_us_p99"] = None
            rows.append(rec)
    if not rows:
        return rows
    rows.sort(key=lambda r: (SERVERS.index(r["server"]), str(r["nconnect"]).zfill(4)))
    print()
    print("nconnect (fio 4 KiB random reads, qd 16 per connection; RNR retries from rxe's counters; for ours the")
    print("credit and receive stalls of its engines from rpcrdma-target stats --json over the run, - = not read)")
    print("%-7s %8s | %9s %9s | %5s %12s %12s %12s" % (
        "server", "nconnect", "IOPS", "p99 us", "RNR", "refill stall", "grants>recv", "credit over"))
    for r in rows:
        print("%-7s %8s | %9s %9s | %5s %12s %12s %12s" % (
            r["server"], r["nconnect"], fmt(r["iops"], 9), fmt(r["latency_us_p99"], 9),
            *("-" if r[k] is None else str(r[k]) for k in keys)))
    return rows


if __name__ == "__main__":
    main()
