//! The responder (server) side of the RPC-over-RDMA transport engine, versions 1
//! and 2, for one core.
//!
//! # Model (SPDK nvmf/rdma.c style)
//!
//! - Receives are pre-posted on the core's shared receive queue and are separate
//!   from requests: a receive completion is turned into a request slot, and a fresh
//!   receive buffer is posted at once, so the SRQ stays full.
//! - Every request has an explicit [`ReqState`], advanced by one function,
//!   [`Responder::advance`]. When a scarce resource is missing the request waits
//!   in that resource's pending queue ([`IndexQueue`]): chunk data buffers, RDMA
//!   Read slots on the connection, reply buffers, send-queue slots. Queues are
//!   drained in order on every [`Responder::poll`].
//! - `wr_id`s carry a tag and an index (+ a generation for requests): never a
//!   pointer. Completions are polled in fixed batches of [`CQ_BATCH`]; a turn
//!   that posted RDMA Reads polls once more at its end, so Reads that a
//!   provider completes at post (shm, up to its copy slice) do not wait a
//!   turn of the core's loop.
//! - All memory comes from the [`mempool::Mempool`] registered once with the
//!   fabric; the hot path never registers memory, and nothing is allocated per
//!   request (request slots, queues and maps are sized at construction).
//!
//! # Protocol (RFC 8166; draft-cel-nfsv4-rpcrdma-version-two-09)
//!
//! - The whole transport header is decoded and validated before anything acts on
//!   it (`proto::header::decode`, then `proto::plan::plan_reads`). Errors are
//!   answered with RDMA_ERROR (ERR_VERS / ERR_CHUNK, RFC 8166 s4.5) or
//!   RDMA2_ERROR (draft s5.3.3), copying the XID and version.
//! - Read chunks (Position-Zero included) are pulled with RDMA Read into one data
//!   buffer; the Call reaches the service as borrowed pieces (zero copy).
//! - The reply goes inline, with RDMA Writes into Write chunks, or as a Long reply
//!   through the Reply chunk with RDMA_NOMSG (`proto::plan::plan_reply`).
//! - Send with Invalidate is used when allowed: in v2 when the Call's
//!   `rdma_inv_handle` is non-zero (draft s3.3), in v1 when both peers set the
//!   RFC 8797 R flag (s4.1).
//! - Credits: never zero, never more than the receives reserved for the
//!   connection; an overrun closes the connection (RFC 8166 s3.3.1).
//! - Versions: one listener takes v1 and v2; the first accepted message fixes the
//!   connection's version (draft s7.3); a v2 RDMA2_CONNPROP is answered with ours.
//! - The backward direction (RFC 8167; draft -09 s3.2, s4.2.2): with
//!   [`ResponderConfig::backward_credits`] set, the service may call the
//!   client on the same connection; the rules followed are in [`backward`].
//!
//! All methods are called from the core that owns the responder.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use mempool::pool::{BufRef, ClassId, Mempool};
use proto::header::{
    self, Body, BodyOut, Header, HeaderOut, Limits, Property, Segment, RDMA2_PROPID_RBSIZ, RPCRDMA2_F_RESPONSE,
    RPCRDMA_VERSION_1, RPCRDMA_VERSION_2,
};
use proto::negotiate::{self, CallVerdict, VersionRange};
use proto::plan::{self, ReadLimits, ReadPlan, ReplyHeaderOut, ReplyKind, ReplyPlan};
use proto::private_data::{self, PrivateData as Rfc8797};

use crate::bufs::{Class, EngineBufs};
use crate::credits::{RequesterCredits, ResponderCredits};
use crate::fabric::*;
use crate::queue::{IndexQueue, Slab};
use crate::service::{
    BackwardChannel, CallView, DeferToken, EngineError, ReplyBuilder, ReplyShape, Service, ServiceError,
};

use crate::stages::{StageTimer, Stamp};
use backward::Backchannel;
pub use backward::{DEFAULT_BACKWARD_CREDITS, MAX_BACKWARD_CREDITS};

mod admit;
pub mod backward;
mod conn;
mod execute;
mod machine;
mod reads;
mod reply;

pub use super::{CM_POLL_INTERVAL, CQ_BATCH};

const TAG_RECV: u8 = 1;
/// The last bytes of every head buffer stay zero: the XDR padding source for
/// RDMA Writes of a padded item into a Reply chunk.
const HEAD_PAD_BYTES: usize = 4;
const TAG_REQ: u8 = 2;

/// Stage-timing laps of a Call ([`crate::stages`], feature `stage-timing`),
/// each measured from the poll that delivered the Call: its header decoded
/// and checked, the service about to be called (reply buffers taken), the
/// service returned, the reply's first work request about to be posted, the
/// reply's Send posted. A deferred Call's later laps include its wait.
pub const LAPS: [&str; 5] = [
    "decoded",
    "service start",
    "service done",
    "reply first post",
    "reply posted",
];
pub const LAP_DECODED: usize = 0;
pub const LAP_SERVICE_START: usize = 1;
pub const LAP_SERVICE_DONE: usize = 2;
pub const LAP_FIRST_POST: usize = 3;
pub const LAP_REPLY_POSTED: usize = 4;

