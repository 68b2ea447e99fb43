#!/usr/bin/env bash
# tests/kernel/guest/tshark_cb.sh PCAP SERVER_IP TAG — dissect the capture
# of tests/kernel/guest/deleg.sh (two guests: rpcrdma-target recalling the
# read delegations of the client guest's NFSv4.2 mount over RDMA) with
# tshark and check that:
#   - no frame is malformed, none carries an expert-info error;
#   - the server sends backward-direction Calls inside RPC-over-RDMA
#     (RFC 8167): a CB_NULL probe and CB_COMPOUNDs carrying CB_RECALL, of
#     the callback program (RFC 8881 s20), and the client answers each
#     (a dissected reply with its XID);
#   - the client's DELEGRETURNs follow, and every forward Call of the
#     client has a dissected reply.
# Prints the time from each CB_RECALL to the client's next DELEGRETURN
# Call on the wire (p50, p99), beside the server's own recall-to-return
# figure (rpcrdma-target stats).
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
. "$G/lib.sh"
. "$G/tshark_lib.sh"

PCAP=$1
SIP=$2
TAG=$3
tshark_fields "$PCAP" "$TAG" frame.time_relative infiniband.bth.opcode rpcordma.msg_type rpc.msgtyp rpc.xid \
    rpc.program rpc.procedure nfs.cb.operation nfs.opcode || exit 1

python3 - "$FIELDS" "$SIP" "$TAG" "$CHECKS" "$G" <<'PY'
import math, sys

fields, sip, tag, checks = sys.argv[1:5]
sys.path.insert(0, sys.argv[5])
from tshark_common import Capture, Counter, Results, vals

CB_PROG = "1073741824"  # 0x40000000, the Linux client's callback program
OP_CB_RECALL, OP_DELEGRETURN = "4", "8"
cap = Capture(fields, 9)
cb_calls, cb_answered = {}, set()   # xid -> kind ("CB_NULL", "CB_RECALL", ...)
calls, answered = set(), set()      # the client's forward Calls
kinds = Counter()
recalls, returns = [], []           # frame times
outside_rdma = 0
for num, src, (t, bth, rmsg, msgtyp, xid, prog, proc, cbop, opc) in cap.rows():
    if not bth:
        continue  # not RoCE (ARP, ...)
    progs, procs = vals(prog), vals(proc)
    for i, (m, x) in enumerate(zip(vals(msgtyp), vals(xid))):
        pick = lambda l: l[min(i, len(l) - 1)] if l else ""
        if m == "0" and src == sip and pick(progs) == CB_PROG:
            # a backward-direction Call: the server calls the client
            kind = "CB_NULL" if pick(procs) == "0" else (
                "CB_COMPOUND(%s)" % "+".join(vals(cbop)) if vals(cbop) else "CB_COMPOUND")
            if OP_CB_RECALL in vals(cbop):
                kind = "CB_COMPOUND with CB_RECALL"
                recalls.append(float(t))
            if not rmsg:
                outside_rdma += 1
            cb_calls[x] = kind
            kinds[kind] += 1
        elif m == "1" and src != sip and x in cb_calls:
            cb_answered.add(x)
        elif m == "0" and src != sip:
            calls.add(x)
            if OP_DELEGRETURN in vals(opc):
                returns.append(float(t))
        elif m == "1" and src == sip:
            answered.add(x)

print("%s: %d frames; backward-direction Calls of the server: %s; the client's DELEGRETURN Calls: %d"
      % (tag, cap.frames, dict(kinds), len(returns)))
gaps = []
for r in recalls:
    nxt = [d for d in returns if d >= r]
    if nxt:
        gaps.append((min(nxt) - r) * 1e6)
gaps.sort()
if gaps:
    q = lambda p: gaps[max(0, math.ceil(p * len(gaps)) - 1)]  # nearest rank
    print("%s: CB_RECALL to DELEGRETURN on the wire: p50 %.0f us, p99 %.0f us, %d samples"
          % (tag, q(0.5), q(0.99), len(gaps)))

res = Results(tag, checks)
res.frames(cap)
res.check(kinds["CB_NULL"] > 0, "CB_NULL probes from the server inside RPC-over-RDMA (%d)" % kinds["CB_NULL"])
n = kinds["CB_COMPOUND with CB_RECALL"]
res.check(n > 0 and outside_rdma == 0,
          "CB_COMPOUND with CB_RECALL from the server inside RPC-over-RDMA (%d; %d without an RPC-over-RDMA header)"
          % (n, outside_rdma))
missing = sorted(set(cb_calls) - cb_answered)
res.check(not missing, "backward Calls without the client's dissected reply (%d of %d)%s"
          % (len(missing), len(cb_calls), (": xids " + " ".join(missing[:5])) if missing else ""))
res.check(len(returns) >= n > 0, "the client's DELEGRETURN Calls (%d) follow the recalls (%d)" % (len(returns), n))
res.answered(calls, answered)
res.write()
PY
[ $? = 0 ] || flunk "$TAG: the capture analysis ran"
