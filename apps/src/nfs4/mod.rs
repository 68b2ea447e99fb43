//! The NFSv4.1 / 4.2 service (RFC 8881, RFC 7862): COMPOUND on program
//! 100003 version 4, beside NFSv3 on the same listeners (RDMA and TCP).
//!
//! [`call`] runs one COMPOUND: the arguments are decoded one operation at
//! a time by [`proto::nfs4::args`] (bounded views of the Call's bytes, the
//! WRITE data taken in place from the Read chunk), each operation runs
//! against the current and saved filehandles and its result is encoded
//! straight into the engine's reply head; the walk stops at the first
//! operation that fails (RFC 8881 s15.2). Nothing is allocated per Call
//! except by OPEN (an open owner's bytes) and the session operations.
//!
//! # Sessions (RFC 8881 s2.10)
//!
//! Every COMPOUND starts with SEQUENCE, except one whose only operation is
//! EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, BIND_CONN_TO_SESSION or
//! DESTROY_CLIENTID (NFS4ERR_OP_NOT_IN_SESSION otherwise; such an operation
//! first in a longer COMPOUND is NFS4ERR_NOT_ONLY_OP; SEQUENCE later than
//! first is NFS4ERR_SEQUENCE_POS). A retried SEQUENCE (same slot, same
//! sequence id) is answered from the slot's reply cache ([`state`]) without
//! running anything again.
//!
//! # The NFSv4 ULB (RFC 8267 s6)
//!
//! READ data and the READLINK link text are the DDP-eligible results: a
//! READ that ends the COMPOUND reads straight into the engine's data buffer
//! ([`Service::reply_data_hint`](dataplane::service::Service) is its count),
//! which the engine writes into the client's Write chunk; a READ elsewhere
//! and READLINK encode their data in the head and mark it as a DDP item.
//! Everything else goes inline or in the Reply chunk, as the engine plans.
//!
//! # I/O that completes later
//!
//! On `uring` and `nvme`, READ (into the engine's data buffer), WRITE and
//! COMMIT submit their I/O and defer the reply, as NFSv3's do; the COMPOUND
//! is suspended at that operation and resumed when the I/O completes
//! ([`suspend`]), so the core never waits for a backend. A READ that does
//! not end the COMPOUND reads into the reply head, deferred the same way.
//! Where metadata calls block (`uring`), a COMPOUND that changes the
//! namespace runs whole on the helper pool, or, when it does data I/O
//! too, suspends at each such operation while a helper runs it
//! ([`pooled`]).
//!
//! # Locks, grace, NFSv4.2
//!
//! Byte-range locks are in [`lock`], the stable client records and the
//! grace period after a restart in [`grace`], ALLOCATE, DEALLOCATE, SEEK
//! and COPY in `v42`.
//!
//! # Callbacks
//!
//! Sessions' backchannels and the callbacks they carry are in
//! [`callback`], read delegations in [`deleg`], blocking-lock
//! notifications in [`lock`].
//!
//! # Not yet
//!
//! Write and directory delegations, pNFS, NFSv4.2's CLONE, READ_PLUS and
//! extended attributes, and RELEASE_LOCKOWNER (NFSv4.0's) are
//! NFS4ERR_NOTSUPP. See docs/NFSV4.md.

use std::cell::Cell;
use std::net::IpAddr;

use dataplane::service::{CallView, DeferToken, ReplyBuilder, ServiceError};
use proto::error::EncodeError;
use proto::nfs4::args::{CompoundArgs, CompoundError, Op, OpDecoder, OpError};
use proto::nfs4::*;
use proto::rpc::{self, AcceptedReply, OpaqueAuth, ReplyHeader};
use proto::xdr::{Reader, Writer};

use crate::backend::{creds, FsError};
use crate::nfs::auth::{Caller, Cred};
use crate::nfs::{CoreState, NfsShared, MAX_ASSEMBLED_CALL_BYTES, REPLY_HEADER_BYTES};

pub mod attr;
pub mod callback;
pub mod deleg;
pub mod deleg_stats;
pub mod fh;
pub mod grace;
pub mod lock;
mod ops;
pub(crate) mod pooled;
pub mod state;
pub(crate) mod suspend;
pub mod v42;

use fh::Fh;

/// Per-core NFSv4 counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nfs4Stats {
    /// COMPOUNDs answered (replays included).
    pub compounds: u64,
    /// Operations run, by number (index [`OP_LAST`] + 1 counts OP_ILLEGAL).
    pub ops: [u64; OP_LAST as usize + 2],
    /// COMPOUNDs answered from a slot's reply cache.
    pub replays: u64,
}

