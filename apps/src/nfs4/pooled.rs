//! One operation of a COMPOUND run on the helper pool ([`crate::nfs::offload`]).
//!
//! A COMPOUND that changes the namespace or attributes and does no data
//! I/O runs whole on the pool. One that also does data I/O (READ, WRITE,
//! COMMIT: their I/O goes through the core's channel, deferred) runs on the
//! core, and each operation whose backend calls may block ([`wanted`]:
//! CREATE, REMOVE, RENAME, LINK, SETATTR, OPEN that may create, NFSv4.2's
//! ALLOCATE, DEALLOCATE, COPY, SEEK, on a backend whose metadata calls
//! block) suspends the COMPOUND as an I/O operation does
//! ([`super::suspend`]): the operation's arguments, the Call's RPC header
//! (for its credential) and the COMPOUND's filehandles, stateids and
//! session ([`OpState`]) go to a helper, which runs that one operation
//! ([`run_on_helper`]) with no defer token; when it is done the engine
//! resumes the Call, which puts back the results so far and takes the
//! operation's result and the state it left ([`apply`]) instead of running
//! it, then goes on with the operations after it. Bounded as every
//! suspension is (one entry per deferred Call, at most
//! [`super::suspend::MAX_KEPT_BYTES`] of results before the operation);
//! the result a helper builds is at most the room left in the reply head.

use dataplane::service::ReplyBuilder;
use proto::nfs4::args::{Op, OpDecoder};
use proto::nfs4::{SessionId, Stateid, NFS4ERR_SERVERFAULT};
use proto::xdr::Reader;

use super::fh::Fh;
use super::{ops, Ctx, St};
use crate::nfs::auth::Cred;
use crate::nfs::{CoreState, NfsShared};

/// What an operation sees of its COMPOUND besides its arguments, and what
/// it leaves for the operations after it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpState {
    pub cur: Option<Fh>,
    pub saved: Option<Fh>,
    pub cur_sid: Option<Stateid>,
    pub saved_sid: Option<Stateid>,
    pub session: Option<(SessionId, u32, u64)>,
    pub last: bool,
}

impl OpState {
    pub fn of(cx: &Ctx<'_>) -> OpState {
        OpState {
            cur: cx.cur,
            saved: cx.saved,
            cur_sid: cx.cur_sid,
            saved_sid: cx.saved_sid,
            session: cx.session,
            last: cx.last,
        }
    }
}

/// An operation a helper ran: its status, the result body it wrote after
/// the status (on failure, what LOCK-style errors carry), the DDP-eligible
/// items in that body (offset from the body's start, length) and the
/// state it left.
#[derive(Debug)]
pub(crate) struct OpDone {
    pub status: u32,
    pub body: Vec<u8>,
    pub items: Vec<(usize, usize)>,
    pub state: OpState,
}

/// Whether operation `op` of a COMPOUND with a defer token runs on the
/// helper pool: it changes the namespace or attributes, or is an NFSv4.2
/// system call, and the current filehandle (where the change happens)
/// lies on a backend whose metadata calls block.
pub(crate) fn wanted(sh: &NfsShared, cx: &Ctx<'_>, op: &Op<'_>) -> bool {
    let changes = matches!(
        op,
        Op::Create { .. }
            | Op::Remove(_)
            | Op::Rename { .. }
            | Op::Link(_)
            | Op::Setattr { .. }
            | Op::Open { create: Some(_), .. }
            | Op::Allocate { .. }
            | Op::Deallocate { .. }
            | Op::Copy { .. }
            | Op::Seek { .. }
    );
    if !changes || !sh.helpers().is_running() {
        return false;
    }
    match cx.cur {
        Some(Fh::Real { ex, .. }) => sh.backends()[sh.exports()[ex].backend].1.metadata_blocks(),
        _ => false,
    }
}

/// Run the one operation encoded in `op_bytes` (its number, then its
/// arguments) on a helper thread, as the core would with no defer token,
/// into a result of at most `room` bytes.
pub(crate) fn run_on_helper(
    sh: &NfsShared,
    st: &mut CoreState,
    cred: Cred<'_>,
    peer: Option<std::net::IpAddr>,
    op_bytes: &[u8],
    room: usize,
    state: OpState,
) -> OpDone {
    let mut cx = Ctx {
        sh,
        cred,
        peer,
        cur: state.cur,
        saved: state.saved,
        cur_sid: state.cur_sid,
        saved_sid: state.saved_sid,
        session: state.session,
        last: state.last,
        err_body: 0,
        token: None,
        // The operations run here (`wanted`) never bind a connection, nor
        // create a session.
        conn: None,
        minor: 1,
        acting: std::cell::Cell::new(None),
    };
    // The operation acts as its caller (`ops::real_of` names it) and no
    // longer than this job: the helper thread runs other Calls next.
    let _acting = crate::backend::creds::Scope::enter();
    let mut head = vec![0u8; room];
    let mut rb = ReplyBuilder::new(&mut head, None);
    let mut d = OpDecoder::new(Reader::new(op_bytes), 1, None, &[]);
    let res = match d.next_op() {
        Some(Ok(op)) => ops::run(&mut cx, st, op, &mut rb, 0, room),
        // The core decoded it already: it cannot fail here.
        _ => Err(St(NFS4ERR_SERVERFAULT)),
    };
    let (status, n) = match res {
        Ok(n) => (proto::nfs4::NFS4_OK, n),
        Err(St(s)) => (s, std::mem::take(&mut cx.err_body)),
    };
    let items = rb
        .finish()
        .items
        .iter()
        .filter(|i| (i.offset as usize + i.len as usize) <= n)
        .map(|i| (i.offset as usize, i.len as usize))
        .collect();
    head.truncate(n.min(room));
    OpDone {
        status,
        body: head,
        items,
        state: OpState::of(&cx),
    }
}

/// Take the result of an operation a helper ran (`d`) in place of running
/// it: its body written at `at` of the reply head (below `limit`), its
/// state the COMPOUND's. Returns what [`ops::run`] would have.
pub(crate) fn apply(d: OpDone, cx: &mut Ctx<'_>, reply: &mut ReplyBuilder<'_>, at: usize, limit: usize) -> ops::R {
    let end = at + d.body.len();
    if end > limit {
        return Err(St(NFS4ERR_SERVERFAULT));
    }
    reply.head_mut()[at..end].copy_from_slice(&d.body);
    for (off, len) in d.items {
        // As in READLINK: when the item table is full the item stays inline.
        let _ = reply.add_head_item(at + off, len);
    }
    cx.cur = d.state.cur;
    cx.saved = d.state.saved;
    cx.cur_sid = d.state.cur_sid;
    cx.saved_sid = d.state.saved_sid;
    cx.session = d.state.session;
    if d.status == proto::nfs4::NFS4_OK {
        Ok(d.body.len())
    } else {
        cx.err_body = d.body.len();
        Err(St(d.status))
    }
}
