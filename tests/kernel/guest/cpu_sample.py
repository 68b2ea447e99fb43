#!/usr/bin/env python3
"""tests/kernel/guest/cpu_sample.py PERIOD_S WINDOW_S — every PERIOD_S
seconds, print the ten busiest threads of the guest over the next WINDOW_S
seconds (user + system time from /proc/<pid>/task/<tid>/stat, as % of one
CPU), until killed. Diagnostics for the logs: what shares the guest's vCPUs
with the NFS client and the server."""
import os
import sys
import time

period, window = float(sys.argv[1]), float(sys.argv[2])
hz = os.sysconf("SC_CLK_TCK")


def snapshot():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%s/task/%s/stat" % (pid, tid)) as f:
                    s = f.read()
            except OSError:
                continue
            comm = s[s.index("(") + 1 : s.rindex(")")]
            rest = s[s.rindex(")") + 2 :].split()
            out[(pid, tid)] = (comm, int(rest[11]) + int(rest[12]))  # utime, stime
    return out


while True:
    time.sleep(max(0.0, period - window))
    a = snapshot()
    t0 = time.monotonic()
    time.sleep(window)
    b = snapshot()
    dt = time.monotonic() - t0
    with open("/proc/uptime") as f:
        up = f.read().split()[0]
    busy = []
    for k, (comm, ticks) in b.items():
        if k in a:
            busy.append(((ticks - a[k][1]) * 100.0 / hz / dt, k, comm))
    busy.sort(reverse=True)
    print("--- uptime %s s, %% of one CPU over %.1f s: " % (up, dt)
          + "  ".join("%s[%s] %.0f%%" % (comm, tid, pct) for pct, (pid, tid), comm in busy[:10] if pct >= 0.5),
          flush=True)