/// Responder configuration (one core).
#[derive(Clone, Debug)]
pub struct ResponderConfig {
    /// Versions accepted (draft s7).
    pub versions: VersionRange,
    /// Receives reserved per connection = the most credits ever granted.
    pub credits: u32,
    /// Connections this core serves at most.
    pub max_conns: u32,
    /// Send-queue depth per connection.
    pub send_depth: u32,
    /// RDMA Reads outstanding per connection (initiator depth).
    pub max_rdma_reads: u32,
    /// Decoder limits on chunk lists.
    pub limits: Limits,
    /// Most bytes of Read chunks pulled for one Call.
    pub max_read_bytes: u64,
    /// Pool classes: inline receive buffers, send/head buffers, data buffers.
    pub recv_class: ClassId,
    pub send_class: ClassId,
    pub data_class: ClassId,
    /// Advertise and use remote invalidation (RFC 8797 R flag) in v1.
    pub remote_invalidation: bool,
    /// The backward direction (RFC 8167): the backward Calls this responder
    /// keeps in flight on one connection at most (its backward credit
    /// request, RFC 8167 s4.1), and the receives it reserves per connection
    /// for their Replies (s4.3.2), apart from the forward credits. 0: no
    /// backchannel (backward Calls are never sent; a v2 CONNPROP answer says
    /// RDMA2_RVREQSUP_NONE). At most [`MAX_BACKWARD_CREDITS`].
    pub backward_credits: u32,
}

impl ResponderConfig {
    /// Request slots: every connection's share ([`Self::conn_share`]), so
    /// that no connection can take another's.
    pub fn request_slots(&self) -> u32 {
        self.max_conns * self.conn_share()
    }
    /// Received messages one connection may hold request slots for at once:
    /// one per credit (Calls not yet answered, RFC 8166 s3.3.1) and one per
    /// send-queue slot (answers posted whose Send has not completed: a slot
    /// lives until then, while the credit comes back when the reply is
    /// posted). Every received message counts, Call or not; a connection
    /// that would go beyond its share is closed.
    /// A connection's backward Calls hold request slots too (until their
    /// Send completes; at most [`Self::backward_credits`] at once), so the
    /// share has room for them: a backward Reply, which is handed over and
    /// released in the turn it arrives, then finds one.
    pub fn conn_share(&self) -> u32 {
        self.credits + self.send_depth + self.backward_credits
    }
    /// Depth of the shared receive queue: every connection's forward
    /// credits and the receives its backward Replies may need (RFC 8167
    /// s4.3.2: one per backward Call that may be outstanding).
    pub fn srq_depth(&self) -> u32 {
        self.max_conns * (self.credits + self.backward_credits)
    }
}

/// Counters, readable by the application.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponderStats {
    pub calls: u64,
    pub replies: u64,
    pub replies_inline: u64,
    pub replies_write_chunks: u64,
    pub replies_long: u64,
    /// Long replies that also used Write chunks.
    pub replies_write_and_long: u64,
    pub error_replies: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub sends_with_invalidate: u64,
    pub conns_accepted: u64,
    pub conns_rejected: u64,
    pub conns_closed: u64,
    pub credit_overruns: u64,
    /// Connections closed for holding more received messages than their
    /// share of request slots ([`ResponderConfig::conn_share`]): answers
    /// the peer does not take (it posts no receives) piling up, or
    /// messages that are not Calls, which credits do not bound.
    pub share_overruns: u64,
    /// Messages dropped before they counted as Calls (too short to answer,
    /// RDMA_DONE and the like): no credit, no reply owed.
    pub dropped: u64,
    /// Calls answered with a transport error (RDMA_ERROR / RDMA2_ERROR)
    /// instead of an RPC Reply: chunks that cannot be planned, a Call the
    /// service rejected. Every Call ends in exactly one of `replies`,
    /// `call_errors`, `unanswered_service_drop`, `unanswered_conn_lost` and
    /// `unanswered_other`, or is still live ([`Responder::in_flight`]):
    /// [`ResponderStats::unaccounted`] is zero.
    pub call_errors: u64,
    /// Calls the service rejected ([`ServiceError::Reject`]); each is
    /// answered with a transport error (counted in `call_errors` too), so
    /// its requester gets its credit back at once instead of at a time-out.
    pub service_rejected: u64,
    /// Calls the service dropped on purpose ([`ServiceError::Drop`]: a
    /// retransmission whose first instance answers).
    pub unanswered_service_drop: u64,
    /// Calls released without any answer because their connection was gone
    /// (closed by the peer, a work-request error, shutdown) before the reply
    /// was posted.
    pub unanswered_conn_lost: u64,
    /// Calls released without any answer for any other reason (a header
    /// that cannot be encoded, a broken service promise). Zero unless the
    /// engine has a defect: the tests and the kernel suite assert it.
    pub unanswered_other: u64,
    pub ignored: u64,
    pub wc_errors: u64,
    pub recv_refill_stalls: u64,
    /// Write chunks the service filled in place, in the requester's memory
    /// ([`Fabric::remote_window`]), instead of an RDMA Write (not counted in
    /// `rdma_writes`).
    pub writes_placed: u64,
    /// Calls whose service deferred the reply ([`ReplyBuilder::defer`]).
    pub deferred: u64,
    /// Times a Call waited for a data buffer for its Read chunks (the data
    /// pool was empty): pressure on the pool, not an error.
    pub chunk_buf_waits: u64,
    /// Times the service found its backend busy for a Call
    /// ([`ServiceError::Busy`]), which then waited to run again.
    pub backend_waits: u64,
    /// Replies posted while the shared receive queue was still short of its
    /// depth after a refill (the receive pool was empty): their grant then
    /// promised receives not yet posted. Zero while the pool has buffers.
    pub grants_ahead_of_receives: u64,
    /// Backward-direction Calls posted (RFC 8167 s5.1).
    pub backward_calls: u64,
    /// Backward-direction Replies matched to their Calls and handed to the
    /// service ([`Service::handle_backward_reply`]).
    pub backward_replies: u64,
    /// Backward Calls the service wrote that were not sent: longer than the
    /// buffer, not an RPC Call, or an XID already in flight on the
    /// connection.
    pub backward_calls_refused: u64,
    /// Backward-direction Replies dropped without trust: their XID names no
    /// backward Call in flight on the connection (unknown, answered already,
    /// or beyond the backward credits).
    pub backward_replies_dropped: u64,
    /// Backward-direction Replies refused for carrying chunks (RFC 8167
    /// s5.1-5.2: backward messages are inline); their Call ends unanswered.
    pub backward_replies_refused: u64,
    /// RDMA_ERROR / RDMA2_ERROR messages answering a backward Call: the
    /// connection's backchannel is withdrawn.
    pub backward_errors: u64,
}

