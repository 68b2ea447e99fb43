#!/usr/bin/env python3
"""tests/kernel/guest/compare_steps.py OUT [RATIO] [FLOOR_S] — the functional
workload's step times of the kernel's server and ours side by side
(OUT/kernel/steps.txt, OUT/ours/steps.txt, written by lib.sh's `step`), one
check per step: ours may take at most RATIO (3) times the kernel's time for
the same step, where the kernel's time counts as at least FLOOR_S (1.0 s), so
that steps of a few hundredths of a second do not fail on noise. Appends the
checks to OUT/checks.txt, prints the table, and writes it to
OUT/steps-table.txt. Exit status 0 whether or not a check failed (the host
reads the checks)."""
import os
import sys

out = sys.argv[1]
ratio = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
floor_s = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0


def load(server):
    steps = []
    try:
        with open(os.path.join(out, server, "steps.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    steps.append((parts[0], float(parts[1])))
    except FileNotFoundError:
        pass
    return steps


kernel, ours = load("kernel"), load("ours")
checks = []
lines = ["%-22s %10s %10s %8s" % ("functional step", "kernel s", "ours s", "ratio")]
k_by = dict(kernel)
for name, o in ours:
    k = k_by.get(name)
    if k is None:
        checks.append("not ok - steps: '%s' timed for ours but not for the kernel's server" % name)
        continue
    lines.append("%-22s %10.1f %10.1f %7.2fx" % (name, k, o, o / max(k, 0.01)))
    limit = ratio * max(k, floor_s)
    verdict = "ok" if o <= limit else "not ok"
    checks.append("%s - steps: ours takes at most %.0fx the kernel's time for '%s' (%.1f s vs %.1f s, limit %.1f s)"
                  % (verdict, ratio, name, o, k, limit))
for name, _ in kernel:
    if name not in dict(ours):
        checks.append("not ok - steps: '%s' timed for the kernel's server but not for ours" % name)
if not kernel or not ours:
    checks.append("not ok - steps: both servers' step times recorded (kernel %d, ours %d)" % (len(kernel), len(ours)))
lines.append("%-22s %10.1f %10.1f" % ("total", sum(t for _, t in kernel), sum(t for _, t in ours)))
table = "\n".join(lines)
print(table)
with open(os.path.join(out, "steps-table.txt"), "w") as f:
    f.write(table + "\n")
with open(os.path.join(out, "checks.txt"), "a") as f:
    for c in checks:
        print(c)
        f.write(c + "\n")