impl Default for Nfs4Stats {
    fn default() -> Self {
        Nfs4Stats {
            compounds: 0,
            ops: [0; OP_LAST as usize + 2],
            replays: 0,
        }
    }
}

/// The status of a backend error (the NFSv3 numbers are NFSv4's too for
/// every error a backend reports).
pub(crate) fn fs_status(e: FsError) -> u32 {
    e.nfsstat3()
}

/// What an operation's body fails with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct St(pub u32);

impl From<EncodeError> for St {
    fn from(_: EncodeError) -> Self {
        St(NFS4ERR_REP_TOO_BIG)
    }
}

impl From<FsError> for St {
    fn from(e: FsError) -> Self {
        St(fs_status(e))
    }
}

impl From<u32> for St {
    fn from(s: u32) -> Self {
        St(s)
    }
}

/// The COMPOUND's context: filehandles, stateids, the session.
#[derive(Debug)]
pub(crate) struct Ctx<'c> {
    pub sh: &'c NfsShared,
    pub cred: Cred<'c>,
    pub peer: Option<IpAddr>,
    pub cur: Option<Fh>,
    pub saved: Option<Fh>,
    pub cur_sid: Option<Stateid>,
    pub saved_sid: Option<Stateid>,
    /// The session, the slot and the client, once SEQUENCE ran.
    pub session: Option<(SessionId, u32, u64)>,
    /// Operations left after this one (READ's data buffer is for the last).
    pub last: bool,
    /// Bytes of result an operation that failed wrote after its status
    /// (LOCK4denied of LOCK and LOCKT).
    pub err_body: usize,
    /// The engine lets this Call's reply be deferred under this token (an
    /// I/O operation then suspends the COMPOUND, see [`suspend`]).
    pub token: Option<DeferToken>,
    /// The connection the Call came on (a backchannel binds to it).
    pub conn: Option<callback::ConnKey>,
    /// The COMPOUND's minor version (CREATE_SESSION gives it to the session).
    pub minor: u32,
    /// The export whose rules [`ops`]' `real_of` last applied to this
    /// COMPOUND's caller, and who the caller is there: the backend acts as
    /// that caller now (`creds::set_current`). The caller's credentials and
    /// address are the COMPOUND's, so a later operation on an object of the
    /// same export needs neither the check nor the switch again.
    pub acting: Cell<Option<(usize, Caller)>>,
}

/// Operations that may come without SEQUENCE when they are alone (RFC 8881
/// s18.35.3 and the other session operations).
fn sessionless(op: u32) -> bool {
    matches!(
        op,
        OP_EXCHANGE_ID | OP_CREATE_SESSION | OP_DESTROY_SESSION | OP_BIND_CONN_TO_SESSION | OP_DESTROY_CLIENTID
    )
}

/// Most pieces a Call comes in: the inline head, then a Read chunk and the
/// inline bytes after it for each chunk.
const MAX_PIECES: usize = 1 + 2 * proto::plan::PLAN_READ_CHUNKS;

/// The pieces of the Call's arguments: contiguous (the Call in one piece,
/// or small enough to assemble into `scratch`), or the inline head and,
/// in `rest`, each Read chunk holding WRITE data with the inline bytes
/// after it. Returns the arguments in the head and how many of `rest` were
/// filled; `None` when the Call has more pieces than a Call can have.
fn pieces<'a>(
    call: &CallView<'a>,
    at: usize,
    scratch: &'a mut Vec<u8>,
    rest: &mut [&'a [u8]; MAX_PIECES],
) -> Option<(&'a [u8], usize)> {
    let mut s = call.slices();
    let first = s.next().unwrap_or(&[]);
    let mut n = 0;
    for p in s {
        *rest.get_mut(n)? = p;
        n += 1;
    }
    if n == 0 {
        return Some((first.get(at..)?, 0));
    }
    let len = call.len();
    if len <= MAX_ASSEMBLED_CALL_BYTES {
        scratch.resize(len, 0);
        call.copy_to(scratch);
        return Some((scratch.get(at..len)?, 0));
    }
    Some((first.get(at..)?, n))
}