impl ResponderStats {
    /// Calls that ended in none of the accounted ways, given `live` Calls
    /// received and not yet answered ([`Responder::calls_awaiting_answer`];
    /// 0 at shutdown): `calls` minus every outcome. Zero unless the engine
    /// lost track of a Call; negative when it counted one twice.
    pub fn unaccounted(&self, live: u64) -> i128 {
        i128::from(self.calls)
            - i128::from(self.replies)
            - i128::from(self.call_errors)
            - i128::from(self.unanswered_service_drop)
            - i128::from(self.unanswered_conn_lost)
            - i128::from(self.unanswered_other)
            - i128::from(live)
    }

    /// Calls that ended without any answer, for any reason.
    pub fn unanswered(&self) -> u64 {
        self.unanswered_service_drop + self.unanswered_conn_lost + self.unanswered_other
    }
}

/// State of one request (SPDK-style explicit state machine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReqState {
    #[default]
    Free,
    /// Decoded; needs to decide what to do.
    New,
    /// Waiting for a data buffer for its Read chunks.
    NeedChunkBuf,
    /// Waiting for RDMA Read slots on its connection.
    NeedReadSlots,
    /// RDMA Reads posted, waiting for their completions.
    Reading,
    /// Ready to run the service.
    Execute,
    /// Waiting for reply buffers (send and head, data when the service wants one).
    NeedReplyBufs,
    /// The service deferred the reply (e.g. backend I/O into the data
    /// buffer is in flight); waiting for [`Service::poll_deferred`] to report
    /// it. Holds every buffer, even when its connection goes away.
    Deferred,
    /// Reported ready: build the reply with [`Service::resume`].
    Resume,
    /// A backward-direction Call (RFC 8167 s5.1), its transport header and
    /// RPC message written into the slot's send buffer and its backward
    /// credit taken: waiting for a send-queue slot. Then `Sending`.
    BackwardCall,
    /// A received backward-direction Reply (RFC 8167 s5.2; draft -09 s3.2):
    /// matched to its Call, handed to the service, released.
    BackwardReply,
    /// Reply planned; waiting for send-queue slots.
    NeedSendSlots,
    /// Writes and Send posted; waiting for their completions.
    Sending,
    /// An error reply (or a CONNPROP answer) waits for a send buffer and slot.
    NeedControlSend,
    /// Its connection is gone; waiting for posted work to flush.
    Draining,
}

/// The form of a request's reply: what `step_send` puts on the wire. Each
/// is the plan `plan::plan_reply` would make for that shape (each fast
/// form is proven equal to it by `proto`'s property tests and checked byte
/// for byte by the engine scenarios), built without the general planning.
#[derive(Clone, Copy, Debug, Default)]
enum ReplyForm {
    #[default]
    None,
    /// One Send: the chunk-free Short header (`ReplyHeaderOut::ChunkFree`),
    /// then head, data and padding. A chunk-free Call whose whole reply fits
    /// the peer's inline threshold ([`short_reply_fits`]; RFC 8166 s3.5.2,
    /// draft s4.3.2).
    Short,
    /// One RDMA Write of the reply's one DDP item into `seg`, the Call's only
    /// chunk, then one Send of the one-step header
    /// (`ReplyHeaderOut::OneWrite`) and the rest of the reply
    /// (`plan::one_write_short_reply`; RFC 8166 s3.4.6). `placed`: the
    /// service wrote the item into the segment's memory already
    /// (`Fabric::remote_window`, shm), so no Write is posted.
    OneWrite { seg: Segment, placed: bool },
    /// The general plan (`plan::plan_reply`): Writes into Write chunks,
    /// a Long reply through the Reply chunk, or a Short reply.
    Planned(ReplyPlan),
}

/// How a reply is counted in [`ResponderStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyStat {
    Inline,
    WriteChunks { placed: bool },
    Long { with_writes: bool },
}

/// The statistics kind of a reply of form `form`.
#[inline(always)]
fn reply_stat_kind(form: &ReplyForm) -> ReplyStat {
    match form {
        ReplyForm::None | ReplyForm::Short => ReplyStat::Inline,
        ReplyForm::OneWrite { placed, .. } => ReplyStat::WriteChunks { placed: *placed },
        ReplyForm::Planned(p) => {
            let reduced = !p.reduced_items().is_empty();
            match p.kind {
                ReplyKind::Long => ReplyStat::Long { with_writes: reduced },
                ReplyKind::Short if reduced => ReplyStat::WriteChunks { placed: false },
                ReplyKind::Short => ReplyStat::Inline,
            }
        }
    }
}

