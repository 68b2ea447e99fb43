#!/usr/bin/env python3
"""tests/kernel/guest/perop_trace.py DIR — where the time of one 4 KiB qd-1
READ goes, as the kernel client's trace events show it (nfs4_perop.sh with
NFS4_PEROP_TRACE=1: DIR/r1/<server>/v<vers>/trace.txt, the sunrpc and
rpcrdma events of a 2-second random-read job). Per RPC, in the client's
order, medians in microseconds:

- begin>send: rpc_task_begin to xprtrdma_post_send (the client encodes,
  registers the Write chunk, posts the Call);
- send>recv: post_send to the xprtrdma_wc_receive of the reply (the
  fabric both ways and the whole server);
- recv>end: that completion to rpc_task_end (reply decoding, invalidation,
  waking the task);
- end>next: rpc_task_end to the next rpc_task_begin (fio);
- cycle: one rpc_task_begin to the next.

Also per job: signaled Sends and local invalidations per RPC (a reply that
left an MR registered makes the client invalidate it before the RPC ends).
"""
import glob
import os
import re
import statistics
import sys

LINE = re.compile(r"\s*\S.*?-\d+\s+\[\d+\]\s+\S+\s+([\d.]+):\s+(\w+):\s*(.*)")
TASK = re.compile(r"task:(\w+)@")


def phases(path):
    tasks, order, last_recv, counts = {}, [], None, {}
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        t, name, args = float(m.group(1)) * 1e6, m.group(2), m.group(3)
        counts[name] = counts.get(name, 0) + 1
        if name == "xprtrdma_wc_receive":
            last_recv = t
            continue
        tm = TASK.search(args)
        if not tm:
            continue
        d = tasks.setdefault(tm.group(1), {})
        d.setdefault(name, t)
        if name == "xprtrdma_reply" and "recv" not in d:
            d["recv"] = last_recv
        if name == "rpc_task_begin":
            order.append(tm.group(1))
    rows = []
    for a, b in zip(order, order[1:]):
        d, n = tasks[a], tasks[b]
        keys = ("rpc_task_begin", "xprtrdma_post_send", "recv", "rpc_task_end")
        if any(d.get(k) is None for k in keys):
            continue
        rows.append((
            d["xprtrdma_post_send"] - d["rpc_task_begin"],
            d["recv"] - d["xprtrdma_post_send"],
            d["rpc_task_end"] - d["recv"],
            n["rpc_task_begin"] - d["rpc_task_end"],
            n["rpc_task_begin"] - d["rpc_task_begin"],
        ))
    return rows, counts


def main():
    paths = sorted(glob.glob(os.path.join(sys.argv[1], "r*", "*", "v*", "trace.txt")))
    if not paths:
        return
    print("\nkernel client trace of a 2-second 4 KiB qd-1 read job (medians, us; NFS4_PEROP_TRACE=1):")
    print("%-12s %-5s %6s %10s %9s %8s %9s %7s %9s %9s" % (
        "server", "vers", "RPCs", "begin>send", "send>recv", "recv>end", "end>next", "cycle", "signaled", "local inv"))
    for p in paths:
        parts = p.split(os.sep)
        server, vers = parts[-3], parts[-2][1:]
        rows, counts = phases(p)
        if not rows:
            print("%-12s %-5s no complete RPC in the trace" % (server, vers))
            continue
        med = [statistics.median(r[i] for r in rows) for i in range(5)]
        n = len(rows)
        signaled = counts.get("xprtrdma_wc_send", 0) / n
        linv = counts.get("xprtrdma_mr_localinv", 0) / n
        print("%-12s %-5s %6d %10.0f %9.0f %8.0f %9.0f %7.0f %9.2f %9.2f" % (server, vers, n, *med, signaled, linv))


main()
