#!/usr/bin/env python3
"""tests/kernel/guest/perop_stacks.py DIR — where ours' system calls come
from, per fio op (nfs4_perop.sh with NFS4_PEROP_STRACE=stack): each
DIR/r1/<server>/v<vers>/strace/JOB.stack (strace -f -k) counted by system
call and by the first function of the target's own code on its stack
(frames of libc, std and core skipped; Rust symbols demangled), divided by
the fio ops of that run (JOB.json beside it)."""
import collections
import glob
import json
import os
import re
import sys

base = sys.argv[1]
SKIP = ("std::", "core::", "alloc::", "<std::", "<core::", "<alloc::", "__", "syscall", "clock_gettime",
        "libc", "???")


def demangle(sym):
    """Rust's legacy mangling (_ZN <len><ident>... 17h<hash> E), else as it is."""
    m = re.match(r"_ZN(.*)E$", sym)
    if not m:
        return sym
    s, parts = m.group(1), []
    while s:
        n = re.match(r"(\d+)", s)
        if not n:
            break
        k = int(n.group(1))
        s = s[len(n.group(1)):]
        parts.append(s[:k])
        s = s[k:]
    if parts and re.match(r"h[0-9a-f]{16}$", parts[-1]):
        parts.pop()
    out = "::".join(parts)
    for a, b in (("$LT$", "<"), ("$GT$", ">"), ("$u20$", " "), ("$RF$", "&"), ("..", "::"), ("$C$", ","),
                 ("$u7b$", "{"), ("$u7d$", "}"), ("$BP$", "*")):
        out = out.replace(a, b)
    return out


def ops(path):
    try:
        job = json.load(open(path))["jobs"][0]
        side = job["read"] if job["read"]["total_ios"] else job["write"]
        return side["total_ios"]
    except (OSError, ValueError, KeyError, IndexError):
        return 0


for f in sorted(glob.glob(os.path.join(base, "r1", "*", "v*", "strace", "*.stack"))):
    parts = f.split(os.sep)
    server, vers, job = parts[-4], parts[-3], os.path.basename(f)[:-len(".stack")]
    n = ops(f[:-len(".stack")] + ".json")
    if not n:
        continue
    counts, calls = collections.Counter(), collections.Counter()
    cur = None
    for line in open(f, errors="replace"):
        if line.startswith(" > "):
            if cur is None:
                continue
            m = re.search(r"\(([^)+]+)\+0x", line)
            if not m:
                continue
            name = demangle(m.group(1))
            if name.startswith(SKIP) or "rpcrdma-target(" not in line:
                continue
            counts[(cur, name)] += 1
            cur = None
            continue
        m = re.match(r"(?:\d+\s+)?([a-z_0-9]+)\(", line)
        cur = m.group(1) if m else None
        if cur:
            calls[cur] += 1
    print(f"\n{server} {vers} {job}: {n} fio ops; system calls per fio op, then by the target's function (>= 0.05 per op)")
    print("    " + ", ".join(f"{k} {v / n:.2f}" for k, v in calls.most_common()))
    for (sc, fn), c in counts.most_common():
        if c / n >= 0.05:
            print(f"    {c / n:6.2f}  {sc:16s} {fn[:150]}")