/// What the request will send back when it is not an RPC Reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Control {
    #[default]
    None,
    ErrorV1(header::V1Error),
    ErrorV2(header::V2Error),
    /// An ERR_VERS for a version we do not speak, in that version's word.
    ErrVersRaw(u32),
    ConnProp,
}

#[derive(Clone, Copy, Debug, Default)]
struct Request<'p> {
    /// The Call's transport header, decoded and validated once (it borrows the
    /// receive buffer, which the request holds until it is released).
    hdr: Option<Header<'p>>,
    state: ReqState,
    gen: u32,
    conn: u32,
    vers: u32,
    xid: u32,
    recv: Option<BufRef>,
    recv_len: u32,
    read_plan: ReadPlan,
    chunk_offs: [u32; plan::PLAN_READ_CHUNKS],
    /// Accounted as a Call in the connection's credits.
    counted: bool,
    /// The connection's largest Send toward the peer (`Conn::send_max`),
    /// copied when the Call is admitted: the inline threshold its reply is
    /// planned against.
    inline_max: u32,
    /// How the Call ended is counted: its reply or error reply was posted,
    /// or the service dropped it on purpose. A counted Call released
    /// without it is counted as unanswered ([`Responder::release`]).
    replied: bool,
    chunk_buf: Option<BufRef>,
    reads_posted: u32,
    reads_done: u32,
    reads_total: u32,
    /// The send buffer (transport header and inline reply) and the head
    /// buffer: taken on the slot's first reply and kept by the slot across
    /// requests (returned at shutdown), resolved once ([`SlotBuf`]).
    send_buf: Option<SlotBuf<'p>>,
    head_buf: Option<SlotBuf<'p>>,
    data_buf: Option<BufRef>,
    data_hint: u32,
    shape: ReplyShape,
    /// The reply's form, once planned (`after_service`).
    form: ReplyForm,
    control: Control,
    /// Work requests posted and not yet completed.
    wr_out: u32,
    /// Send-queue slots this request needs for its reply.
    sq_need: u32,
    failed: bool,
    /// The Call carried no chunks (an RDMA_MSG with three empty lists).
    chunk_free: bool,
    /// A backward-direction Call (RFC 8167 s5.1) the engine sends: it holds
    /// one of its connection's backward slots (`Backchannel::slots`) until
    /// it is released.
    backward: bool,
    /// A backward Call's Send length (header and RPC message), in the send
    /// buffer. Written before it is read (`start_backward_calls`).
    backward_len: u32,
    /// When the poll that delivered the Call returned (stage timing only;
    /// zero-sized without the `stage-timing` feature).
    t0: Stamp,
    /// A Call timed from arrival to reply ([`Service::reply_timing_every`]):
    /// when the batch that delivered it was polled, in nanoseconds since
    /// the responder's `reply_clock`; 0 when not timed.
    arrived_ns: u64,
}

impl<'p> Request<'p> {
    /// Reuse a free slot for a message just received in `recv` on connection
    /// slot `conn`: a new generation, every field reset except the slot's own
    /// send and head buffers and the planning state (`read_plan`,
    /// `chunk_offs`, `shape`), which is several hundred bytes and always
    /// written before it is read (`read_plan` and `chunk_offs` by `step_new`,
    /// `shape` with `form` by `after_service`).
    #[inline(always)]
    fn start(&mut self, conn: u32, recv: BufRef, recv_len: u32) {
        self.recv = Some(recv);
        self.recv_len = recv_len;
        self.reset(conn);
    }

    /// [`Self::start`] without a received message: a backward Call the
    /// engine is about to send (RFC 8167 s5.1).
    fn start_backward(&mut self, conn: u32) {
        self.recv = None;
        self.recv_len = 0;
        self.reset(conn);
        self.backward = true;
    }

    /// Every per-request field of [`Self::start`] but the received message.
    #[inline(always)]
    fn reset(&mut self, conn: u32) {
        self.hdr = None;
        self.state = ReqState::New;
        self.gen = self.gen.wrapping_add(1);
        self.conn = conn;
        self.vers = 0;
        self.xid = 0;
        self.counted = false;
        self.replied = false;
        self.chunk_buf = None;
        self.reads_posted = 0;
        self.reads_done = 0;
        self.reads_total = 0;
        self.data_buf = None;
        self.data_hint = 0;
        self.form = ReplyForm::None;
        self.control = Control::None;
        self.wr_out = 0;
        self.sq_need = 0;
        self.failed = false;
        self.chunk_free = false;
        self.backward = false;
        self.arrived_ns = 0;
    }

    /// Reserve the reply buffers (a send buffer for the transport header and
    /// inline reply, a head buffer, and a data buffer when the service asked
    /// for one). Keeps what it got; `false` while one is missing.
    #[inline]
    fn take_reply_bufs(&mut self, bufs: &mut EngineBufs<'p>) -> bool {
        if self.send_buf.is_none() {
            let Some(b) = SlotBuf::take(bufs, Class::Send) else {
                return false;
            };
            self.send_buf = Some(b);
        }
        if self.head_buf.is_none() {
            let Some(b) = SlotBuf::take(bufs, Class::Send) else {
                return false;
            };
            self.head_buf = Some(b);
        }
        if self.data_hint > 0 && self.data_buf.is_none() {
            let Some(b) = bufs.get(Class::Data) else { return false };
            self.data_buf = Some(b);
        }
        true
    }
}

