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
//!   provider completes at post (shm) do not wait a turn of the core's loop.
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
use proto::plan::{self, ReadLimits, ReadPlan, ReplyKind, ReplyPlan};
use proto::private_data::{self, PrivateData as Rfc8797};

use crate::bufs::{Class, EngineBufs};
use crate::credits::ResponderCredits;
use crate::fabric::*;
use crate::queue::{IndexQueue, Slab};
use crate::service::{CallView, DeferToken, EngineError, ReplyBuilder, ReplyShape, Service, ServiceError};
use crate::stages::{StageTimer, Stamp};

/// Completions polled per `poll_cq` call.
pub const CQ_BATCH: usize = 32;

/// Connection-manager events are control plane: they are polled once every this
/// many turns of the loop (and on the first), not on every turn, because a
/// provider's CM poll may cost syscalls (SPDK polls its CM channel on a separate,
/// slower poller for the same reason).
pub const CM_POLL_INTERVAL: u32 = 256;

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
}

impl ResponderConfig {
    /// Request slots needed: one per receive that can be outstanding.
    pub fn request_slots(&self) -> u32 {
        self.max_conns * self.credits
    }
    /// Depth of the shared receive queue.
    pub fn srq_depth(&self) -> u32 {
        self.max_conns * self.credits
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
    /// One Send: the one-step Short header (`plan::encode_short_reply_header`),
    /// then head, data and padding. A chunk-free Call whose whole reply fits
    /// the peer's inline threshold ([`short_reply_fits`]; RFC 8166 s3.5.2,
    /// draft s4.3.2).
    Short,
    /// One RDMA Write of the reply's one DDP item into `seg`, the Call's only
    /// chunk, then one Send of the one-step header
    /// (`plan::encode_one_write_reply_header`) and the rest of the reply
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
    /// requests (returned at shutdown).
    send_buf: Option<BufRef>,
    head_buf: Option<BufRef>,
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
    /// When the poll that delivered the Call returned (stage timing only;
    /// zero-sized without the `stage-timing` feature).
    t0: Stamp,
}

impl<'p> Request<'p> {
    /// Reuse a free slot for a message just received in `recv` on connection
    /// slot `conn`: a new generation, every field reset except the slot's own
    /// send and head buffers and the planning state (`read_plan`,
    /// `chunk_offs`, `shape`), which is several hundred bytes and always
    /// written before it is read (`read_plan` and `chunk_offs` by `step_new`,
    /// `shape` with `form` by `after_service`).
    #[inline]
    fn start(&mut self, conn: u32, recv: BufRef, recv_len: u32) {
        self.hdr = None;
        self.state = ReqState::New;
        self.gen = self.gen.wrapping_add(1);
        self.conn = conn;
        self.vers = 0;
        self.xid = 0;
        self.recv = Some(recv);
        self.recv_len = recv_len;
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
    }

    /// Reserve the reply buffers (a send buffer for the transport header and
    /// inline reply, a head buffer, and a data buffer when the service asked
    /// for one). Keeps what it got; `false` while one is missing.
    #[inline]
    fn take_reply_bufs(&mut self, bufs: &mut EngineBufs<'p>) -> bool {
        if self.send_buf.is_none() {
            let Some(b) = bufs.get(Class::Send) else { return false };
            self.send_buf = Some(b);
        }
        if self.head_buf.is_none() {
            let Some(b) = bufs.get(Class::Send) else { return false };
            self.head_buf = Some(b);
        }
        if self.data_hint > 0 && self.data_buf.is_none() {
            let Some(b) = bufs.get(Class::Data) else { return false };
            self.data_buf = Some(b);
        }
        true
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
    /// RDMA Reads posted since the CQ was last polled in [`Responder::poll`].
    reads_posted_this_turn: u32,
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
    /// Build a responder on `core`: registers every pool region with `fabric`,
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
            fabric.register_region(r)?;
        }
        let cq = fabric.create_cq(cfg.srq_depth() + cfg.max_conns * cfg.send_depth)?;
        let srq = fabric.create_srq(cfg.srq_depth())?;
        let listener = match listen {
            Some(a) => Some(fabric.listen(a)?),
            None => None,
        };
        let slots = cfg.request_slots() as usize;
        let cfg_srq_depth = cfg.srq_depth();
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
            reads_posted_this_turn: 0,
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
        let cm_due = self.cm_tick == 0 || self.accepting > 0 || self.draining;
        self.cm_tick = (self.cm_tick + 1) % CM_POLL_INTERVAL;
        while let Some(ev) = if cm_due { self.fabric.poll_cm() } else { None } {
            self.handle_cm(ev);
            work += 1;
        }
        self.reads_posted_this_turn = 0;
        work += self.poll_completions();
        if self.deferred > 0 {
            work += self.poll_deferred();
        }
        if self.srq_deficit > 0 {
            self.refill_srq();
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
        work
    }

    /// Poll one batch of completions (at most [`CQ_BATCH`]) and handle each;
    /// returns how many.
    fn poll_completions(&mut self) -> usize {
        let n = self.fabric.poll_cq(self.cq, &mut self.wcs);
        self.polled_at = StageTimer::now();
        for i in 0..n {
            let wc = self.wcs[i];
            self.handle_completion(wc);
        }
        n
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

    fn handle_cm(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::ConnectRequest { req, private_data, .. } => {
                let peer = private_data::decode(private_data.as_bytes());
                let ours = Rfc8797::new(self.cfg.remote_invalidation, self.send_size, self.recv_size);
                let mut pd = [0u8; 8];
                let pd_len = ours.encode(&mut pd).unwrap_or(0);
                if self.conns.available() == 0 || self.draining {
                    self.stats.conns_rejected += 1;
                    let _ = self.fabric.reject(req, &pd[..pd_len]);
                    return;
                }
                let qp = QpConfig {
                    cq: self.cq,
                    srq: Some(self.srq),
                    send_depth: self.cfg.send_depth,
                    recv_depth: 0,
                    max_rdma_reads: self.cfg.max_rdma_reads.min(255) as u8,
                    ..QpConfig::default()
                };
                match self.fabric.accept(req, &qp, &pd[..pd_len]) {
                    Ok(id) => {
                        let slot = self.conns.alloc().expect("checked available");
                        let cfg = negotiate::Config::new(self.cfg.versions, self.send_size, self.recv_size)
                            .expect("sizes checked at construction");
                        let mut neg = negotiate::Responder::new(cfg);
                        // RFC 8797: sizes the peer advertised bound what we send.
                        if peer.present() {
                            let _ = neg.set_peer_receive_size(peer.data().receive_size_bytes);
                        }
                        let send_max =
                            private_data::server_to_client_threshold_bytes(&ours, &peer.data()).min(self.send_size);
                        *self.conns.get_mut(slot).expect("allocated") = Some(Conn {
                            id,
                            state: ConnState::Accepting,
                            credits: ResponderCredits::new(self.cfg.credits),
                            neg,
                            sq_used: 0,
                            reads_out: 0,
                            requests: 0,
                            send_max,
                            remote_inv: private_data::remote_invalidation_allowed(&ours, &peer.data()),
                            peer: self.fabric.peer_addr(id),
                        });
                        self.conn_by_id.insert(id, slot);
                        self.accepting += 1;
                        self.stats.conns_accepted += 1;
                    }
                    Err(_) => self.stats.conns_rejected += 1,
                }
            }
            CmEvent::Established { conn, .. } => {
                if let Some(c) = self.conn_mut_by_id(conn) {
                    if c.state == ConnState::Accepting {
                        c.state = ConnState::Up;
                        self.accepting -= 1;
                    }
                }
            }
            CmEvent::Disconnected { conn } | CmEvent::Unreachable { conn } | CmEvent::Rejected { conn, .. } => {
                if let Some(&slot) = self.conn_by_id.get(&conn) {
                    self.kill_conn(slot, false);
                }
            }
        }
    }

