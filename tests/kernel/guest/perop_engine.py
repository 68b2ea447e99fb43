#!/usr/bin/env python3
"""tests/kernel/guest/perop_engine.py DIR — what ours did per fio op in the
perop step (nfs4_perop.sh): from ours' live statistics taken before and
after each job (JOB.stats.before / .after, `rpcrdma-target stats --json`),
per fio op: the engine's Calls, RDMA Writes, Writes placed, inline / Write
chunk / long replies, deferred Calls, the NFS service's offloaded and
deferred READs; the p50 of the service time and of the reply-posted time
(poll to Send posted) of the job's procedure row (READ or WRITE for v3,
NFS4.COMPOUND for v4.2; sampled, one Call in 8). With NFS4_PEROP_RESTART=1,
also the io cores' totals at exit per version (DIR/r<N>/<server>/v<vers>/
target.log: loops, sleeps, spin_caught, wait_short, wait_long per Call)."""
import glob
import json
import os
import re
import sys

base = sys.argv[1]
ENGINE = ("calls", "rdma_writes", "writes_placed", "replies_inline", "replies_write_chunks", "replies_long", "deferred")
NFS = ("offloaded", "deferred_reads", "deferred_writes")


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def high_ns(i):
    b, sub = i // 4, i % 4
    if b < 2:
        return (1 << (b + 1)) - 1
    step = 1 << (b - 2)
    return (1 << b) + (sub + 1) * step - 1


def p50_us(before, after):
    """p50 (us) of the difference of two bucket lists [[high_ns, count], ...]."""
    b = {h: c for h, c in before}
    diff = sorted((h, c - b.get(h, 0)) for h, c in after)
    n = sum(c for _, c in diff)
    if n <= 0:
        return None, 0
    acc = 0
    for h, c in diff:
        acc += c
        if acc * 2 >= n:
            return h / 1000.0, n
    return None, n


def proc(doc, name):
    for p in doc["total"].get("procs", []):
        if p["name"] == name:
            return p
    return {"latency_buckets": [], "reply_posted_buckets": []}


def fio_ops(path):
    try:
        job = json.load(open(path))["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    side = job["read"] if job["read"]["total_ios"] else job["write"]
    return side["total_ios"], side["iops"]


rows = []
for d in sorted(glob.glob(os.path.join(base, "r*", "*", "v*"))):
    r, server, vers = d.split(os.sep)[-3:]
    if server == "kernel":
        continue
    for job in ("rand-read-4k-qd1", "rand-write-4k-qd1"):
        b, a = load(f"{d}/{job}.stats.before"), load(f"{d}/{job}.stats.after")
        f = fio_ops(f"{d}/{job}.json")
        if not (a and b and f) or not f[0]:
            continue
        ops, iops = f
        e = {k: (a["total"]["engine"][k] - b["total"]["engine"][k]) / ops for k in ENGINE}
        n = {k: (a["total"]["nfs"][k] - b["total"]["nfs"][k]) / ops for k in NFS}
        row = "NFS4.COMPOUND" if vers == "v4.2" else ("READ" if "read" in job else "WRITE")
        pa, pb = proc(a, row), proc(b, row)
        svc, ns = p50_us(pb["latency_buckets"], pa["latency_buckets"])
        posted, _ = p50_us(pb["reply_posted_buckets"], pa["reply_posted_buckets"])
        rows.append((r, server, vers, job, iops, e, n, svc, posted, ns))

if rows:
    print("\nours per fio op (live statistics around each job; service and reply-posted p50 sampled 1 in 8):")
    print("| round | server | vers | job | IOPS | " + " | ".join(ENGINE) + " | " + " | ".join(NFS)
          + " | service p50 us | reply posted p50 us | samples |")
    print("|" + "---|" * (9 + len(ENGINE) + len(NFS)))
    for r, s, v, j, iops, e, n, svc, posted, ns in rows:
        print(f"| {r} | {s} | {v} | {j} | {iops:.0f} | " + " | ".join(f"{e[k]:.2f}" for k in ENGINE) + " | "
              + " | ".join(f"{n[k]:.2f}" for k in NFS) + f" | {svc} | {posted} | {ns} |")

KEYS = ("loops", "sleeps", "spin_caught", "wait_short", "wait_long")
lines = []
for d in sorted(glob.glob(os.path.join(base, "r*", "*", "v*"))):
    log = os.path.join(d, "target.log")
    if not os.path.exists(log):
        continue
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(log, errors="replace").read())
    calls = sum(int(m) for m in re.findall(r"engine totals.*?\bcalls=(\d+)", text)) or \
        sum(int(m) for m in re.findall(r"\bcalls=(\d+).*engine totals", text))
    for line in text.splitlines():
        if "core totals" not in line:
            continue
        kv = dict(re.findall(r'(\w+)="?([0-9.]+)', line))
        if int(kv.get("loops", 0)) == 0 or not calls:
            continue
        r, server, vers = d.split(os.sep)[-3:]
        lines.append(f"| {r} | {server} | {vers} | {kv.get('core')} | {calls} | {kv.get('busy_pct')} | "
                     + " | ".join(f"{int(kv.get(k, 0)) / calls:.2f}" for k in KEYS) + " |")
if lines:
    print("\nours' cores at exit, per Call (one target per version; layout, both jobs):")
    print("| round | server | vers | core | calls | busy % | " + " | ".join(KEYS) + " |")
    print("|" + "---|" * (6 + len(KEYS)))
    print("\n".join(lines))
