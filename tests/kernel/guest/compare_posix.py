#!/usr/bin/env python3
"""tests/kernel/guest/compare_posix.py OUT — the POSIX cases of posix.sh on
both servers side by side (issue 21: no check the kernel's server passes may
fail on ours). Appends to OUT/checks.txt one check per case the kernel's
server passes ("ours: posix: NAME" ok when ours passes it too), notes the
cases the kernel's server fails, and prints the counts."""
import os
import sys

out = sys.argv[1]


def load(tag):
    res = {}
    try:
        for line in open(os.path.join(out, tag, "posix.txt")):
            line = line.rstrip("\n")
            if line.startswith("PASS "):
                res[line[5:]] = (True, "")
            elif line.startswith("FAIL "):
                name, _, why = line[5:].partition(": got ")
                res[name] = (False, "got " + why)
    except FileNotFoundError:
        pass
    return res


kernel, ours = load("kernel"), load("ours")
lines = []
if not kernel or not ours:
    lines.append("not ok - posix: both servers ran the cases (kernel %d, ours %d)" % (len(kernel), len(ours)))
else:
    for name, (k_ok, k_why) in kernel.items():
        o_ok, o_why = ours.get(name, (False, "not run"))
        if k_ok:
            lines.append(("ok - ours: posix: %s" % name) if o_ok else ("not ok - ours: posix: %s (%s)" % (name, o_why)))
        else:
            print("note: the kernel's server fails posix case '%s' (%s); ours: %s"
                  % (name, k_why, "pass" if o_ok else o_why))
    k_pass = sum(1 for v in kernel.values() if v[0])
    o_pass = sum(1 for v in ours.values() if v[0])
    both = sum(1 for n, v in kernel.items() if v[0] and ours.get(n, (False,))[0])
    print("posix cases: kernel %d/%d pass, ours %d/%d pass; of the kernel's passes ours passes %d"
          % (k_pass, len(kernel), o_pass, len(ours), both))
    lines.append(("ok - posix: ours passes every case the kernel's server passes (%d of %d)" % (both, k_pass))
                 if both == k_pass else
                 ("not ok - posix: ours passes every case the kernel's server passes (%d of %d)" % (both, k_pass)))
with open(os.path.join(out, "checks.txt"), "a") as f:
    for line in lines:
        print(line)
        f.write(line + "\n")