    fn conn_mut_by_id(&mut self, id: ConnId) -> Option<&mut Conn> {
        let slot = *self.conn_by_id.get(&id)?;
        self.conns.get_mut(slot)?.as_mut()
    }

    fn conn(&self, slot: u32) -> Option<&Conn> {
        self.conns.get(slot)?.as_ref()
    }

    fn conn_mut(&mut self, slot: u32) -> Option<&mut Conn> {
        self.conns.get_mut(slot)?.as_mut()
    }

    /// Tear a connection down: disconnect, release every request that has no
    /// work posted, leave the others to drain their flushed completions.
    fn kill_conn(&mut self, slot: u32, disconnect: bool) {
        let Some(c) = self.conn_mut(slot) else { return };
        if c.state == ConnState::Dead {
            return;
        }
        let was_accepting = c.state == ConnState::Accepting;
        c.state = ConnState::Dead;
        let id = c.id;
        if was_accepting {
            self.accepting -= 1;
        }
        if disconnect {
            let _ = self.fabric.disconnect(id);
        }
        self.stats.conns_closed += 1;
        // Requests of this connection leave every pending queue.
        let reqs = &self.reqs;
        let of_conn = |i: u32| reqs.get(i).is_some_and(|r| r.conn == slot);
        for q in [
            &mut self.wait_chunk_buf,
            &mut self.wait_read_slots,
            &mut self.wait_reply_bufs,
            &mut self.wait_send_slots,
        ] {
            q.remove_where(of_conn);
        }
        let live: Vec<u32> = self.reqs.used_indices().filter(|&i| of_conn(i)).collect();
        for i in live {
            let r = self.reqs.get_mut(i).expect("live");
            match r.state {
                // Released when the service reports it (see `advance`).
                ReqState::Deferred => continue,
                ReqState::Resume => self.service.cancel(defer_token(i, r.gen)),
                _ => {}
            }
            let r = self.reqs.get_mut(i).expect("live");
            if r.wr_out == 0 {
                self.release(i);
            } else {
                r.state = ReqState::Draining;
            }
        }
        self.maybe_forget_conn(slot);
    }

    /// Forget a dead connection once no request refers to it.
    #[inline]
    fn maybe_forget_conn(&mut self, slot: u32) {
        let Some(c) = self.conn(slot) else { return };
        if c.state == ConnState::Dead && c.requests == 0 {
            let id = c.id;
            self.conn_by_id.remove(&id);
            *self.conns.get_mut(slot).expect("live") = None;
            self.conns.free(slot);
        }
    }

    // ------------------------------------------------------------- receives

    fn refill_srq(&mut self) {
        while self.srq_deficit > 0 {
            let Some(slot) = self.srq_free.pop() else { return };
            let Some(b) = self.bufs.get(Class::Recv) else {
                self.srq_free.push(slot);
                self.stats.recv_refill_stalls += 1;
                return;
            };
            let wr = RecvWr {
                wr_id: WrId::new(TAG_RECV, slot as u64),
                buf: self.bufs.local(b, self.recv_size),
            };
            if self.fabric.post_srq_recv(self.srq, &wr).is_err() {
                self.srq_free.push(slot);
                self.bufs.put(b);
                return;
            }
            self.srq_slots[slot as usize] = Some(b);
            self.srq_posted += 1;
            self.srq_deficit -= 1;
        }
    }

    fn handle_completion(&mut self, wc: Completion) {
        match wc.wr_id.tag() {
            TAG_RECV => self.handle_recv(wc),
            TAG_REQ => self.handle_req_completion(wc),
            _ => self.stats.ignored += 1,
        }
    }

    fn handle_recv(&mut self, wc: Completion) {
        let slot = wc.wr_id.index() as usize;
        let Some(b) = self.srq_slots.get_mut(slot).and_then(Option::take) else {
            self.stats.ignored += 1;
            return;
        };
        self.srq_free.push(slot as u32);
        self.srq_posted = self.srq_posted.saturating_sub(1);
        self.srq_deficit += 1;
        let slot = self.conn_by_id.get(&wc.conn).copied();
        if !wc.status.is_success() {
            // SRQ receives only fail for the message that hit them (e.g. too long).
            self.bufs.put(b);
            if wc.status != WcStatus::Flushed {
                self.stats.wc_errors += 1;
                if let Some(s) = slot {
                    self.kill_conn(s, true);
                }
            }
            return;
        }
        let Some(slot) = slot.filter(|&s| self.conn(s).is_some_and(|c| c.state != ConnState::Dead)) else {
            self.bufs.put(b);
            self.stats.ignored += 1;
            return;
        };
        let Some(i) = self.reqs.alloc() else {
            // Cannot happen when the SRQ is sized from the request slots.
            debug_assert!(false, "request slots exhausted");
            self.bufs.put(b);
            self.stats.dropped += 1;
            return;
        };
        let recv_len = wc.byte_len.min(self.recv_size);
        let r = self.reqs.get_mut(i).expect("allocated");
        r.start(slot, b, recv_len);
        r.t0 = self.polled_at;
        if let Some(c) = self.conn_mut(slot) {
            c.requests += 1;
        }
        self.advance(i);
    }

    fn handle_req_completion(&mut self, wc: Completion) {
        let idx = wc.wr_id.index();
        let (i, gen) = ((idx & 0xffff_ffff) as u32, (idx >> 32) as u32 & 0xff_ffff);
        let Some(r) = self.reqs.get_mut(i) else {
            self.stats.ignored += 1;
            return;
        };
        if r.gen & 0xff_ffff != gen {
            self.stats.ignored += 1;
            return;
        }
        r.wr_out = r.wr_out.saturating_sub(1);
        let conn = r.conn;
        if let Some(c) = self.conn_mut(conn) {
            c.sq_used = c.sq_used.saturating_sub(1);
            if wc.opcode == WcOpcode::RdmaRead {
                c.reads_out = c.reads_out.saturating_sub(1);
            }
        }
        let r = self.reqs.get_mut(i).expect("live");
        if !wc.status.is_success() {
            r.failed = true;
            if wc.status != WcStatus::Flushed {
                self.stats.wc_errors += 1;
            }
            // An error completion means the QP is in error: tear it down.
            self.kill_conn(conn, true);
            if let Some(r) = self.reqs.get_mut(i) {
                if r.wr_out == 0 {
                    self.release(i);
                }
            }
            return;
        }
        match (r.state, wc.opcode) {
            // A Read completes while its request is `Reading` (all posted)
            // or still `NeedReadSlots` (posted in turns: a chunk with more
            // segments than the connection's free Read slots). Either way it
            // counts; a request that still waits for slots sits in that
            // queue, which `drain_pending` retries, so only the last
            // completion of a fully posted request moves it on.
            (ReqState::Reading | ReqState::NeedReadSlots, WcOpcode::RdmaRead) => {
                r.reads_done += 1;
                debug_assert!(
                    r.reads_done <= r.reads_posted,
                    "request {i}: more Reads done than posted"
                );
                if r.reads_done == r.reads_total {
                    debug_assert_eq!(r.state, ReqState::Reading);
                    r.state = ReqState::Execute;
                    self.advance(i);
                }
            }
            // The reply (or the drain after an error) is done when no work is left.
            (ReqState::Sending | ReqState::Draining, _) if r.wr_out == 0 => self.release(i),
            _ => {}
        }
    }

    // ------------------------------------------------------------- the state machine

    /// Advance request `i` as far as its resources allow. The single place where
    /// request states change (besides completions recording progress).
    fn advance(&mut self, i: u32) {
        // A request whose connection went away while it waited drains
        // instead. Checked once: a step that closes the connection returns
        // `Step::Wait`, so it cannot go away between two steps of one call.
        {
            let Some(r) = self.reqs.get(i) else { return };
            let conn_dead = self.conn(r.conn).is_none_or(|c| c.state == ConnState::Dead);
            if conn_dead && r.state != ReqState::Draining {
                match r.state {
                    // The service may still write into its buffers: keep them
                    // until it reports the Call.
                    ReqState::Deferred => return,
                    ReqState::Resume => self.service.cancel(defer_token(i, r.gen)),
                    _ => {}
                }
                if r.wr_out == 0 {
                    self.release(i);
                } else {
                    self.reqs.get_mut(i).expect("live").state = ReqState::Draining;
                }
                return;
            }
        }
        self.run_states(i);
    }