/// The bytes of one operation: `before` it, less what is left `after` it,
/// when both are of one piece (not a WRITE whose data was a Read chunk).
fn op_bytes<'a>(before: &'a [u8], after: &[u8]) -> Option<&'a [u8]> {
    let n = before.len().checked_sub(after.len())?;
    (before[n..].as_ptr() == after.as_ptr()).then(|| &before[..n])
}

/// The `count` of a COMPOUND whose last operation is READ, for the data
/// buffer the engine attaches before the Call runs.
pub(crate) fn read_hint(head: &[u8]) -> Option<u32> {
    // The version word first, so other Calls pay one comparison.
    if head.get(16..20)? != NFS_V4.to_be_bytes() {
        return None;
    }
    let (h, at) = rpc::CallHeader::decode(head).ok()?;
    if (h.prog, h.vers, h.proc_) != (proto::nfs3::NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND) {
        return None;
    }
    args::final_read_count(head.get(at..)?)
}

use proto::nfs4::args;

fn reply_rpc(reply: &mut ReplyBuilder<'_>, hdr: &ReplyHeader<'_>) -> Result<(), ServiceError> {
    let mut w = Writer::new(reply.head_mut());
    rpc::encode_reply_header(&mut w, hdr).map_err(|_| ServiceError::Reject)?;
    let n = w.len();
    reply.set_head_len(n);
    Ok(())
}

/// The top of a COMPOUND4res at `base` (RFC 8881 s16.2.3: status, the
/// Call's tag echoed, numres 0, patched later): its length, or `None` when
/// the reply's head has no room for it.
fn compound_top(reply: &mut ReplyBuilder<'_>, base: usize, status: u32, tag: &[u8]) -> Option<usize> {
    let mut w = Writer::new(reply.head_mut().get_mut(base..)?);
    w.put_u32(status)
        .and_then(|()| w.put_opaque_var(tag))
        .and_then(|()| w.put_u32(0))
        .ok()?;
    Some(w.len())
}

/// A COMPOUND whose echoed tag (at most [`MAX_TAG_BYTES`]) does not fit the
/// reply's head: answered SYSTEM_ERR (RFC 5531 s9), which always fits, so
/// the Call is never left unanswered. Not reached on a fabric, whose send
/// buffers (RFC 8166 s3.3.3: at least 1,024 bytes) hold any tag.
fn top_too_big(st: &mut CoreState, reply: &mut ReplyBuilder<'_>, xid: u32) -> Result<(), ServiceError> {
    st.stats.rpc_errors += 1;
    reply_rpc(
        reply,
        &ReplyHeader::accepted(xid, OpaqueAuth::NONE, AcceptedReply::SystemErr),
    )
}

