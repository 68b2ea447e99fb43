#!/usr/bin/env python3
"""scripts/callgrind-per-call.py PROFILE NAME FUNCTION — instructions per call
of FUNCTION in a callgrind profile collected only inside it
(--toggle-collect=FUNCTION): the profile's total divided by the calls of
FUNCTION, read from the `calls=` line after each call to it (callgrind's
own format). Used by scripts/callgrind-engine.sh and callgrind-nfs.sh."""
import re
import sys

path, name, function = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(path).read().split("\n")
total, ids, calls = 0, set(), 0
for line in lines:
    m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
    if m and m.group(2) and m.group(2).strip() == function:
        ids.add(m.group(1))
    if line.startswith("summary:") or line.startswith("totals:"):
        total = int(line.split()[1])
for i, line in enumerate(lines[:-1]):
    m = re.match(r"cfn=\((\d+)\)", line)
    c = re.match(r"calls=(\d+)", lines[i + 1])
    if m and c and m.group(1) in ids:
        calls += int(c.group(1))
if calls:
    print("%s: %d instructions per Call (%d over %d Calls)" % (name, round(total / calls), total, calls))
else:
    print("%s: could not count the Calls" % name)