    /// [`Self::advance`] for a request whose connection is live (or that is
    /// draining): step it through its states until one must wait.
    #[inline]
    fn run_states(&mut self, i: u32) {
        loop {
            let Some(r) = self.reqs.get(i) else { return };
            debug_assert!(
                r.state == ReqState::Draining || self.conn(r.conn).is_some_and(|c| c.state != ConnState::Dead),
                "request {i} advanced on a dead connection"
            );
            let next = match r.state {
                ReqState::Free | ReqState::Reading | ReqState::Sending | ReqState::Draining | ReqState::Deferred => {
                    return
                }
                ReqState::New => self.step_new(i),
                ReqState::NeedChunkBuf => self.step_chunk_buf(i),
                ReqState::NeedReadSlots => self.step_reads(i),
                ReqState::Execute | ReqState::NeedReplyBufs | ReqState::Resume => self.step_execute(i),
                ReqState::NeedSendSlots => self.step_send(i),
                ReqState::NeedControlSend => self.step_control(i),
            };
            match next {
                Step::Continue => continue,
                Step::Wait => return,
            }
        }
    }

    fn set_state(&mut self, i: u32, s: ReqState) {
        if let Some(r) = self.reqs.get_mut(i) {
            r.state = s;
        }
    }

    fn control(&mut self, i: u32, c: Control) -> Step {
        let r = self.reqs.get_mut(i).expect("live");
        r.control = c;
        r.state = ReqState::NeedControlSend;
        Step::Continue
    }

    /// Decode and validate the received message, and admit it as a Call.
    ///
    /// A chunk-free RDMA_MSG / RDMA2_MSG (three empty lists: how NULL,
    /// GETATTR, LOOKUP and most small Calls travel) on a connection whose
    /// version is already fixed to its own (draft s7.3) is decoded in one
    /// step (`header::decode_chunk_free_msg`, which the fuzz targets check
    /// against `header::decode` on every input) and goes straight to
    /// `Execute`: version negotiation would accept it and change nothing,
    /// and it has no Read to plan. Everything else takes the general decode.
    #[inline]
    fn step_new(&mut self, i: u32) -> Step {
        let (recv, recv_len, conn) = {
            let r = self.reqs.get(i).expect("live");
            (r.recv, r.recv_len, r.conn)
        };
        let b = recv.expect("new request holds its receive");
        let msg = &self.bufs.bytes(b)[..recv_len as usize];
        if let Some(h) = header::decode_chunk_free_msg(msg) {
            let Self {
                reqs,
                conns,
                stats,
                stages,
                ..
            } = self;
            let Some(c) = conns.get_mut(conn).and_then(Option::as_mut) else {
                return Step::Wait;
            };
            // A v2 RESPONSE is refused by the general path (draft s3.2).
            let steady = c.neg.version() == Some(h.vers) && !(h.vers == RPCRDMA_VERSION_2 && h.is_response());
            if steady {
                // Admission, as `admit_call` does it, with the connection
                // at hand.
                if c.credits.on_call(h.credits).is_err() {
                    return self.overrun(i, conn);
                }
                stats.calls += 1;
                let inline_max = c.send_max;
                let r = reqs.get_mut(i).expect("live");
                r.counted = true;
                r.inline_max = inline_max;
                r.xid = h.xid;
                r.vers = h.vers;
                let payload_len = h.payload().map_or(0, <[u8]>::len) as u32;
                plan::plan_inline_call_into(payload_len, &mut r.read_plan);
                r.hdr = Some(h);
                r.chunk_free = true;
                r.reads_total = 0;
                r.state = ReqState::Execute;
                stages.lap(LAP_DECODED, r.t0);
                return Step::Continue;
            }
        }
        self.step_new_general(i, msg, conn)
    }

    /// `step_new` for every message but a chunk-free Call in the steady
    /// state: version negotiation, the whole header's decode and checks,
    /// admission and the Read plan.
    #[inline(never)]
    fn step_new_general(&mut self, i: u32, msg: &'p [u8], conn: u32) -> Step {
        let Some(prefix) = header::peek_prefix(msg) else {
            // Too short to answer at all (RFC 8166 s4.5 needs the XID): drop.
            self.stats.dropped += 1;
            self.drop_call(i, false);
            return Step::Wait;
        };
        let rr = self.reqs.get_mut(i).expect("live");
        rr.xid = prefix.xid;
        rr.vers = prefix.vers;
        // Version negotiation (draft s7): unknown versions, or a change of version
        // on a connection whose version is fixed, get ERR_VERS.
        let verdict = match self.conn_mut(conn) {
            Some(c) => c.neg.handle_call(prefix.vers),
            None => return Step::Wait,
        };
        if let CallVerdict::RejectVersion { low, high } = verdict {
            // A version we speak but the connection is fixed to another: answer in
            // that version's layout. A version we do not speak: the v1 layout,
            // which every version shares, under the peer's version word (RFC 8166
            // s4.5, draft s7.2; as Linux svcrdma does).
            let ctl = match prefix.vers {
                v if !self.cfg.versions.contains(v) => Control::ErrVersRaw(v),
                RPCRDMA_VERSION_2 => Control::ErrorV2(header::V2Error::Vers { low, high }),
                _ => Control::ErrorV1(header::V1Error::Vers { low, high }),
            };
            return self.control(i, ctl);
        }
        // Decoded straight into the request (the header is a large value:
        // no copies of it on the way).
        let Self { reqs, cfg, stats, .. } = self;
        let rr = reqs.get_mut(i).expect("live");
        let h = match header::decode(msg, &cfg.limits) {
            Ok(h) => rr.hdr.insert(h),
            Err(e) => {
                let (lo, hi) = (cfg.versions.low(), cfg.versions.high());
                let ctl = if prefix.vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(e.v2_reply(lo, hi))
                } else {
                    Control::ErrorV1(e.v1_reply(lo, hi))
                };
                return self.control(i, ctl);
            }
        };
        let refuse = match h.body {
            Body::Msg { .. } | Body::NoMsg { .. } => None,
            Body::ConnProp(_) => Some(Control::ConnProp),
            // RFC 8166 s4.6: no longer used; answer ERR_CHUNK.
            Body::MsgP { .. } => Some(Control::ErrorV1(header::V1Error::Chunk)),
            // RDMA_DONE is ignored (s4.6); errors never flow to a responder.
            Body::Done | Body::ErrorV1(_) | Body::ErrorV2(_) => {
                stats.ignored += 1;
                self.drop_call(i, false);
                return Step::Wait;
            }
        };
        if let Some(ctl) = refuse {
            return self.control(i, ctl);
        }
        // A v2 Call must not carry RESPONSE (draft s3.2): such a message is a
        // reverse-direction reply, which this responder does not use.
        if h.vers == RPCRDMA_VERSION_2 && h.is_response() {
            return self.control(i, Control::ErrorV2(header::V2Error::BadXdr));
        }
        let requested = h.credits;
        if !self.admit_call(i, conn, requested) {
            return Step::Wait;
        }
        let Self {
            reqs, cfg, data_size, ..
        } = self;
        let rr = reqs.get_mut(i).expect("live");
        let limits = ReadLimits {
            max_total_bytes: cfg.max_read_bytes.min(*data_size as u64),
            max_chunks: cfg.limits.max_read_chunks,
            max_segments: cfg.limits.max_read_segments,
        };
        // From here on the Call holds a credit: its reply, an error reply
        // included, or its drop gives it back.
        let Request {
            hdr,
            read_plan,
            chunk_offs,
            reads_total,
            chunk_free,
            state,
            vers,
            ..
        } = rr;
        let Some(h) = hdr.as_ref() else { return Step::Wait };
        if let Err(e) = plan::plan_reads_into(h, &limits, read_plan) {
            let ctl = if *vers == RPCRDMA_VERSION_2 {
                Control::ErrorV2(e.v2())
            } else {
                Control::ErrorV1(e.v1())
            };
            return self.control(i, ctl);
        }
        for (k, o) in chunk_offs.iter_mut().enumerate().take(read_plan.chunk_count()) {
            *o = read_plan.chunk_offset(k as u32).unwrap_or(0);
        }
        *reads_total = h.chunks().map_or(0, |c| c.reads.segment_count() as u32);
        *chunk_free = matches!(h.body, Body::Msg { chunks, .. } if chunks.is_empty());
        *state = if *reads_total > 0 {
            ReqState::NeedChunkBuf
        } else {
            ReqState::Execute
        };
        self.stages.lap(LAP_DECODED, rr.t0);
        Step::Continue
    }

