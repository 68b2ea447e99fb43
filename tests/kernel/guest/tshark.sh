#!/usr/bin/env bash
# tests/kernel/guest/tshark.sh PCAP SERVER_IP TAG — dissect the two-guest
# capture with tshark and check that:
#   - the server's replies are dissected as RPC-over-RDMA (rpcordma) carrying
#     RPC replies, among them NFSv3 READ, WRITE, GETATTR and READDIRPLUS;
#   - every RPC call of the client has a dissected reply with its XID;
#   - no frame is malformed and none carries an expert-info error.
# Prints what the capture shows: InfiniBand opcodes per direction, the
# RPC-over-RDMA message types and NFS procedures of the server's replies.
# tshark runs once (it starts slowly under emulation), in two passes (-2):
# its single pass dissects a READ reply before joining the RDMA Write data
# that preceded it and then flags correct replies as malformed.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
. "$G/lib.sh"
. "$G/tshark_lib.sh"

PCAP=$1
SIP=$2
TAG=$3
tshark_fields "$PCAP" "$TAG" infiniband.bth.opcode rpcordma.msg_type rpc.msgtyp rpc.xid rpc.program \
    nfs.procedure_v3 || exit 1

python3 - "$FIELDS" "$SIP" "$TAG" "$CHECKS" "$G" <<'PY'
import collections, sys

fields, sip, tag, checks = sys.argv[1:5]
sys.path.insert(0, sys.argv[5])
from tshark_common import Capture, Results, vals
OPS = {4: "SEND_ONLY", 6: "RDMA_WRITE_FIRST", 7: "RDMA_WRITE_MIDDLE", 8: "RDMA_WRITE_LAST",
       10: "RDMA_WRITE_ONLY", 12: "RDMA_READ_REQUEST", 13: "RDMA_READ_RESPONSE_FIRST",
       14: "RDMA_READ_RESPONSE_MIDDLE", 15: "RDMA_READ_RESPONSE_LAST", 16: "RDMA_READ_RESPONSE_ONLY",
       17: "ACKNOWLEDGE", 23: "SEND_ONLY_WITH_INVALIDATE", 100: "UD_SEND_ONLY (CM)"}
PROCS = ["NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE", "CREATE", "MKDIR",
         "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK", "READDIR", "READDIRPLUS", "FSSTAT",
         "FSINFO", "PATHCONF", "COMMIT"]

opcodes = collections.Counter()
reply_kinds = collections.Counter()
procs = collections.Counter()
calls, answered = set(), set()
rpcrdma_from_server = 0
cap = Capture(fields, 6)
for num, src, (op, rmsg, msgtyp, xid, prog, proc) in cap.rows():
    for o in vals(op):
        opcodes[(src, int(o))] += 1
    if not op:
        continue  # not RoCE (MOUNT and rpcbind over TCP, ARP, ...)
    if rmsg and src == sip:
        rpcrdma_from_server += 1
    for i, (t, x) in enumerate(zip(vals(msgtyp), vals(xid))):
        if t == "0":
            calls.add(x)
        elif t == "1" and src == sip:
            answered.add(x)
            if not rmsg:
                continue  # a reply put together from RDMA Writes; counted in its header's frame
            kind = {"0": "RDMA_MSG", "1": "RDMA_NOMSG"}.get(vals(rmsg)[0], "type " + vals(rmsg)[0])
            progs, ps = vals(prog), vals(proc)
            if progs and progs[min(i, len(progs) - 1)] == "100003" and ps:
                name = PROCS[int(ps[min(i, len(ps) - 1)])] if int(ps[min(i, len(ps) - 1)]) < len(PROCS) else "?"
            else:
                name = "program " + (progs[0] if progs else "?")
            reply_kinds[(kind, name)] += 1
            if name in PROCS:
                procs[name] += 1

print("%s: %d frames; InfiniBand opcodes per sender:" % (tag, cap.frames))
for (src, o), n in sorted(opcodes.items(), key=lambda kv: (kv[0][0], -kv[1])):
    print("  %-12s %-28s %7d" % (src, OPS.get(o, "opcode %d" % o), n))
print("RPC replies from %s inside RPC-over-RDMA (header type, procedure, replies):" % sip)
for (kind, name), n in sorted(reply_kinds.items()):
    print("  %-10s %-14s %6d" % (kind, name, n))

res = Results(tag, checks)
res.check(rpcrdma_from_server > 0 and len(answered) > 0,
          "the server's frames are dissected as RPC-over-RDMA carrying RPC replies (%d frames, %d replies)"
          % (rpcrdma_from_server, len(answered)))
for p in ("READ", "WRITE", "GETATTR", "READDIRPLUS"):
    res.check(procs[p] > 0, "NFSv3 %s replies dissected inside RPC-over-RDMA (%d)" % (p, procs[p]))
res.answered(calls, answered)
res.frames(cap)
res.write()
PY
[ $? = 0 ] || flunk "$TAG: the capture analysis ran"