/// Answer COMPOUND (`at`: where the arguments start in the Call's first
/// piece). Writes the whole RPC reply.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call(
    sh: &std::sync::Arc<NfsShared>,
    st: &mut CoreState,
    scratch: &mut Vec<u8>,
    view: &CallView<'_>,
    xid: u32,
    at: usize,
    cred: Cred<'_>,
    reply: &mut ReplyBuilder<'_>,
) -> Result<(), ServiceError> {
    // Whoever an operation names as the caller (`ops::real_of`) stops acting
    // when the COMPOUND ends.
    let _acting = creds::Scope::enter();
    let mut rest: [&[u8]; MAX_PIECES] = [&[]; MAX_PIECES];
    let Some((args, n_rest)) = pieces(view, at, scratch, &mut rest) else {
        st.stats.rpc_errors += 1;
        st.stats.garbage_args += 1;
        return reply_rpc(
            reply,
            &ReplyHeader::accepted(xid, OpaqueAuth::NONE, AcceptedReply::GarbageArgs),
        );
    };
    let base = match rpc::encode_success_reply_none(xid, reply.head_mut()) {
        Some(REPLY_HEADER_BYTES) => REPLY_HEADER_BYTES,
        _ => return Err(ServiceError::Reject),
    };
    // A COMPOUND resumed after its I/O operation's completion: where it
    // stopped ([`suspend`]).
    let stop = st.v4_suspended.take(view.defer_token());
    if stop.is_none() {
        st.v4.compounds += 1;
    }
    let mut r = Reader::new(args);
    let ca = match CompoundArgs::decode(&mut r) {
        Ok(c) => c,
        Err(CompoundError::Garbage) => {
            st.stats.rpc_errors += 1;
            st.stats.garbage_args += 1;
            return reply_rpc(
                reply,
                &ReplyHeader::accepted(xid, OpaqueAuth::NONE, AcceptedReply::GarbageArgs),
            );
        }
        Err(CompoundError::Status { status, tag }) => {
            if let Some(s) = stop {
                st.v4_suspended.cancel(&sh.v4, s.token);
            }
            let Some(n) = compound_top(reply, base, status, tag) else {
                return top_too_big(st, reply, xid);
            };
            reply.set_head_len(base + n);
            return Ok(());
        }
    };
    let cap = reply.head_mut().len();
    // status, tag, numres: the status and count patched at the end.
    let Some(top) = compound_top(reply, base, NFS4_OK, ca.tag) else {
        if let Some(s) = stop {
            st.v4_suspended.cancel(&sh.v4, s.token);
        }
        return top_too_big(st, reply, xid);
    };
    let mut pos = base + top;
    let numres_at = pos - 4;
    let mut limit = cap;
    let mut d = OpDecoder::with_pieces(r, ca.numops, &rest[..n_rest]);
    let mut cx = Ctx {
        sh,
        cred,
        peer: view.peer,
        cur: None,
        saved: None,
        cur_sid: None,
        saved_sid: None,
        session: None,
        last: false,
        err_body: 0,
        token: view.defer_token(),
        conn: Some((st.core, view.conn)),
        minor: ca.minorversion,
        acting: Cell::new(None),
    };
    let mut status = NFS4_OK;
    let mut numres = 0u32;
    let mut index = 0u32;
    let mut cachethis = false;
    let mut max_ops = MAX_OPS;
    if let Some(s) = stop {
        // Put back what ran before the I/O operation, without running it
        // again: its results, the filehandles, the session.
        let end = base + s.kept.len();
        if end > limit || s.numres_at + 4 > s.kept.len() {
            st.v4_suspended.cancel(&sh.v4, s.token);
            return Err(ServiceError::Reject);
        }
        reply.head_mut()[base..end].copy_from_slice(&s.kept);
        for _ in 0..s.done_ops {
            let _ = d.next_op();
        }
        pos = end;
        numres = s.numres;
        index = s.done_ops;
        limit = s.limit;
        max_ops = s.max_ops;
        cachethis = s.cachethis;
        cx.cur = s.cur;
        cx.saved = s.saved;
        cx.cur_sid = s.cur_sid;
        cx.saved_sid = s.saved_sid;
        cx.session = s.session;
        debug_assert_eq!(base + s.numres_at, numres_at);
        st.v4_suspended.recycle(s);
    }
    loop {
        // The operation's bytes lie between this and what is left after it
        // (for an operation the helper pool runs, [`pooled`]).
        let before = d.rest();
        let Some(next) = d.next_op() else {
            break;
        };
        let first = index == 0;
        index += 1;
        cx.last = d.left() == 0;
        if pos + 8 > limit {
            status = NFS4ERR_REP_TOO_BIG;
            break;
        }
        let next = match next {
            // RFC 8178 s8: an operation a later minor version added is not
            // one of minor version 1's.
            Ok(op) if ca.minorversion < 2 && op.opnum() >= OP_ALLOCATE => Err(OpError {
                op: OP_ILLEGAL,
                status: NFS4ERR_OP_ILLEGAL,
            }),
            n => n,
        };
        let (opnum, res) = match next {
            Err(OpError { op, status }) => (op, Err(St(status))),
            Ok(op) => {
                let opnum = op.opnum();
                let res = if let Op::Sequence {
                    sessionid,
                    sequenceid,
                    slotid,
                    highest_slotid,
                    cachethis: c,
                } = op
                {
                    if !first {
                        Err(St(NFS4ERR_SEQUENCE_POS))
                    } else {
                        let head = reply.head_mut();
                        match sh.v4.sequence(&sessionid, sequenceid, slotid, c, &mut head[base..]) {
                            Ok(state::SeqOutcome::Replay(n)) => {
                                st.v4.replays += 1;
                                reply.set_head_len(base + n);
                                return Ok(());
                            }
                            Ok(state::SeqOutcome::New {
                                client,
                                slots,
                                cachethis: c,
                                status: flags,
                            }) => {
                                cx.session = Some((sessionid, slotid, client));
                                cachethis = c;
                                if let Some(f) = sh.v4.fore_channel(&sessionid) {
                                    // The session's response size bounds
                                    // the reply (the head's room always does).
                                    limit = limit.min(f.maxresponsesize as usize).max(pos + 8);
                                    max_ops = f.maxoperations;
                                }
                                let mut w = Writer::new(&mut reply.head_mut()[pos + 8..limit]);
                                ops::sequence_res(&mut w, &sessionid, sequenceid, slotid, highest_slotid, slots, flags)
                                    .map(|()| w.len())
                                    .map_err(St::from)
                            }
                            Err(s) => Err(St(s)),
                        }
                    }
                } else if cx.session.is_none() && !(first && sessionless(opnum)) {
                    Err(St(NFS4ERR_OP_NOT_IN_SESSION))
                } else if first && sessionless(opnum) && ca.numops > 1 {
                    Err(St(NFS4ERR_NOT_ONLY_OP))
                } else if index > max_ops {
                    // RFC 8881 s2.10.6.4: past the session's
                    // ca_maxoperations, after SEQUENCE ran.
                    Err(St(NFS4ERR_TOO_MANY_OPS))
                } else {
                    // May suspend at an I/O operation only when what ran
                    // before it can be kept.
                    if pos - base > suspend::MAX_KEPT_BYTES {
                        cx.token = None;
                    }
                    let res = if let Some(done) = st.offload.resumed_op4_for(cx.token) {
                        // The helper pool ran it (below): its result.
                        pooled::apply(done, &mut cx, reply, pos + 8, limit)
                    } else if let Some(op_bytes) = cx
                        .token
                        .filter(|_| st.deferred.has_room() && pooled::wanted(sh, &cx, &op))
                        .and_then(|_| op_bytes(before, d.rest()))
                    {
                        // Its backend calls may block: on the pool, the
                        // COMPOUND suspended meanwhile.
                        let token = cx.token.ok_or(ServiceError::Reject)?;
                        let hdr = view.head().get(..at).unwrap_or(&[]);
                        let state = pooled::OpState::of(&cx);
                        st.offload
                            .submit_op4(sh, token, hdr, op_bytes, cx.peer, limit - (pos + 8), state);
                        st.deferred.submit_to_pool(token, reply);
                        st.stats.offloaded += 1;
                        Ok(0)
                    } else {
                        ops::run(&mut cx, st, op, reply, pos + 8, limit)
                    };
                    if reply.is_deferred() {
                        // Suspended: its I/O completes later.
                        let token = cx.token.ok_or(ServiceError::Reject)?;
                        let mut kept = st.v4_suspended.buffer();
                        kept.extend_from_slice(&reply.head_mut()[base..pos]);
                        st.v4_suspended.keep(suspend::Stop {
                            token,
                            done_ops: index - 1,
                            kept,
                            numres_at: numres_at - base,
                            numres,
                            limit,
                            max_ops,
                            cachethis,
                            cur: cx.cur,
                            saved: cx.saved,
                            cur_sid: cx.cur_sid,
                            saved_sid: cx.saved_sid,
                            session: cx.session,
                        });
                        return Ok(());
                    }
                    res
                };
                (opnum, res)
            }
        };
        let slot = if opnum == OP_ILLEGAL {
            OP_LAST as usize + 1
        } else {
            opnum as usize
        };
        if let Some(c) = st.v4.ops.get_mut(slot) {
            *c += 1;
        }
        numres += 1;
        let head = reply.head_mut();
        let (s, body) = match res {
            Ok(n) => (NFS4_OK, n),
            Err(St(s)) => {
                // SETATTR's failure arm still carries `attrsset` (empty).
                let extra = if opnum == OP_SETATTR && pos + 12 <= limit {
                    head[pos + 8..pos + 12].copy_from_slice(&0u32.to_be_bytes());
                    4
                } else {
                    std::mem::take(&mut cx.err_body)
                };
                (s, extra)
            }
        };
        head[pos..pos + 4].copy_from_slice(&opnum.to_be_bytes());
        head[pos + 4..pos + 8].copy_from_slice(&s.to_be_bytes());
        pos += 8 + body;
        status = s;
        if s != NFS4_OK {
            break;
        }
    }
    {
        let head = reply.head_mut();
        head[base..base + 4].copy_from_slice(&status.to_be_bytes());
        head[numres_at..numres_at + 4].copy_from_slice(&numres.to_be_bytes());
    }
    reply.set_head_len(pos);
    if let Some((sid, slot, _)) = cx.session {
        // The reply is kept for a retry when the client asked and it is all
        // in the head (a READ's data buffer is not kept).
        let keep = cachethis && !reply.finish().has_data;
        let head = reply.head_mut();
        sh.v4.sequence_done(&sid, slot, keep.then(|| &head[base..pos]));
    }
    Ok(())
}