    /// Admit request `i` as a Call on connection `conn` whose header asks
    /// for `requested` credits: one credit of the connection's, counted in
    /// the statistics; from here on the Call ends in one counted way
    /// ([`ResponderStats::unaccounted`]). A Call beyond the receives the
    /// connection may use is a credit overrun (RFC 8166 s3.3.1: with an SRQ
    /// the extra Calls eat other connections' receives): the message is
    /// dropped and the connection closed; `false` then.
    #[inline]
    fn admit_call(&mut self, i: u32, conn: u32, requested: u32) -> bool {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else {
            self.drop_call(i, false);
            return false;
        };
        if c.credits.on_call(requested).is_err() {
            let _ = self.overrun(i, conn);
            return false;
        }
        let inline_max = c.send_max;
        self.stats.calls += 1;
        if let Some(r) = self.reqs.get_mut(i) {
            r.counted = true;
            r.inline_max = inline_max;
        }
        true
    }

    /// Request `i` is one Call more than connection `conn` may have
    /// outstanding: a credit overrun (RFC 8166 s3.3.1). The message is
    /// dropped and the connection closed.
    #[cold]
    #[inline(never)]
    fn overrun(&mut self, i: u32, conn: u32) -> Step {
        self.stats.credit_overruns += 1;
        self.drop_call(i, false);
        self.kill_conn(conn, true);
        Step::Wait
    }

    #[inline(never)]
    fn step_chunk_buf(&mut self, i: u32) -> Step {
        match self.bufs.get(Class::Data) {
            Some(b) => {
                let r = self.reqs.get_mut(i).expect("live");
                r.chunk_buf = Some(b);
                r.state = ReqState::NeedReadSlots;
                // Zero only the XDR padding after each chunk (at most 3 bytes
                // each, RFC 8166 s3.4.5.2), so chunk data plus padding is valid
                // XDR; the RDMA Reads write everything else.
                let (pieces, offs) = (r.read_plan, r.chunk_offs);
                let buf = self.bufs.bytes_mut(b);
                for p in pieces.pieces() {
                    if let proto::plan::Piece::Chunk { index, len, pad } = *p {
                        let at = offs.get(index as usize).copied().unwrap_or(0) as usize + len as usize;
                        if let Some(z) = buf.get_mut(at..at + pad as usize) {
                            z.fill(0);
                        }
                    }
                }
                Step::Continue
            }
            None => {
                self.stats.chunk_buf_waits += 1;
                self.wait(i, Queue::ChunkBuf)
            }
        }
    }

    /// Post as many of the request's RDMA Reads as the connection allows.
    #[inline(never)]
    fn step_reads(&mut self, i: u32) -> Step {
        let Self {
            reqs,
            conns,
            fabric,
            bufs,
            cfg,
            stats,
            ..
        } = self;
        let r = reqs.get(i).expect("live");
        let Some(c) = conns.get(r.conn).and_then(Option::as_ref) else {
            return Step::Wait;
        };
        // A message can arrive before the accepting side is established (as with
        // RDMA-CM); its work waits until the provider can post.
        if c.state == ConnState::Accepting {
            self.set_state(i, ReqState::NeedReadSlots);
            return self.wait(i, Queue::ReadSlots);
        }
        let (conn_id, room_reads, room_sq) = (
            c.id,
            cfg.max_rdma_reads.saturating_sub(c.reads_out),
            cfg.send_depth.saturating_sub(c.sq_used),
        );
        let room = room_reads.min(room_sq);
        if room == 0 {
            self.set_state(i, ReqState::NeedReadSlots);
            return self.wait(i, Queue::ReadSlots);
        }
        let b = r.chunk_buf.expect("chunk buffer attached");
        let base = bufs.pool.offset(b).unwrap_or(0) as u64;
        let Some(chunks) = r.hdr.as_ref().and_then(|h| h.chunks()) else {
            return Step::Wait;
        };
        let wr_id = req_wr_id(i, r.gen);
        let mut posted = 0u32;
        let mut post_err = false;
        for op in r.read_plan.read_ops(&chunks.reads).skip(r.reads_posted as usize) {
            if posted == room {
                break;
            }
            let wr = SendWr::new(
                wr_id,
                SendOp::RdmaRead,
                LocalBuf {
                    region: b.region,
                    offset: base + op.dest_offset as u64,
                    len: op.segment.length,
                },
                op.segment,
            );
            if fabric.post_send(conn_id, &wr).is_err() {
                post_err = true;
                break;
            }
            posted += 1;
        }
        stats.rdma_reads += posted as u64;
        self.reads_posted_this_turn += posted;
        let rr = reqs.get_mut(i).expect("live");
        rr.reads_posted += posted;
        rr.wr_out += posted;
        let conn = rr.conn;
        let all = rr.reads_posted == rr.reads_total;
        rr.state = if all {
            ReqState::Reading
        } else {
            ReqState::NeedReadSlots
        };
        if let Some(c) = self.conn_mut(conn) {
            c.reads_out += posted;
            c.sq_used += posted;
        }
        if post_err {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        if all {
            Step::Wait // completions continue it
        } else {
            self.wait(i, Queue::ReadSlots)
        }
    }

    fn req_wr_id(&self, i: u32) -> WrId {
        req_wr_id(i, self.reqs.get(i).map_or(0, |r| r.gen))
    }

    /// Run the service on the Call and plan its reply (`Execute`), after
    /// taking the reply buffers it needs (`NeedReplyBufs`), or resume a
    /// deferred one (`Resume`). When the service asks for no data buffer
    /// and the slot already holds its send and head buffers (the steady
    /// state), the Call's view is built once, for the hint and the service.
    #[inline]
    fn step_execute(&mut self, i: u32) -> Step {
        let Self {
            reqs,
            conns,
            bufs,
            service,
            fabric,
            stages,
            ..
        } = self;
        let r = reqs.get_mut(i).expect("live");
        let resuming = r.state == ReqState::Resume;
        let chunk_area = r.chunk_buf.map_or(&[][..], |b| bufs.bytes(b));
        if r.state == ReqState::Execute {
            let Some(view) = call_view(r, conns, chunk_area) else {
                return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
            };
            // The RPC message's XID must be the transport header's
            // (RFC 8166 s4.1: rdma_xid is the XID of the RPC message it
            // conveys). An inline one was checked at decode; a Long Call's
            // message arrives by RDMA Read, so it is checked here, before
            // the service sees it: a mismatch is a header that cannot be
            // parsed (ERR_CHUNK, s4.5; RDMA2_ERR_BAD_XDR, draft s5.3.3).
            let long = r.hdr.as_ref().is_some_and(|h| matches!(h.body, Body::NoMsg { .. }));
            if long && view.head().get(..4) != Some(&r.xid.to_be_bytes()[..]) {
                let ctl = if r.vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(header::V2Error::BadXdr)
                } else {
                    Control::ErrorV1(header::V1Error::Chunk)
                };
                return self.control(i, ctl);
            }
            let hint = service.reply_data_hint(&view);
            if hint == 0 && r.send_buf.is_some() && r.head_buf.is_some() {
                let ran = run_service(service, fabric, bufs, conns, stages, r, i, view, false);
                return self.after_service(i, ran);
            }
            r.data_hint = hint.min(u32::MAX as usize) as u32;
            r.state = ReqState::NeedReplyBufs;
        }
        // Reply buffers: a send buffer (transport header + inline reply), a head
        // buffer, and a data buffer when the service asks for one.
        if !r.take_reply_bufs(bufs) {
            return self.wait(i, Queue::ReplyBufs);
        }
        let r = &*r;
        let Some(view) = call_view(r, conns, chunk_area) else {
            return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
        };
        let ran = run_service(service, fabric, bufs, conns, stages, r, i, view, resuming);
        self.after_service(i, ran)
    }