/// A buffer a request slot keeps across its requests (its send and head
/// buffers), resolved once when the slot takes it: the pool's handle, where
/// its bytes are, and its offset in its region (what a work request names).
/// A Call in the steady state then looks nothing up in the pool for them.
#[derive(Clone, Copy, Debug)]
struct SlotBuf<'p> {
    buf: BufRef,
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    offset: u64,
    pool: std::marker::PhantomData<&'p Mempool>,
}

impl<'p> SlotBuf<'p> {
    /// A buffer of `class` from `bufs`, resolved; `None` when the class is
    /// empty.
    #[inline]
    fn take(bufs: &mut EngineBufs<'p>, class: Class) -> Option<Self> {
        let buf = bufs.get(class)?;
        let (Some((ptr, len)), Some(offset)) = (bufs.pool.buf_ptr(buf), bufs.pool.offset(buf)) else {
            // A handle from this pool always resolves.
            bufs.put(buf);
            return None;
        };
        Some(Self {
            buf,
            ptr,
            len,
            offset: offset as u64,
            pool: std::marker::PhantomData,
        })
    }

    /// `len` bytes of it, as the fabric names local memory.
    #[inline(always)]
    fn local(&self, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.buf.region,
            offset: self.offset,
            len,
        }
    }

    /// Its bytes.
    #[inline(always)]
    fn bytes(&self) -> &'p [u8] {
        // SAFETY: `ptr` and `len` are the pool's for `buf` (`take`), inside
        // its mapping, which lives for `'p`. The request slot holds `buf`
        // until shutdown, and no posted work request writes it while the
        // engine reads it (as `EngineBufs::bytes`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Its bytes, mutable.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self) -> &'p mut [u8] {
        // SAFETY: as in `bytes`; the engine borrows each of a slot's buffers
        // mutably at most once at a time, and not while a posted Send reads
        // it (a slot's next reply is built after its last one completed), as
        // `EngineBufs::bytes_mut`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Hashes a [`ConnId`] with one multiply (every received message looks its
/// connection up). The ids come from the local provider, never from the peer,
/// so there is no flooding to defend against that SipHash would be for.
#[derive(Default)]
struct ConnIdHasher(u64);

impl Hasher for ConnIdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        let h = (self.0 ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Fold the well-mixed high half into the low bits the table indexes with.
        self.0 = h ^ (h >> 29);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum ConnState {
    #[default]
    Accepting,
    Up,
    Dead,
}

#[derive(Debug)]
struct Conn {
    id: ConnId,
    state: ConnState,
    credits: ResponderCredits,
    neg: negotiate::Responder,
    sq_used: u32,
    reads_out: u32,
    /// Live requests of this connection (any state but Free).
    requests: u32,
    /// Largest Send toward the peer (server-to-client inline threshold).
    send_max: u32,
    /// v1: both sides set the RFC 8797 R flag.
    remote_inv: bool,
    /// The peer's IP address, for the service's access control.
    peer: Option<std::net::IpAddr>,
    /// The backward direction (RFC 8167) on this connection.
    back: Backchannel,
}

/// The responder engine for one core. Generic over the fabric provider `F` and
/// the service `S`; borrows the process-wide pool for `'p`.
pub struct Responder<'p, F: Fabric, S: Service> {
    cfg: ResponderConfig,
    fabric: F,
    service: S,
    bufs: EngineBufs<'p>,
    cq: CqId,
    srq: SrqId,
    srq_posted: u32,
    srq_deficit: u32,
    /// Receive slots: the buffer posted under each SRQ receive's `wr_id` index,
    /// so the buffers can be reclaimed when the SRQ goes away (it reports no
    /// completions for receives it still holds).
    srq_slots: Box<[Option<BufRef>]>,
    srq_free: Vec<u32>,
    reqs: Slab<Request<'p>>,
    /// Requests in state `Deferred`, and the service's report buffer (one
    /// entry per request slot).
    deferred: u32,
    ready: Box<[DeferToken]>,
    conns: Slab<Option<Conn>>,
    conn_by_id: HashMap<ConnId, u32, BuildHasherDefault<ConnIdHasher>>,
    wait_chunk_buf: IndexQueue,
    wait_read_slots: IndexQueue,
    wait_reply_bufs: IndexQueue,
    wait_send_slots: IndexQueue,
    wait_backend: IndexQueue,
    listener: Option<ListenerId>,
    recv_size: u32,
    send_size: u32,
    data_size: u32,
    stats: ResponderStats,
    wcs: [Completion; CQ_BATCH],
    /// Stage timing ([`crate::stages`]): the laps, and when the current
    /// batch of completions was polled.
    stages: StageTimer,
    polled_at: Stamp,
    /// Arrival-to-reply timing ([`Service::reply_timing_every`]): the
    /// clock's origin (`None`: the service times nothing), one Call in
    /// `reply_every` timed, Calls admitted since the last one timed, and
    /// when the batch of completions last read for it was polled
    /// ([`Responder::batch_polled`]).
    reply_clock: Option<std::time::Instant>,
    reply_every: u32,
    reply_tick: u32,
    batch_ns: u64,
    /// RDMA Reads posted since the CQ was last polled in [`Responder::poll`].
    reads_posted_this_turn: u32,
    /// Completions this turn that only ended a reply on the wire (its Send
    /// or Writes done: buffers and slots freed, nothing to run next).
    reaps_this_turn: usize,
    cm_tick: u32,
    /// Set by [`Responder::begin_drain`]: new connections are refused.
    draining: bool,
    /// Connections accepted but not yet established.
    accepting: u32,
}

