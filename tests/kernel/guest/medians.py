#!/usr/bin/env python3
"""tests/kernel/guest/medians.py OUT PASS... — median ratios over alternating
rounds (issue 24 part 1's measurement protocol, KINTEROP_ROUNDS).

PASS... are the result directories under OUT in the order they ran
(single.sh: "kernel ours kernel.r2 ours.r2 ..."). A pass belongs to the group
of its name without the round suffix ".rN" ("kernel-2" counts as "kernel"):
"kernel", "ours", or a variant "ours-NAME". Each pass of ours (or of a
variant) is compared with the kernel pass that ran last before it (the first
one when none did), row by row, as report.py does (ours/kernel for IOPS and
MB/s, kernel/ours for latencies: above 1.0 = ours better); a row's figure is
the MEDIAN of those per-round ratios. The noise band: each kernel pass against
the kernel pass before it (cyclically, so N passes give N ratios; the
kernel's server against itself), median per row as well.

Prints one table per group of ours (median, and the lowest and highest
round), how many medians reach 1.0x and 2.0x, the rows below 1.0x, and the
kernel-against-kernel band; writes OUT/medians.json.
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import fio_figures, perf_figures, ratio  # noqa: E402

METRICS = ("iops", "mb_per_s", "latency_us_p50", "latency_us_p99")
HEADS = ("IOPS", "MB/s", "p50", "p99")


def group_of(name):
    g = re.sub(r"\.r[0-9]+$", "", name)
    return "kernel" if re.fullmatch(r"kernel(-[0-9]+)?", g) else g


def figures(out, name):
    """{row: {metric: value}} of one pass."""
    rows = {}
    d = os.path.join(out, name)
    if not os.path.isdir(d):
        return rows
    for f in sorted(os.listdir(d)):
        m = re.fullmatch(r"(fio|perf)-(.+)\.json", f)
        if not m:
            continue
        try:
            rows["%s %s" % m.groups()] = (fio_figures if m.group(1) == "fio" else perf_figures)(os.path.join(d, f))
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
    return rows


def ratios(kern, ours):
    """{(row, metric): ratio} of one pairing."""
    out = {}
    for row, k in kern.items():
        o = ours.get(row)
        if not o:
            continue
        for m in METRICS:
            r = ratio(m, k.get(m), o.get(m))
            if r is not None:
                out[(row, m)] = r
    return out


def summarize(per_round):
    """{(row, metric): [ratios]} -> {(row, metric): (median, lo, hi, n)}."""
    return {k: (statistics.median(v), min(v), max(v), len(v)) for k, v in per_round.items() if v}


def main():
    out, passes = sys.argv[1], sys.argv[2:]
    figs = {p: figures(out, p) for p in passes}
    kernels = [p for p in passes if group_of(p) == "kernel" and figs[p]]
    if not kernels:
        print("medians: no kernel pass with results")
        return
    groups = []
    for p in passes:
        g = group_of(p)
        if g != "kernel" and g not in groups:
            groups.append(g)
    doc = {"passes": passes, "groups": {}}
    for g in groups:
        per_round = {}
        for i, p in enumerate(passes):
            if group_of(p) != g or not figs[p]:
                continue
            before = [k for k in passes[:i] if k in kernels]
            k = before[-1] if before else kernels[0]
            for key, r in ratios(figs[k], figs[p]).items():
                per_round.setdefault(key, []).append(r)
        med = summarize(per_round)
        rows = sorted({row for row, _ in med}, key=lambda r: (not r.startswith("perf"), r))
        n_rounds = max((v[3] for v in med.values()), default=0)
        print()
        print("Median over %d round(s) of %s against the kernel's server (x = ours relative to kernel, above 1.0 ="
              " ours better; median [lowest-highest round])" % (n_rounds, g))
        print("%-26s" % "workload" + "".join(" | %-19s" % h for h in HEADS))
        for row in rows:
            cells = []
            for m in METRICS:
                v = med.get((row, m))
                cells.append(" | %-19s" % ("%.2f [%.2f-%.2f]" % v[:3] if v else "-"))
            print("%-26s" % row + "".join(cells))
        vals = [v[0] for v in med.values()]
        ge1 = sum(1 for v in vals if v >= 1.0)
        ge2 = sum(1 for v in vals if v >= 2.0)
        print("%s: median ratios >= 1.0x: %d of %d; >= 2.0x: %d of %d" % (g, ge1, len(vals), ge2, len(vals)))
        below = ["%s %s %.2f" % (row, m, med[(row, m)][0]) for row in rows for m in METRICS
                 if (row, m) in med and med[(row, m)][0] < 1.0]
        if below:
            print("%s below 1.0x: %s" % (g, "; ".join(below)))
        doc["groups"][g] = {
            "ge_1x": ge1, "ge_2x": ge2, "ratios": len(vals), "rounds": n_rounds,
            "rows": {"%s %s" % k: {"median": v[0], "lo": v[1], "hi": v[2], "n": v[3]} for k, v in med.items()},
        }
    # the kernel's server against itself: each pass against the one before
    # (cyclically)
    if len(kernels) >= 2:
        per_round = {}
        for i, k in enumerate(kernels):
            for key, r in ratios(figs[kernels[i - 1]], figs[k]).items():
                per_round.setdefault(key, []).append(r)
        med = summarize(per_round)
        vals = sorted(v[0] for v in med.values())
        ge1 = sum(1 for v in vals if v >= 1.0)
        ge2 = sum(1 for v in vals if v >= 2.0)
        print()
        print("kernel against kernel (%d passes, each against the one before, cyclically): median ratios %.2f to %.2f"
              " (middle half %.2f to %.2f); >= 1.0x: %d of %d; >= 2.0x: %d"
              % (len(kernels), vals[0], vals[-1], vals[len(vals) // 4], vals[(3 * len(vals)) // 4], ge1, len(vals),
                 ge2))
        doc["kernel_band"] = {"lo": vals[0], "hi": vals[-1], "ge_1x": ge1, "ge_2x": ge2, "ratios": len(vals),
                              "rows": {"%s %s" % k: v[0] for k, v in med.items()}}
    with open(os.path.join(out, "medians.json"), "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