    /// What follows the service's `handle_call` or `resume` of request `i`
    /// (`res`; `deferred`: it deferred the reply; `shape`: the reply it
    /// built; `window`: the data item went into the requester's Write chunk,
    /// [`data_window`]): hold a deferred Call, drop a dropped one, or plan
    /// the reply.
    ///
    /// Called on the request's core only.
    #[inline(always)]
    fn after_service(&mut self, i: u32, ran: Ran) -> Step {
        let Ran {
            res,
            deferred,
            shape,
            window,
        } = ran;
        let Self {
            reqs,
            conns: _,
            bufs,
            deferred: deferred_calls,
            stats,
            send_size,
            ..
        } = self;
        let send_size = *send_size;
        let r = reqs.get(i).expect("live");
        // A deferral stands even beside an error: the service may have I/O
        // in flight into this Call's buffers, which must stay held until it
        // reports the Call (it can drop it then, from `resume`).
        if deferred && window.is_some() {
            // The service promised not to (`fills_data_in_call`): the window
            // cannot outlive this step.
            debug_assert!(false, "a service that fills data in the call deferred one");
            self.stats.dropped += 1;
            self.drop_call(i, true);
            return Step::Wait;
        }
        if deferred {
            stats.deferred += 1;
            *deferred_calls += 1;
            reqs.get_mut(i).expect("live").state = ReqState::Deferred;
            return Step::Wait;
        }
        match res {
            Ok(()) => {}
            Err(ServiceError::Drop) => {
                stats.unanswered_service_drop += 1;
                reqs.get_mut(i).expect("live").replied = true;
                self.drop_call(i, true);
                return Step::Wait;
            }
            // Answered with the transport's error (RFC 8166 s4.5; draft
            // s5.3.3), which returns the credit: never silence.
            Err(ServiceError::Reject) => {
                stats.service_rejected += 1;
                let ctl = if r.vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(header::V2Error::System)
                } else {
                    Control::ErrorV1(header::V1Error::Chunk)
                };
                return self.control(i, ctl);
            }
        }
        let send_max = r.inline_max;
        let vers = r.vers;
        // A chunk-free Call whose whole reply fits inline: nothing to plan
        // (no Write chunk to fill, no Reply chunk), so `step_send` writes the
        // one-step Short header and the reply after it. This is the Short
        // plan `plan_reply` would make (RFC 8166 s3.5.2; draft s4.3.2):
        // header, then the reply with its DDP items left inline.
        if r.chunk_free && short_reply_fits(vers, &shape, send_max.min(send_size)) {
            let rr = reqs.get_mut(i).expect("live");
            rr.shape = shape;
            rr.form = ReplyForm::Short;
            rr.sq_need = 1;
            rr.state = ReqState::NeedSendSlots;
            return Step::Continue;
        }
        // Plan the reply against the Call's Write list and Reply chunk.
        let Some(chunks) = r.hdr.as_ref().and_then(|h| h.chunks()) else {
            return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
        };
        // The READ shape: one Write chunk of one segment and a reply with one
        // non-empty DDP item that fits it, the rest inline. This is the
        // Short plan `plan_reply` would make (one RDMA Write, then the Send;
        // RFC 8166 s3.4.6, s3.5.2), without planning and write-op walks.
        if let Some(seg) = chunks.one_write_segment() {
            let inline_max = send_max.min(send_size);
            let fits = plan::one_write_short_reply(shape.stream_len() as usize, shape.items(), seg, vers, inline_max);
            if fits.is_some() && shape.items().first().is_some_and(|it| it.len > 0) {
                // In place when the chunk's one item is the data item, which
                // the service wrote at the window's start.
                let in_place =
                    window.is_some() && shape.items().len() == 1 && shape.items()[0].offset == shape.head_len;
                if !in_place {
                    copy_back(bufs, r, window, shape.data_len);
                }
                let rr = reqs.get_mut(i).expect("live");
                rr.shape = shape;
                rr.form = ReplyForm::OneWrite { seg, placed: in_place };
                rr.sq_need = if in_place { 1 } else { 2 };
                rr.state = ReqState::NeedSendSlots;
                return Step::Continue;
            }
        }
        // Any other plan reads the data item from the data buffer.
        copy_back(bufs, r, window, shape.data_len);
        match plan::plan_reply(shape.stream_len() as usize, shape.items(), chunks, vers, send_max) {
            Ok(p) => {
                let n_writes = p.write_ops(chunks).count() as u32;
                let rr = reqs.get_mut(i).expect("live");
                rr.shape = shape;
                rr.form = ReplyForm::Planned(p);
                rr.sq_need = n_writes + 1;
                rr.state = ReqState::NeedSendSlots;
                Step::Continue
            }
            Err(e) => {
                let ctl = if vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(e.v2())
                } else {
                    Control::ErrorV1(e.v1())
                };
                self.control(i, ctl)
            }
        }
    }

    /// Post the reply in its planned form ([`ReplyForm`]): the transport
    /// header and the inline part into the send buffer, the RDMA Writes
    /// (Write chunks, then a Long reply's Reply chunk; RFC 8166 s3.4.6,
    /// s3.5.3), then the Send or Send with Invalidate ([`send_op`]). Every
    /// form is posted, counted and timed here.
    ///
    /// Called on the request's core only.
    #[inline]
    fn step_send(&mut self, i: u32) -> Step {
        let Self {
            reqs,
            conns,
            bufs,
            fabric,
            cfg,
            send_size,
            stages,
            ..
        } = self;
        let send_size = *send_size;
        let r = reqs.get(i).expect("live");
        let Some(c) = conns.get(r.conn).and_then(Option::as_ref) else {
            return Step::Wait;
        };
        let (conn_id, remote_inv) = (c.id, c.remote_inv);
        if c.state == ConnState::Accepting || cfg.send_depth.saturating_sub(c.sq_used) < r.sq_need {
            return self.wait(i, Queue::SendSlots);
        }
        // Credits: the grant goes in this reply (never zero, at most reserved).
        let grant = c.credits.grant();
        let Some(h) = r.hdr.as_ref() else { return Step::Wait };
        let chunks = h.chunks();
        let Some(send_b) = r.send_buf else { return Step::Wait };
        let Some(send_len) = encode_reply(bufs, r, grant, chunks) else {
            return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
        };
        // The RDMA Writes, from pieces of the head and data buffers.
        let wr_id = req_wr_id(i, r.gen);
        let mut posted = 0u32;
        let mut err = false;
        stages.lap(LAP_FIRST_POST, r.t0);
        match r.form {
            ReplyForm::OneWrite { seg, placed: false } => {
                if let Some(item) = r.shape.items().first() {
                    let target = Segment {
                        length: item.len,
                        ..seg
                    };
                    err = !post_write(
                        fabric,
                        bufs,
                        send_size,
                        r,
                        conn_id,
                        wr_id,
                        target,
                        item.offset,
                        item.len,
                    );
                    posted += u32::from(!err);
                }
            }
            ReplyForm::Planned(ref plan) => {
                for op in chunks.iter().flat_map(|c| plan.write_ops(c)) {
                    if !post_write(
                        fabric,
                        bufs,
                        send_size,
                        r,
                        conn_id,
                        wr_id,
                        op.target,
                        op.src.start,
                        op.src.len,
                    ) {
                        err = true;
                        break;
                    }
                    posted += 1;
                }
            }
            _ => {}
        }
        let writes = posted;
        let op = send_op(r.vers, remote_inv && fabric.caps().send_with_invalidate, h);
        if !err {
            let wr = SendWr::new(wr_id, op, bufs.local(send_b, send_len as u32), RemoteBuf::default());
            if fabric.post_send(conn_id, &wr).is_ok() {
                posted += 1;
            } else {
                err = true;
            }
        }
        // The reply is on its way: what follows is bookkeeping.
        let kind = reply_stat_kind(&r.form);
        let conn = r.conn;
        self.reply_posted(i, conn, posted, (!err).then_some(grant));
        let stats = &mut self.stats;
        stats.rdma_writes += u64::from(writes);
        if err {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        stats.sends_with_invalidate += u64::from(matches!(op, SendOp::SendWithInv { .. }));
        stats.replies += 1;
        match kind {
            ReplyStat::Inline => stats.replies_inline += 1,
            ReplyStat::WriteChunks { placed } => {
                stats.writes_placed += u64::from(placed);
                stats.replies_write_chunks += 1;
            }
            ReplyStat::Long { with_writes } => {
                stats.replies_long += 1;
                stats.replies_write_and_long += u64::from(with_writes);
            }
        }
        Step::Wait
    }

    /// Account a reply's `posted` work requests on request `i` (now
    /// Sending) and on its connection `conn`; `grant` is the credit grant
    /// the reply carries, `None` when its Send was not posted.
    #[inline(always)]
    fn reply_posted(&mut self, i: u32, conn: u32, posted: u32, grant: Option<u32>) {
        if let Some(rr) = self.reqs.get_mut(i) {
            rr.wr_out += posted;
            rr.state = ReqState::Sending;
            if grant.is_some() {
                rr.replied = true;
                self.stages.lap(LAP_REPLY_POSTED, rr.t0);
            }
        }
        if let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) {
            c.sq_used += posted;
            if let Some(g) = grant {
                c.credits.on_reply(g);
            }
        }
    }

    /// Send an error reply or a CONNPROP answer.
    #[inline(never)]
    fn step_control(&mut self, i: u32) -> Step {
        let r = {
            let r = self.reqs.get(i).expect("live");
            ControlArgs {
                conn: r.conn,
                control: r.control,
                xid: r.xid,
                counted: r.counted,
            }
        };
        let Some(c) = self.conn(r.conn) else { return Step::Wait };
        let conn_id = c.id;
        if c.state == ConnState::Accepting || c.sq_used >= self.cfg.send_depth {
            return self.wait(i, Queue::SendSlots);
        }
        // Control replies also answer a message that consumed a receive: grant.
        let grant = c.credits.grant();
        let send_b = match self.reqs.get(i).expect("live").send_buf {
            Some(b) => b,
            None => match self.bufs.get(Class::Send) {
                Some(b) => {
                    self.reqs.get_mut(i).expect("live").send_buf = Some(b);
                    b
                }
                None => return self.wait(i, Queue::ReplyBufs),
            },
        };
        let rbsiz = self.recv_size.to_be_bytes();
        let props = [Property {
            id: RDMA2_PROPID_RBSIZ,
            data: &rbsiz,
        }];
        let out = self.bufs.bytes_mut(send_b);
        let len = match r.control {
            Control::ErrorV1(e) => header::encode(
                &HeaderOut {
                    xid: r.xid,
                    vers: RPCRDMA_VERSION_1,
                    credits: grant,
                    flags: 0,
                    body: BodyOut::ErrorV1(e),
                },
                out,
            ),
            Control::ErrorV2(e) => header::encode(
                &HeaderOut {
                    xid: r.xid,
                    vers: RPCRDMA_VERSION_2,
                    credits: grant,
                    flags: RPCRDMA2_F_RESPONSE,
                    body: BodyOut::ErrorV2(e),
                },
                out,
            ),
            Control::ErrVersRaw(v) => {
                let mut w = proto::xdr::Writer::new(out);
                header::put_prefix(&mut w, r.xid, RPCRDMA_VERSION_1, grant, header::RDMA_ERROR, 0)
                    .and_then(|_| w.put_u32(header::ERR_VERS))
                    .and_then(|_| w.put_u32(self.cfg.versions.low()))
                    .and_then(|_| w.put_u32(self.cfg.versions.high()))
                    .and_then(|_| w.patch_u32(4, v))
                    .map(|_| w.len())
            }
            Control::ConnProp => header::encode(
                &HeaderOut {
                    xid: r.xid,
                    vers: RPCRDMA_VERSION_2,
                    credits: grant,
                    flags: RPCRDMA2_F_RESPONSE,
                    body: BodyOut::ConnProp(&props),
                },
                out,
            ),
            Control::None => Ok(0),
        };
        let Ok(len) = len else {
            self.drop_call(i, false);
            return Step::Wait;
        };
        let wr = SendWr::new(
            self.req_wr_id(i),
            SendOp::Send,
            self.bufs.local(send_b, len as u32),
            RemoteBuf::default(),
        );
        let conn = r.conn;
        if self.fabric.post_send(conn_id, &wr).is_err() {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        if !matches!(r.control, Control::ConnProp) {
            self.stats.error_replies += 1;
        }
        self.stats.call_errors += u64::from(r.counted);
        let rr = self.reqs.get_mut(i).expect("live");
        rr.replied = true;
        rr.wr_out += 1;
        rr.state = ReqState::Sending;
        if let Some(c) = self.conn_mut(conn) {
            c.sq_used += 1;
            if r.counted {
                c.credits.on_reply(grant);
            }
        }
        Step::Wait
    }

    /// Drop a message without replying. `counted`: it was accounted as a Call.
    fn drop_call(&mut self, i: u32, _counted: bool) {
        if self.reqs.get(i).is_some_and(|r| r.counted) {
            let conn = self.reqs.get(i).map(|r| r.conn);
            if let Some(c) = conn.and_then(|s| self.conn_mut(s)) {
                c.credits.on_drop();
            }
        }
        self.release(i);
    }

    /// Return every buffer a request holds and free its slot. A Call that
    /// counted and was never answered is counted here, by why.
    fn release(&mut self, i: u32) {
        let Some(r) = self.reqs.get_mut(i) else { return };
        debug_assert_eq!(r.wr_out, 0, "releasing request {i} with work outstanding");
        if r.counted && !r.replied {
            let conn_lost = self
                .conns
                .get(r.conn)
                .and_then(Option::as_ref)
                .is_none_or(|c| c.state == ConnState::Dead);
            if conn_lost {
                self.stats.unanswered_conn_lost += 1;
            } else {
                self.stats.unanswered_other += 1;
            }
        }
        // The send and head buffers stay with the slot.
        let held = [r.recv.take(), r.chunk_buf.take(), r.data_buf.take()];
        let conn = r.conn;
        // The generation stays (the next request in this slot takes the next
        // one); `start` resets the rest when the slot is reused.
        r.state = ReqState::Free;
        r.hdr = None;
        r.form = ReplyForm::None;
        self.reqs.free(i);
        self.bufs.put_all(held);
        if let Some(c) = self.conn_mut(conn) {
            c.requests = c.requests.saturating_sub(1);
        }
        self.maybe_forget_conn(conn);
    }

    fn wait(&mut self, i: u32, q: Queue) -> Step {
        let queue = match q {
            Queue::ChunkBuf => &mut self.wait_chunk_buf,
            Queue::ReadSlots => &mut self.wait_read_slots,
            Queue::ReplyBufs => &mut self.wait_reply_bufs,
            Queue::SendSlots => &mut self.wait_send_slots,
        };
        // Sized to the request slots: a request waits in one queue at a time.
        let pushed = queue.push(i);
        debug_assert!(pushed.is_ok(), "pending queue overflow");
        Step::Wait
    }

    /// Retry waiting requests, in order, per resource.
    fn drain_pending(&mut self) -> usize {
        let mut work = 0;
        for q in [Queue::ChunkBuf, Queue::ReadSlots, Queue::ReplyBufs, Queue::SendSlots] {
            let n = self.queue(q).len();
            for _ in 0..n {
                let Some(i) = self.queue(q).pop() else { break };
                let before = self.queue(q).len();
                self.advance(i);
                work += 1;
                // Still blocked on the same resource: stop, keep FIFO order.
                if self.queue(q).len() > before {
                    break;
                }
            }
        }
        work
    }

    fn queue(&mut self, q: Queue) -> &mut IndexQueue {
        match q {
            Queue::ChunkBuf => &mut self.wait_chunk_buf,
            Queue::ReadSlots => &mut self.wait_read_slots,
            Queue::ReplyBufs => &mut self.wait_reply_bufs,
            Queue::SendSlots => &mut self.wait_send_slots,
        }
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

    /// Calls received and not yet answered (their requests are live).
    pub fn in_flight(&self) -> usize {
        self.reqs.in_use()
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
                    kept.extend([r.send_buf.take(), r.head_buf.take()].into_iter().flatten());
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

/// What the service made of a Call ([`run_service`]): its result, whether
/// it deferred the reply, the reply it built, and the window its data item
/// went into ([`data_window`]), if any.
struct Ran {
    res: Result<(), ServiceError>,
    deferred: bool,
    shape: ReplyShape,
    window: Option<(std::ptr::NonNull<u8>, usize)>,
}

/// Run the service on request `r` (slot `i`, holding its send and head
/// buffers, and its data buffer when it asked for one): `handle_call`, or
/// `resume` when `resuming`, with `view`, into a reply built in the head
/// buffer and the data buffer, or straight into the requester's Write
/// chunk when the provider maps it and the service fills data within the
/// call ([`data_window`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn run_service<F: Fabric, S: Service>(
    service: &mut S,
    fabric: &mut F,
    bufs: &mut EngineBufs<'_>,
    conns: &Slab<Option<Conn>>,
    stages: &mut StageTimer,
    r: &Request<'_>,
    i: u32,
    mut view: CallView<'_>,
    resuming: bool,
) -> Ran {
    let token = defer_token(i, r.gen);
    view.token = Some(token);
    let head = bufs.bytes_mut(r.head_buf.expect("head"));
    let head_room = head.len() - HEAD_PAD_BYTES;
    let data = r.data_buf.map(|b| bufs.bytes_mut(b));
    // The data item straight into the requester's Write chunk, where the
    // provider maps it and the service fills it before returning.
    let window = match &data {
        Some(d) if !resuming && service.fills_data_in_call() => data_window(fabric, conns, r, d.len()),
        _ => None,
    };
    let data = match window {
        // SAFETY: `data_window` checked `len` bytes at `p` to be inside a
        // region of the peer's mapped here, which stays mapped until this
        // core next calls into the fabric (`Fabric::remote_window`); the
        // slice and the window live in this step only (here and in
        // `after_service`), before any such call. The peer gave that memory
        // to this Call's reply (its Write chunk), as it does for an RDMA
        // Write, and does not touch it until the Reply.
        Some((p, len)) => Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) }),
        None => data,
    };
    let mut rb = ReplyBuilder::new(&mut head[..head_room], data);
    stages.lap(LAP_SERVICE_START, r.t0);
    let res = if resuming {
        service.resume(token, &view, &mut rb)
    } else {
        service.handle_call(&view, &mut rb)
    };
    stages.lap(LAP_SERVICE_DONE, r.t0);
    let deferred = rb.is_deferred();
    Ran {
        res,
        deferred,
        shape: rb.finish(),
        window,
    }
}

