#!/usr/bin/env bash
# tests/kernel/guest/tshark4.sh PCAP SERVER_IP TAG — dissect the two-guest
# capture of NFSv4.2 against rpcrdma-target (tests/kernel/nfs4.sh's pair run:
# a vers=4.2 mount over RDMA, then one over TCP) with tshark and check that:
#   - no frame is malformed, none carries an expert-info error;
#   - the server's NFSv4 COMPOUND replies are dissected, inside RPC-over-RDMA
#     (RoCEv2, UDP 4791) and over TCP 2049, and the client's COMPOUND calls
#     carry minor version 2;
#   - over RDMA the replies hold SEQUENCE, EXCHANGE_ID, CREATE_SESSION, OPEN,
#     READ, WRITE, READDIR and READLINK results;
#   - every RPC call of the client has a dissected reply with its XID.
# Prints the COMPOUND replies per operation and transport. Two passes (-2),
# as tests/kernel/guest/tshark.sh explains.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
. "$G/lib.sh"
. "$G/tshark_lib.sh"

PCAP=$1
SIP=$2
TAG=$3
tshark_fields "$PCAP" "$TAG" infiniband.bth.opcode tcp.srcport rpcordma.msg_type rpc.msgtyp rpc.xid rpc.program \
    rpc.programversion nfs.procedure_v4 nfs.minorversion nfs.opcode || exit 1

python3 - "$FIELDS" "$SIP" "$TAG" "$CHECKS" "$G" <<'PY'
import collections, sys

fields, sip, tag, checks = sys.argv[1:5]
sys.path.insert(0, sys.argv[5])
from tshark_common import Capture, Results, vals
# RFC 8881 s18 / RFC 7862 s15 operation numbers
OPS = {3: "ACCESS", 4: "CLOSE", 5: "COMMIT", 6: "CREATE", 9: "GETATTR", 10: "GETFH", 11: "LINK", 12: "LOCK",
       13: "LOCKT", 14: "LOCKU", 15: "LOOKUP", 16: "LOOKUPP", 18: "OPEN", 22: "PUTFH", 24: "PUTROOTFH",
       25: "READ", 26: "READDIR", 27: "READLINK", 28: "REMOVE", 29: "RENAME", 32: "SAVEFH", 33: "SECINFO",
       34: "SETATTR", 38: "WRITE", 42: "EXCHANGE_ID", 43: "CREATE_SESSION", 44: "DESTROY_SESSION",
       52: "SECINFO_NO_NAME", 53: "SEQUENCE", 57: "DESTROY_CLIENTID", 58: "RECLAIM_COMPLETE",
       59: "ALLOCATE", 67: "DEALLOCATE", 69: "SEEK", 60: "COPY"}

calls, answered = set(), set()
replies = collections.Counter()        # transport -> COMPOUND replies
minor_calls = collections.Counter()    # minor version of COMPOUND calls
ops = collections.Counter()            # (transport, op) in the server's frames
cap = Capture(fields, 10)
for num, src, (bth, tsport, rmsg, msgtyp, xid, prog, pvers, proc, minor, opc) in cap.rows():
    if bth:
        xport = "rdma"
    elif "2049" in vals(tsport) or src != sip:
        xport = "tcp"
    else:
        continue
    progs, vs, procs = vals(prog), vals(pvers), vals(proc)
    for i, (t, x) in enumerate(zip(vals(msgtyp), vals(xid))):
        pick = lambda l: l[min(i, len(l) - 1)] if l else ""
        nfs4 = pick(progs) == "100003" and pick(vs) == "4"
        if t == "0" and src != sip:
            calls.add(x)
            if nfs4 and pick(procs) == "1":
                for m in vals(minor):
                    minor_calls[m] += 1
        elif t == "1" and src == sip:
            answered.add(x)
            if nfs4 and pick(procs) == "1":
                replies[xport] += 1
    if src == sip:
        for o in vals(opc):
            ops[(xport, OPS.get(int(o), "op %s" % o))] += 1

print("%s: %d frames; NFSv4 COMPOUND replies: %s; COMPOUND calls by minor version: %s"
      % (tag, cap.frames, dict(replies), dict(minor_calls)))
print("operation results in the server's frames (transport, op, count):")
for (x, o), n in sorted(ops.items()):
    print("  %-5s %-18s %6d" % (x, o, n))

res = Results(tag, checks)
res.frames(cap)
res.check(replies["rdma"] > 0, "NFSv4 COMPOUND replies dissected inside RPC-over-RDMA (%d)" % replies["rdma"])
res.check(replies["tcp"] > 0, "NFSv4 COMPOUND replies dissected over TCP (%d)" % replies["tcp"])
res.check(minor_calls["2"] > 0 and set(minor_calls) == {"2"},
          "every COMPOUND call is minor version 2 (%s)" % dict(minor_calls))
for o in ("SEQUENCE", "EXCHANGE_ID", "CREATE_SESSION", "OPEN", "READ", "WRITE", "READDIR", "READLINK"):
    res.check(ops[("rdma", o)] > 0, "%s results dissected inside RPC-over-RDMA (%d)" % (o, ops[("rdma", o)]))
res.answered(calls, answered)
res.write()
PY
[ $? = 0 ] || flunk "$TAG: the capture analysis ran"