impl<F: Fabric, S: Service> std::fmt::Debug for Responder<'_, F, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("fabric", &self.fabric.name())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Errors setting a responder up.
pub type ResponderError = crate::service::EngineError;

/// Buffer accounting snapshot (for leak tests): buffers this responder holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldBuffers {
    pub srq_posted: u32,
    pub recv: u32,
    pub send: u32,
    pub data: u32,
    pub requests: u32,
}

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    /// creates the CQ and SRQ and fills the SRQ. `listen`: address to listen at.
    pub fn new(
        cfg: ResponderConfig,
        mut fabric: F,
        service: S,
        pool: &'p Mempool,
        regions: &[Arc<mempool::region::Region>],
        core: usize,
        listen: Option<&str>,
    ) -> Result<Self, ResponderError> {
        if cfg.credits == 0 || cfg.max_conns == 0 {
            return Err(EngineError::Config("credits and max_conns must be at least 1".into()));
        }
        if cfg.backward_credits > MAX_BACKWARD_CREDITS {
            return Err(EngineError::Config(format!(
                "backward_credits must be at most {MAX_BACKWARD_CREDITS}"
            )));
        }
        let class_size = |c: ClassId| pool.class_info(c).map(|i| i.buf_size as u32);
        let (Some(recv_size), Some(send_size), Some(data_size)) = (
            class_size(cfg.recv_class),
            class_size(cfg.send_class),
            class_size(cfg.data_class),
        ) else {
            return Err(EngineError::Config("unknown pool class".into()));
        };
        if recv_size < 1024 || send_size < 1024 {
            return Err(EngineError::Config(
                "inline buffers must be at least 1024 bytes (RFC 8166 s3.3.3)".into(),
            ));
        }
        // Register every region once (persistent keys). A responder exposes none
        // of its own memory to the peer (RFC 8166 s8.1), so only local keys matter.
        for r in regions {
            // A responder exposes none of its memory (RFC 8166 s8.1).
            fabric.register_region(r, RegionAccess::Local)?;
        }
        let cq = fabric.create_cq(cfg.srq_depth() + cfg.max_conns * cfg.send_depth)?;
        let srq = fabric.create_srq(cfg.srq_depth())?;
        let listener = match listen {
            Some(a) => Some(fabric.listen(a)?),
            None => None,
        };
        let slots = cfg.request_slots() as usize;
        let cfg_srq_depth = cfg.srq_depth();
        let reply_every = service.reply_timing_every();
        let reply_clock = (reply_every > 0).then(|| service.reply_clock_now());
        let mut me = Responder {
            bufs: EngineBufs::new(pool, cfg.recv_class, cfg.send_class, cfg.data_class, core)?,
            reqs: Slab::with_capacity(slots),
            deferred: 0,
            ready: vec![DeferToken(0); slots].into_boxed_slice(),
            conns: Slab::with_capacity(cfg.max_conns as usize),
            conn_by_id: HashMap::with_capacity_and_hasher(cfg.max_conns as usize * 2, Default::default()),
            wait_chunk_buf: IndexQueue::with_capacity(slots),
            wait_read_slots: IndexQueue::with_capacity(slots),
            wait_reply_bufs: IndexQueue::with_capacity(slots),
            wait_send_slots: IndexQueue::with_capacity(slots),
            wait_backend: IndexQueue::with_capacity(slots),
            cfg,
            fabric,
            service,
            cq,
            srq,
            srq_posted: 0,
            srq_deficit: 0,
            srq_slots: vec![None; cfg_srq_depth as usize].into_boxed_slice(),
            srq_free: (0..cfg_srq_depth).rev().collect(),
            listener,
            recv_size,
            send_size,
            data_size,
            stats: ResponderStats::default(),
            wcs: [Completion::EMPTY; CQ_BATCH],
            stages: StageTimer::new("responder", &LAPS),
            polled_at: Stamp::default(),
            reply_clock,
            reply_every,
            reply_tick: 0,
            batch_ns: 0,
            reads_posted_this_turn: 0,
            reaps_this_turn: 0,
            cm_tick: 0,
            accepting: 0,
            draining: false,
        };
        me.srq_deficit = me.cfg.srq_depth();
        me.refill_srq();
        Ok(me)
    }

    /// The stage-timing laps ([`LAPS`]; empty without the `stage-timing`
    /// feature).
    pub fn stages(&self) -> &StageTimer {
        &self.stages
    }

    pub fn stats(&self) -> ResponderStats {
        self.stats
    }

    pub fn fabric(&mut self) -> &mut F {
        &mut self.fabric
    }

    pub fn service(&mut self) -> &mut S {
        &mut self.service
    }

    pub fn listener(&self) -> Option<ListenerId> {
        self.listener
    }

    /// Live connections.
    pub fn connections(&self) -> usize {
        self.conns.in_use()
    }

    /// Credits granted now, summed over the live connections: each one's
    /// grant in its next reply (RFC 8166 s3.3.1). Live statistics. Owning core.
    pub fn credits_granted(&self) -> u64 {
        let live = self.conns.used_indices().filter_map(|i| self.conns.get(i)?.as_ref());
        live.map(|c| u64::from(c.credits.grant())).sum()
    }

    /// Buffers held right now, for accounting tests.
    pub fn held(&self) -> HeldBuffers {
        let mut h = HeldBuffers {
            srq_posted: self.srq_posted,
            requests: self.reqs.in_use() as u32,
            ..Default::default()
        };
        // Buffers kept in front of the pool.
        let [recv, send, data] = self.bufs.kept();
        h.recv += recv as u32;
        h.send += send as u32;
        h.data += data as u32;
        for (used, r) in self.reqs.all_slots() {
            // Free slots keep their send and head buffers.
            h.send += r.send_buf.is_some() as u32 + r.head_buf.is_some() as u32;
            if used {
                h.recv += r.recv.is_some() as u32;
                h.data += r.chunk_buf.is_some() as u32 + r.data_buf.is_some() as u32;
            }
        }
        h
    }

    /// One turn of the core's loop: connection events, a batch of completions,
    /// SRQ refill, pending queues. Returns the amount of work done (0 = idle).
    pub fn poll(&mut self) -> usize {
        let mut work = 0;
        // While a connection is being accepted, its handshake must progress
        // promptly: poll CM every turn until it is established.
        let urgent = self.accepting > 0 || self.draining;
        work += super::poll_cm(self, urgent);
        self.reads_posted_this_turn = 0;
        self.reaps_this_turn = 0;
        work += self.poll_completions();
        if self.deferred > 0 {
            work += self.poll_deferred();
        }
        if self.srq_deficit > 0 {
            self.refill_srq();
        }
        // Backward-direction Calls (RFC 8167): a service that never has any
        // (the default) makes this test a constant.
        if self.service.has_backward_calls() {
            work += self.start_backward_calls();
        }
        work += self.drain_pending();
        // RDMA Reads posted this turn may have completed already (a provider
        // that executes work at post time, as shm does): one more poll lets
        // their Calls go on now rather than a turn of the core's loop later.
        // On verbs it usually finds nothing, and costs one CQ poll per turn
        // that posted Reads.
        if self.reads_posted_this_turn > 0 {
            self.reads_posted_this_turn = 0;
            work += self.poll_completions();
        }
        // What this turn posted goes to the device at once (doorbell
        // batching: one post per connection for all its replies' Writes
        // and Sends).
        self.fabric.flush();
        // A provider still executing posted work (shm's sliced copies)
        // needs the next turn soon: the turn was not idle.
        work + usize::from(self.fabric.progressing())
    }

    /// Poll one batch of completions (at most [`CQ_BATCH`]) and handle each;
    /// returns how many.
    fn poll_completions(&mut self) -> usize {
        super::poll_completions(self)
    }

    /// Resume the deferred Calls the service reports ready. Tokens of
    /// requests not (or no longer) deferred are ignored.
    fn poll_deferred(&mut self) -> usize {
        let n = self.service.poll_deferred(&mut self.ready).min(self.ready.len());
        for k in 0..n {
            let t = self.ready[k];
            let (i, gen) = (t.0 as u32, (t.0 >> 32) as u32);
            match self.reqs.get_mut(i) {
                Some(r) if r.state == ReqState::Deferred && r.gen == gen => {
                    r.state = ReqState::Resume;
                    self.deferred -= 1;
                    self.advance(i);
                }
                _ => {}
            }
        }
        n
    }

    // ------------------------------------------------------------- connections

    fn req_wr_id(&self, i: u32) -> WrId {
        req_wr_id(i, self.reqs.get(i).map_or(0, |r| r.gen))
    }

    /// Start a graceful drain: from now on connection requests are refused;
    /// Calls already received keep being served. Poll with [`Responder::poll`]
    /// until [`Responder::in_flight`] is 0, then [`Responder::shutdown`].
    /// Runs on the responder's core.
    pub fn begin_drain(&mut self) {
        // Connection events are polled every turn from now on, so a request
        // that arrives during the drain is refused promptly.
        self.draining = true;
    }

    /// Calls whose service deferred the reply and has not reported them yet
    /// (their I/O is in flight). Owning core.
    pub fn deferred(&self) -> u32 {
        self.deferred
    }

    /// Of the work the last [`Responder::poll`] reported, the completions
    /// that only ended a reply on the wire (the Send or RDMA Write of a
    /// request in `Sending`, successful): they free buffers and slots, and
    /// whatever that lets go on ran in the same turn and counts apart. A
    /// turn whose work is all such completions found nothing new to do: a
    /// core may leave its spin alone for it (issue 24 item 1: under
    /// Soft-RoCE a reply's Send completes after the peer's acknowledgement,
    /// often past the core's spin; the target does so only with
    /// `RPCRDMA_REAPS_IDLE=1`, since the extra spin it saves caught the
    /// next Call often enough to be worth it there).
    pub fn reaps_last_turn(&self) -> usize {
        self.reaps_this_turn
    }

    /// Calls received and not yet answered (their requests are live).
    pub fn in_flight(&self) -> usize {
        self.reqs.in_use()
    }

    /// Whether every live request waits only for work requests the fabric
    /// completes (its RDMA Reads, its reply's Writes and Send, or the flush
    /// of a lost connection), none for deferred backend I/O or for a local
    /// resource (buffers, slots, the backend queue): the core may then block
    /// on the fabric's completion notification (issue 24 item 1), since
    /// only a completion moves those requests on. Idle path: walks the live
    /// requests.
    pub fn waits_only_on_fabric(&self) -> bool {
        self.deferred == 0
            && (self.reqs.in_use() == 0
                || self.reqs.used_indices().all(|i| {
                    self.reqs
                        .get(i)
                        .is_none_or(|r| matches!(r.state, ReqState::Reading | ReqState::Sending | ReqState::Draining))
                }))
    }

    /// Whether some live request needs a send-side completion to move on:
    /// its RDMA Reads (`Reading`), the flush of a lost connection
    /// (`Draining`) or a send-queue slot (`NeedSendSlots`, `BackwardCall`).
    /// When none does, the live requests are replies on the wire whose
    /// completions only free buffers and slots, and a core that blocks
    /// need not be woken for them ([`Fabric::arm_wakeup_receives`]; issue
    /// 24 item 1). Idle path: walks the live requests.
    pub fn waits_on_send_completions(&self) -> bool {
        self.reqs.used_indices().any(|i| {
            self.reqs.get(i).is_some_and(|r| {
                matches!(
                    r.state,
                    ReqState::Reading | ReqState::Draining | ReqState::NeedSendSlots | ReqState::BackwardCall
                )
            })
        })
    }

    /// Calls received, counted, and not yet answered (no reply or error
    /// reply posted): what [`ResponderStats::unaccounted`] takes as `live`.
    /// Owning core.
    pub fn calls_awaiting_answer(&self) -> u64 {
        self.reqs
            .used_indices()
            .filter(|&i| self.reqs.get(i).is_some_and(|r| r.counted && !r.replied))
            .count() as u64
    }

    /// The live requests by state, the states with none left out: where
    /// Calls wait, for a log line when a drain does not finish. Owning
    /// core; control path (it allocates).
    pub fn live_by_state(&self) -> Vec<(ReqState, u32)> {
        let mut out: Vec<(ReqState, u32)> = Vec::new();
        for i in self.reqs.used_indices() {
            let Some(r) = self.reqs.get(i) else { continue };
            match out.iter_mut().find(|(s, _)| *s == r.state) {
                Some((_, n)) => *n += 1,
                None => out.push((r.state, 1)),
            }
        }
        out
    }

    /// Disconnect everything, poll until all work has flushed, and return every
    /// buffer (including the SRQ's receives, which are reclaimed by dropping the
    /// fabric's SRQ). Returns the buffers still held (zero when clean).
    pub fn shutdown(&mut self, max_polls: usize) -> HeldBuffers {
        let slots: Vec<u32> = self.conns.used_indices().collect();
        for s in slots {
            self.kill_conn(s, true);
        }
        for _ in 0..max_polls {
            if self.reqs.in_use() == 0 {
                break;
            }
            self.poll();
        }
        // With every connection gone no Send can land any more: take the SRQ's
        // receive buffers back (the SRQ reports no completions for them).
        if self.conns.in_use() == 0 {
            for k in 0..self.srq_slots.len() {
                if let Some(b) = self.srq_slots[k].take() {
                    self.bufs.put(b);
                    self.srq_free.push(k as u32);
                    self.srq_posted -= 1;
                }
            }
            // Do not refill: the responder is shut down.
            self.srq_deficit = 0;
            // The send and head buffers free request slots keep.
            let mut kept = Vec::new();
            for (used, r) in self.reqs.all_slots_mut() {
                if !used {
                    kept.extend(
                        [r.send_buf.take(), r.head_buf.take()]
                            .into_iter()
                            .flatten()
                            .map(|s| s.buf),
                    );
                }
            }
            for b in kept {
                self.bufs.put(b);
            }
            self.bufs.drain();
        }
        self.held()
    }
}