/// The requester's memory behind the Call's single Write chunk, as the data
/// buffer's stand-in (`len` = the data hint, at most the data buffer's
/// `cap`), when the provider maps it here ([`Fabric::remote_window`]) and the
/// chunk has room for all of it.
fn data_window<F: Fabric>(
    fabric: &mut F,
    conns: &Slab<Option<Conn>>,
    r: &Request,
    cap: usize,
) -> Option<(std::ptr::NonNull<u8>, usize)> {
    let seg = r.hdr.as_ref()?.chunks()?.one_write_segment()?;
    let len = (r.data_hint as usize).min(cap);
    if len == 0 || (seg.length as usize) < len {
        return None;
    }
    let c = conns.get(r.conn)?.as_ref()?;
    fabric.remote_window(c.id, &seg, len as u32).map(|p| (p, len))
}

/// The data item the service wrote into a window, copied into the Call's
/// data buffer for a reply that does not go out in that Write chunk alone
/// (nothing without a window).
fn copy_back(bufs: &mut EngineBufs<'_>, r: &Request, window: Option<(std::ptr::NonNull<u8>, usize)>, data_len: u32) {
    let (Some((p, len)), Some(b)) = (window, r.data_buf) else {
        return;
    };
    let n = (data_len as usize).min(len);
    // SAFETY: as where the window was made (`run_service`, whose result
    // `step_execute` hands to `after_service`, the only caller): still the
    // same step, no fabric call since, `n <= len` bytes at `p` in the peer's
    // mapped memory.
    let src = unsafe { std::slice::from_raw_parts(p.as_ptr(), n) };
    if let Some(dst) = bufs.bytes_mut(b).get_mut(..n) {
        dst.copy_from_slice(src);
    }
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

/// Write request `r`'s transport header (granting `grant` credits) and the
/// inline part of its reply into its send buffer, as its [`ReplyForm`]
/// says; returns the Send's length, `None` when the reply does not fit
/// (the caller answers ERR_CHUNK). `chunks`: the Call's chunk lists.
///
/// - `Short`: the one-step Short header, then head, data and padding.
/// - `OneWrite`: the one-step header with the segment's length set to the
///   item's, then the reply without the item and its XDR padding.
/// - `Planned`: `plan::encode_reply_header`, then a Short plan's reduced
///   reply (a Long reply's goes by RDMA Write into the Reply chunk).
#[inline(always)]
fn encode_reply(
    bufs: &mut EngineBufs<'_>,
    r: &Request<'_>,
    grant: u32,
    chunks: Option<&header::ChunkLists<'_>>,
) -> Option<usize> {
    let (send_b, head_b) = (r.send_buf?, r.head_buf?);
    let out = bufs.bytes_mut(send_b);
    let head = bufs.bytes(head_b);
    let data = r.data_buf.map_or(&[][..], |b| bufs.bytes(b));
    let shape = &r.shape;
    match r.form {
        ReplyForm::None => None,
        ReplyForm::Short => {
            // No flags beyond RESPONSE, which the encoder sets in v2.
            let hdr_len = plan::encode_short_reply_header(r.vers, r.xid, grant, 0, out)?;
            // Sizes were checked against the send buffer (`short_reply_fits`):
            // head, data, then the data's XDR padding.
            let (head_len, data_len, pad) = (shape.head_len as usize, shape.data_len as usize, shape.pad() as usize);
            let mut at = hdr_len + head_len;
            out.get_mut(hdr_len..at)?.copy_from_slice(head.get(..head_len)?);
            if data_len > 0 {
                out.get_mut(at..at + data_len)?.copy_from_slice(data.get(..data_len)?);
                at += data_len;
            }
            out.get_mut(at..at + pad)?.fill(0);
            Some(at + pad)
        }
        ReplyForm::OneWrite { seg, .. } => {
            let item = *shape.items().first()?;
            let hdr_len = plan::encode_one_write_reply_header(r.vers, r.xid, grant, 0, seg, item.len, out)?;
            let item_end = item.offset as usize + item.len as usize + (item.len.wrapping_neg() & 3) as usize;
            let at = copy_stream_range(shape, head, data, 0, item.offset as usize, out, hdr_len)?;
            copy_stream_range(shape, head, data, item_end, shape.stream_len() as usize, out, at)
        }
        ReplyForm::Planned(ref plan) => {
            // The zero padding RDMA Writes into a Reply chunk take from the
            // end of the head buffer (`for_each_local`).
            let hb = bufs.bytes_mut(head_b);
            let n = hb.len();
            hb[n - HEAD_PAD_BYTES..].fill(0);
            let out = bufs.bytes_mut(send_b);
            let flags = if r.vers == RPCRDMA_VERSION_2 {
                RPCRDMA2_F_RESPONSE
            } else {
                0
            };
            let mut send_len = plan::encode_reply_header(plan, chunks?, r.xid, grant, flags, out).ok()?;
            if plan.kind == ReplyKind::Short {
                // The reduced reply after the header (at most the inline
                // threshold, which the plan checked).
                for rg in plan.reduced_ranges() {
                    let (s, e) = (rg.start as usize, rg.start as usize + rg.len as usize);
                    send_len = copy_stream_range(shape, head, data, s, e, out, send_len)?;
                }
            }
            Some(send_len)
        }
    }
}

/// Post one RDMA Write of bytes `start..start + len` of request `r`'s reply
/// stream (from pieces of its head and data buffers, [`gather_local`]) into
/// `target` on connection `conn_id`; `false` when it cannot be posted.
#[allow(clippy::too_many_arguments)]
#[inline]
fn post_write<F: Fabric>(
    fabric: &mut F,
    bufs: &EngineBufs<'_>,
    send_size: u32,
    r: &Request<'_>,
    conn_id: ConnId,
    wr_id: WrId,
    target: Segment,
    start: u32,
    len: u32,
) -> bool {
    let Some((pieces, n)) = gather_local(bufs, send_size, r, start, len) else {
        return false;
    };
    let mut wr = SendWr::new(wr_id, SendOp::RdmaWrite, pieces[0], target);
    wr.sge = pieces;
    wr.num_sge = n;
    wr.remote.length = len;
    fabric.post_send(conn_id, &wr).is_ok()
}

/// Send or Send with Invalidate for a reply to the Call `h` of version
/// `vers`: in v2 the Call's `rdma_inv_handle` when non-zero (draft s3.3);
/// in v1, when both peers set the RFC 8797 R flag (s4.1) and the provider
/// can (`remote_inv`), the first handle the Call advertised (Write chunks,
/// then the Reply chunk, then Read chunks); a plain Send otherwise.
#[inline(always)]
fn send_op(vers: u32, remote_inv: bool, h: &Header<'_>) -> SendOp {
    if vers == RPCRDMA_VERSION_2 {
        return match h.inv_handle() {
            0 => SendOp::Send,
            rkey => SendOp::SendWithInv { rkey },
        };
    }
    if vers != RPCRDMA_VERSION_1 || !remote_inv {
        return SendOp::Send;
    }
    let Some(chunks) = h.chunks() else { return SendOp::Send };
    chunks
        .writes
        .iter()
        .flat_map(|w| w.iter())
        .chain(chunks.reply.iter().flat_map(|r| r.iter()))
        .chain(chunks.reads.segments().map(|s| s.target))
        .map(|s| s.handle)
        .next()
        .map_or(SendOp::Send, |rkey| SendOp::SendWithInv { rkey })
}

/// Whether the reply `shape` to a chunk-free Call of version `vers` goes as
/// the one-step Short reply: header and whole reply within `inline_max`
/// bytes, its DDP items left inline. That is the Short plan `plan_reply`
/// would make against empty chunk lists (RFC 8166 s3.5.2; draft s4.3.2).
#[inline]
fn short_reply_fits(vers: u32, shape: &ReplyShape, inline_max: u32) -> bool {
    plan::chunk_free_header_len(vers).is_some_and(|hdr_len| {
        let len = shape.stream_len();
        hdr_len as u64 + len <= u64::from(inline_max) && plan::items_valid(shape.items(), len)
    })
}

/// The token of request slot `i` in generation `gen` ([`DeferToken`]).
fn defer_token(i: u32, gen: u32) -> DeferToken {
    DeferToken(u64::from(i) | u64::from(gen) << 32)
}

/// The local pieces of bytes `start..start + len` of request `r`'s reply
/// stream, as the gather list of one work request: `None` when the range is
/// empty or needs more than [`MAX_SGE`] pieces.
#[inline(always)]
fn gather_local(
    bufs: &EngineBufs<'_>,
    send_size: u32,
    r: &Request,
    start: u32,
    len: u32,
) -> Option<([LocalBuf; MAX_SGE], u8)> {
    let mut pieces = [LocalBuf::default(); MAX_SGE];
    let mut n = 0usize;
    let mut overflow = false;
    for_each_local(bufs, send_size, r, start, len, |lb, _| {
        if n < MAX_SGE {
            pieces[n] = lb;
            n += 1;
        } else {
            overflow = true;
        }
    });
    (!overflow && n > 0).then_some((pieces, n as u8))
}

/// Copy bytes `s..e` of a reply stream shaped `shape` (head ++ data ++ zero
/// padding) into `out` at `at`; returns the new end, `None` when `out` is too
/// short.
#[inline]
fn copy_stream_range(
    shape: &ReplyShape,
    head: &[u8],
    data: &[u8],
    s: usize,
    e: usize,
    out: &mut [u8],
    mut at_out: usize,
) -> Option<usize> {
    let (head_len, data_len) = (shape.head_len as usize, shape.data_len as usize);
    let mut at = s;
    while at < e {
        let (src, n): (&[u8], usize) = if at < head_len {
            let n = (head_len - at).min(e - at);
            (head.get(at..at + n)?, n)
        } else if at < head_len + data_len {
            let off = at - head_len;
            let n = (data_len - off).min(e - at);
            (data.get(off..off + n)?, n)
        } else {
            let n = (e - at).min(4);
            (&[0u8; 4][..n], n)
        };
        out.get_mut(at_out..at_out + n)?.copy_from_slice(src);
        at_out += n;
        at += n;
    }
    Some(at_out)
}

/// Map a byte range of request `r`'s unreduced reply stream (head ++ data ++
/// pad) onto local buffers, calling `f` for each contiguous piece.
fn for_each_local(
    bufs: &EngineBufs<'_>,
    send_size: u32,
    r: &Request,
    start: u32,
    len: u32,
    mut f: impl FnMut(LocalBuf, u32),
) {
    let head_len = r.shape.head_len;
    let data_len = r.shape.data_len;
    let mut at = start;
    let end = start + len;
    while at < end {
        if at < head_len {
            let n = (head_len - at).min(end - at);
            let b = r.head_buf.expect("head");
            let base = bufs.pool.offset(b).unwrap_or(0) as u64;
            f(
                LocalBuf {
                    region: b.region,
                    offset: base + at as u64,
                    len: n,
                },
                at - start,
            );
            at += n;
        } else if at < head_len + data_len {
            let off = at - head_len;
            let n = (data_len - off).min(end - at);
            let b = r.data_buf.expect("data");
            let base = bufs.pool.offset(b).unwrap_or(0) as u64;
            f(
                LocalBuf {
                    region: b.region,
                    offset: base + off as u64,
                    len: n,
                },
                at - start,
            );
            at += n;
        } else {
            // Padding: zero bytes; a Write into a Reply chunk needs them
            // (s3.5.3). They come from the zeroed tail of the head buffer.
            let n = end - at;
            let b = r.head_buf.expect("head");
            let base = bufs.pool.offset(b).unwrap_or(0) as u64;
            let pad_at = (send_size as usize - HEAD_PAD_BYTES) as u64;
            f(
                LocalBuf {
                    region: b.region,
                    offset: base + pad_at,
                    len: n.min(4),
                },
                at - start,
            );
            at += n.min(4);
        }
    }
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
    SendSlots,
}