/// The `wr_id` of work posted for request `i` of generation `gen`.
#[inline]
fn req_wr_id(i: u32, gen: u32) -> WrId {
    WrId::new(TAG_REQ, (((gen & 0xff_ffff) as u64) << 32) | i as u64)
}

/// The Call of request `r` as the service sees it (`None` before its header
/// was decoded or once its connection is forgotten).
#[inline(always)]
fn call_view<'v>(r: &'v Request<'_>, conns: &'v Slab<Option<Conn>>, chunk_area: &'v [u8]) -> Option<CallView<'v>> {
    let h = r.hdr.as_ref()?;
    let inline = match h.body {
        Body::Msg { payload, .. } => payload,
        _ => &[][..],
    };
    let conn = conns.get(r.conn)?.as_ref()?;
    Some(CallView {
        conn: conn.id,
        peer: conn.peer,
        vers: r.vers,
        xid: r.xid,
        pieces: r.read_plan.pieces(),
        inline,
        chunk_area,
        chunk_offsets: &r.chunk_offs[..r.read_plan.chunk_count()],
        token: None,
    })
}

/// The token of request slot `i` in generation `gen` ([`DeferToken`]).
fn defer_token(i: u32, gen: u32) -> DeferToken {
    DeferToken(u64::from(i) | u64::from(gen) << 32)
}

/// What `step_control` needs of its request.
#[derive(Clone, Copy)]
struct ControlArgs {
    conn: u32,
    control: Control,
    xid: u32,
    counted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Continue,
    Wait,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    ChunkBuf,
    ReadSlots,
    ReplyBufs,
    /// Calls the service found its backend busy for ([`ServiceError::Busy`]).
    Backend,
    SendSlots,
}

super::impl_poll_loop!(Responder<'_, F, S>, [F: Fabric, S: Service]);
