//! The requester (client) side of the transport engine, versions 1 and 2, for one
//! connection on one core. Used by the perf tool and the tests.
//!
//! - The caller encodes an RPC Call into a registered buffer from
//!   [`Requester::call_buf`] and submits it with its DDP-eligible items and reply
//!   needs (from an Upper-Layer Binding). The requester plans the Call
//!   (`proto::plan::plan_call`, RFC 8166 s3.5), exposes Read chunks straight from
//!   that buffer (its memory is registered once: persistent steering tags, so no
//!   per-call registration), provisions Write and Reply chunks from the pool, and
//!   sends.
//! - Replies are matched by XID in a fixed table; Write-chunk and Reply-chunk data
//!   land in the provisioned buffers (`proto::plan::reassemble_reply_provisioned`). The caller
//!   reads a [`ReplyView`] and releases it.
//! - Credits (RFC 8166 s3.3) and version negotiation (draft s7) gate sending: one
//!   message until the first grant; a v2 requester opens with RDMA2_CONNPROP and
//!   falls back to v1 after ERR_VERS.
//! - Persistent registrations must not be invalidated remotely, so this requester
//!   advertises no RFC 8797 R flag and sends `rdma_inv_handle` 0 (draft s3.3).
//! - An opt-in backchannel (RFC 8167; [`RequesterConfig::backward_credits`]):
//!   backward Calls from the responder are held for the user
//!   ([`Requester::backward_calls`]) and answered inline with
//!   [`Requester::reply_backward`]; the rules are in [`backward`].
//!
//! Every method is called from the core that owns the requester.

use std::sync::Arc;

use mempool::pool::{BufRef, ClassId, Mempool};
use proto::header::{
    self, Body, BodyOut, HeaderOut, Limits, Property, Segment, RDMA2_PROPID_RBSIZ, RPCRDMA_VERSION_1, RPCRDMA_VERSION_2,
};
use proto::negotiate::{self, PeerMemory, Phase, RequesterAction, VersionRange};
use proto::plan::{self, CallKind, CallParams, ReplyKind, ReplyLayout, ReplyNeeds};
use proto::private_data::{self, PrivateData as Rfc8797};
use proto::ulb::DdpItem;

use crate::bufs::{Class, EngineBufs};
use crate::credits::RequesterCredits;
use crate::fabric::*;
use crate::queue::Slab;
use crate::service::EngineError;
use crate::stages::{StageTimer, Stamp};

pub mod backward;
mod conn;
mod reply;
mod submit;

const TAG_RECV: u8 = 1;
const TAG_CALL: u8 = 2;
const TAG_CTRL: u8 = 3;
/// A backward-direction answer's Send; the index is its buffer.
const TAG_BACK: u8 = 4;

pub use super::{CM_POLL_INTERVAL, CQ_BATCH};

/// Requester configuration.
#[derive(Clone, Debug)]
pub struct RequesterConfig {
    pub versions: VersionRange,
    /// Calls wanted outstanding (the credit request).
    pub credits: u32,
    pub send_depth: u32,
    pub limits: Limits,
    /// Receive buffers (inline replies), send buffers (headers), data buffers
    /// (Calls, Write chunks, Reply chunks).
    pub recv_class: ClassId,
    pub send_class: ClassId,
    pub data_class: ClassId,
    /// Use DDP (Read and Write chunks) for eligible items.
    pub ddp: bool,
    /// Include XDR padding in Read chunks (RFC 8166 s3.4.5.2 SHOULD NOT; for tests).
    pub pad_read_chunks: bool,
    /// The backchannel (RFC 8167): backward Calls from the responder this
    /// requester takes at once (its backward credits, s4.1), with one
    /// receive posted for each beside the forward ones (s4.3.1). 0: off
    /// (a v2 RDMA2_CONNPROP then says RDMA2_RVREQSUP_NONE).
    pub backward_credits: u32,
}

/// Why a submit was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("not connected")]
    NotConnected,
    #[error("no credit or call slot available")]
    Busy,
    #[error("out of buffers")]
    NoBuffers,
    #[error("the call cannot be conveyed: {0}")]
    Plan(plan::PlanError),
    #[error("the call is larger than its buffer")]
    TooLarge,
    /// [`Requester::reply_backward`]: no backward Call with that XID is held.
    #[error("no backward Call with that XID is held")]
    UnknownXid,
}

/// How a Call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// A Reply arrived; read it with [`Requester::reply`].
    Reply,
    /// The responder answered RDMA_ERROR / RDMA2_ERROR.
    TransportErrorV1(header::V1Error),
    TransportErrorV2(header::V2Error),
    /// The reply could not be reassembled (malformed).
    BadReply,
    /// The connection was lost before a reply.
    ConnectionLost,
}

/// A finished Call, from [`Requester::poll_completion`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub id: CallId,
    pub xid: u32,
    pub outcome: CallOutcome,
}

/// Handle of a submitted Call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId(pub u32);

/// A registered buffer to encode a Call into.
#[derive(Debug)]
pub struct CallBuf<'p> {
    buf: BufRef,
    bytes: &'p mut [u8],
    /// When the buffer was taken: the origin of the "call posted" lap
    /// (stage timing only; zero-sized without the feature).
    t0: Stamp,
}

impl CallBuf<'_> {
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// A received Reply: its reduced inline (or Reply-chunk) payload and the data
/// each Write chunk received.
#[derive(Debug, Clone, Copy)]
pub struct ReplyView<'a> {
    pub vers: u32,
    pub xid: u32,
    pub kind: ReplyKind,
    /// The reduced reply (inline payload, or the Reply chunk's contents).
    pub reduced: &'a [u8],
    write_data: [&'a [u8]; plan::PLAN_WRITE_CHUNKS],
    write_count: usize,
}

impl<'a> ReplyView<'a> {
    /// Data written into Write chunk `k` (its length is what the responder
    /// reported, s3.4.6).
    pub fn write_chunk(&self, k: usize) -> Option<&'a [u8]> {
        (k < self.write_count).then(|| self.write_data[k])
    }
    /// Reassemble the whole Reply into `out`, given where each Write chunk's data
    /// goes in the reduced reply (see `proto::plan::ReplyLayout::pieces`).
    /// Returns the reply length.
    pub fn reassemble(&self, positions: &[u32], out: &mut [u8]) -> Option<usize> {
        let mut lens = [0u32; plan::PLAN_WRITE_CHUNKS];
        for (k, d) in self.write_data[..self.write_count].iter().enumerate() {
            lens[k] = d.len() as u32;
        }
        let layout = ReplyLayout {
            kind: self.kind,
            reduced_len: self.reduced.len() as u32,
            write_lens: plan::FixedVec::from_slice(&lens[..self.write_count])?,
        };
        let pieces = layout.pieces(positions).ok()?;
        let mut n = 0usize;
        for p in pieces.iter() {
            let src: &[u8] = match *p {
                plan::Piece::Inline { start, len } => self.reduced.get(start as usize..(start + len) as usize)?,
                plan::Piece::Chunk { index, .. } => self.write_data.get(index as usize)?,
            };
            out.get_mut(n..n + src.len())?.copy_from_slice(src);
            n += src.len();
            if let plan::Piece::Chunk { pad, .. } = *p {
                out.get_mut(n..n + pad as usize)?.fill(0);
                n += pad as usize;
            }
        }
        Some(n)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum CallState {
    #[default]
    Free,
    /// Sent; waiting for the Send completion and the Reply.
    InFlight,
    /// Finished; buffers held until the caller releases the call.
    Done,
}

#[derive(Clone, Copy, Debug, Default)]
struct Call {
    state: CallState,
    xid: u32,
    vers: u32,
    call_buf: Option<BufRef>,
    hdr_buf: Option<BufRef>,
    /// The Write chunks (one segment each, `write_count` of them) and the
    /// Reply chunk the Call advertised: its Reply is checked against them
    /// (`proto::plan::reassemble_reply_provisioned`).
    write_segs: [Segment; plan::PLAN_WRITE_CHUNKS],
    write_count: u8,
    reply_seg: Option<Segment>,
    write_bufs: [Option<BufRef>; plan::PLAN_WRITE_CHUNKS],
    reply_buf: Option<BufRef>,
    recv: Option<BufRef>,
    recv_len: u32,
    /// Where the Reply's RPC message starts in `recv` (its transport
    /// header's length), for a Short reply.
    payload_at: u32,
    send_done: bool,
    replied: bool,
    layout: Option<ReplyLayout>,
    outcome: Option<CallOutcome>,
    /// The handles of the chunk buffers exposed to the connection for this
    /// Call ([`Fabric::expose`]), hidden when the Call ends (RFC 8166 s8.1).
    windows: [u32; CALL_WINDOWS],
    window_count: u8,
}

/// Most chunk buffers one Call exposes: its Read chunks, Write chunks and
/// Reply chunk.
const CALL_WINDOWS: usize = plan::PLAN_READ_CHUNKS + plan::PLAN_WRITE_CHUNKS + 1;

impl Call {
    /// Whether a Reply with `xid` answers this Call: it is in flight under
    /// that XID.
    #[inline(always)]
    fn answers(&self, xid: u32) -> bool {
        self.xid == xid && self.state == CallState::InFlight
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequesterStats {
    pub calls: u64,
    pub replies: u64,
    pub short_calls: u64,
    pub chunked_calls: u64,
    pub long_calls: u64,
    pub transport_errors: u64,
    pub bad_replies: u64,
    pub unmatched: u64,
    /// RDMA_DONE, RDMA_MSGP and RDMA2_CONNPROP messages that answer no Call
    /// (ignored, RFC 8166 s4.6).
    pub ignored: u64,
    pub wc_errors: u64,
    pub fallbacks_to_v1: u64,
    /// Backward-direction Calls received and held for the user (RFC 8167).
    pub backward_calls: u64,
    /// Backward Replies sent ([`Requester::reply_backward`]).
    pub backward_replies: u64,
    /// Backward Calls refused with an error for carrying chunks (RFC 8167
    /// s5.1).
    pub backward_calls_refused: u64,
    /// Backward Calls beyond the backward credits (more held than
    /// `backward_credits`): dropped.
    pub backward_overruns: u64,
    /// Backward Calls received with the backchannel off: dropped.
    pub backward_unsupported: u64,
    /// Held backward Calls dropped with their connection.
    pub backward_lost: u64,
}

/// What holds a Call back ([`Requester::submit_block`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitBlock {
    /// The connection is not ready (connecting, negotiating, failed).
    Link,
    /// As many Calls outstanding as the responder granted credits.
    Credits,
    /// Every Call slot is in use (outstanding or not yet released).
    Slots,
}

/// Connection lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    Idle,
    Connecting,
    /// Connected; negotiating the version (CONNPROP or the first call in flight).
    Negotiating,
    Ready,
    Failed,
}

/// The requester engine for one connection.
pub struct Requester<'p, F: Fabric> {
    cfg: RequesterConfig,
    fabric: F,
    bufs: EngineBufs<'p>,
    cq: CqId,
    conn: Option<ConnId>,
    link: LinkState,
    neg: negotiate::Requester,
    credits: RequesterCredits,
    calls: Slab<Call>,
    /// Each call slot's header buffer (transport header and inline Call),
    /// taken from the pool on the slot's first use and kept until shutdown.
    slot_hdr: Box<[Option<BufRef>]>,
    next_xid: u32,
    /// log2 of the call slots (rounded up to a power of two).
    slot_bits: u32,
    /// Receives posted on the connection.
    recvs_posted: u32,
    /// Receives consumed by messages and not yet reposted: reposting waits
    /// until the next Call is sent or the next poll, off the path from a
    /// Reply to the next Call.
    recv_deficit: u32,
    recv_size: u32,
    send_size: u32,
    data_size: u32,
    /// The inline thresholds, as `neg` computes them from our buffer sizes,
    /// what the responder advertised (RFC 8797 private data, RDMA2_CONNPROP)
    /// and the version's default (RFC 8166 s3.3.3; draft -09 s4.2.1):
    /// client-to-server (a Call larger goes in chunks) and server-to-client
    /// (a Reply that may be larger needs a Reply chunk). Refreshed by
    /// [`Requester::refresh_thresholds`] whenever `neg` learns something.
    call_inline_max: u32,
    reply_inline_max: u32,
    vers: u32,
    connprop_xid: Option<u32>,
    connprop_buf: Option<BufRef>,
    completions: std::collections::VecDeque<Completed>,
    /// Backward Calls held for the user (at most `backward_credits`), and
    /// backward answers whose Send has not completed.
    bc_held: Vec<backward::HeldCall>,
    bc_sends_out: u32,
    stats: RequesterStats,
    wcs: [Completion; CQ_BATCH],
    /// Stage timing ([`crate::stages`]): the laps; the origin of the Call
    /// being submitted; when each slot's Call was posted; when the current
    /// batch of completions was polled.
    stages: StageTimer,
    submit_t0: Stamp,
    posted_at: Box<[Stamp]>,
    polled_at: Stamp,
    cm_tick: u32,
}

/// Stage-timing laps ([`crate::stages`], feature `stage-timing`): the Call
/// posted, from the moment its buffer was taken (encoding and submit); its
/// Reply seen, from the Call's post (fabric and responder); the Reply matched
/// and completed, from the poll that delivered it.
pub const LAPS: [&str; 3] = ["call posted", "reply seen", "reply completed"];
pub const LAP_CALL_POSTED: usize = 0;
pub const LAP_REPLY_SEEN: usize = 1;
pub const LAP_REPLY_COMPLETED: usize = 2;

impl<F: Fabric> std::fmt::Debug for Requester<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("link", &self.link)
            .field("vers", &self.vers)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Errors setting a requester up.
pub type RequesterError = crate::service::EngineError;

impl<'p, F: Fabric> Requester<'p, F> {
    pub fn new(
        cfg: RequesterConfig,
        mut fabric: F,
        pool: &'p Mempool,
        regions: &[Arc<mempool::region::Region>],
        core: usize,
    ) -> Result<Self, RequesterError> {
        let size = |c: ClassId| pool.class_info(c).map(|i| i.buf_size as u32);
        let (Some(recv_size), Some(send_size), Some(data_size)) =
            (size(cfg.recv_class), size(cfg.send_class), size(cfg.data_class))
        else {
            return Err(EngineError::Config("unknown pool class".into()));
        };
        // Exposable: each Call's chunk buffers are exposed to the
        // connection while it is in flight, and nothing else (RFC 8166 s8.1).
        for r in regions {
            fabric.register_region(r, RegionAccess::Exposable)?;
        }
        let cq = fabric.create_cq(cfg.credits * 2 + cfg.send_depth + 8 + 2 * cfg.backward_credits)?;
        let ncfg = negotiate::Config::new(cfg.versions, send_size, recv_size)
            .map_err(|e| EngineError::Config(e.to_string()))?;
        let slots = (cfg.credits.max(1) as usize).next_power_of_two();
        Ok(Requester {
            bufs: EngineBufs::new(pool, cfg.recv_class, cfg.send_class, cfg.data_class, core)?,
            neg: negotiate::Requester::new(ncfg, PeerMemory::UNKNOWN),
            credits: RequesterCredits::new(cfg.credits),
            calls: Slab::with_capacity(slots),
            slot_hdr: vec![None; slots].into_boxed_slice(),
            completions: std::collections::VecDeque::with_capacity(slots + 1),
            bc_held: Vec::with_capacity(cfg.backward_credits as usize),
            bc_sends_out: 0,
            cfg,
            fabric,
            cq,
            conn: None,
            link: LinkState::Idle,
            next_xid: 0x1000,
            slot_bits: slots.trailing_zeros(),
            recvs_posted: 0,
            recv_deficit: 0,
            recv_size,
            send_size,
            data_size,
            call_inline_max: negotiate::NEGOTIATION_INLINE_BYTES,
            reply_inline_max: negotiate::NEGOTIATION_INLINE_BYTES,
            vers: RPCRDMA_VERSION_1,
            connprop_xid: None,
            connprop_buf: None,
            stats: RequesterStats::default(),
            wcs: [Completion::EMPTY; CQ_BATCH],
            stages: StageTimer::new("requester", &LAPS),
            submit_t0: Stamp::default(),
            posted_at: vec![Stamp::default(); slots].into_boxed_slice(),
            polled_at: Stamp::default(),
            cm_tick: 0,
        })
    }

    /// The stage-timing laps ([`LAPS`]; empty without the `stage-timing`
    /// feature).
    pub fn stages(&self) -> &StageTimer {
        &self.stages
    }

    pub fn stats(&self) -> RequesterStats {
        self.stats
    }

    pub fn link(&self) -> LinkState {
        self.link
    }

    /// The negotiated RPC-over-RDMA version (valid once [`LinkState::Ready`]).
    pub fn version(&self) -> u32 {
        self.vers
    }

    pub fn fabric(&mut self) -> &mut F {
        &mut self.fabric
    }

    /// Why [`Requester::can_submit`] is false now: `Some(SubmitBlock)`, or
    /// `None` when a Call may be submitted.
    pub fn submit_block(&self) -> Option<SubmitBlock> {
        if !matches!(self.link, LinkState::Ready) {
            Some(SubmitBlock::Link)
        } else if !self.credits.can_send() {
            Some(SubmitBlock::Credits)
        } else if self.calls.available() == 0 {
            Some(SubmitBlock::Slots)
        } else {
            None
        }
    }

    /// Calls outstanding or finished-but-unreleased.
    pub fn calls_held(&self) -> usize {
        self.calls.in_use()
    }

    /// Start connecting to `addr`. Receives are posted at once.
    pub fn connect(&mut self, addr: &str) -> Result<(), RequesterError> {
        let ours = Rfc8797::new(false, self.send_size, self.recv_size);
        let mut pd = [0u8; 8];
        let n = ours.encode(&mut pd).unwrap_or(0);
        let qp = QpConfig {
            cq: self.cq,
            srq: None,
            send_depth: self.cfg.send_depth + self.cfg.backward_credits,
            recv_depth: self.cfg.credits + 2 + self.cfg.backward_credits,
            ..QpConfig::default()
        };
        let id = self.fabric.connect(addr, &qp, &pd[..n])?;
        self.conn = Some(id);
        self.link = LinkState::Connecting;
        // Receives: one per credit, plus one for an unsolicited message,
        // plus one per backward credit (RFC 8167 s4.3.1).
        for _ in 0..self.cfg.credits + 1 + self.cfg.backward_credits {
            if !self.post_recv() {
                break;
            }
        }
        Ok(())
    }

    /// Repost the receives messages consumed (while the connection is up).
    fn refill_recvs(&mut self) {
        if matches!(self.link, LinkState::Idle | LinkState::Failed) {
            return;
        }
        while self.recv_deficit > 0 && self.post_recv() {
            self.recv_deficit -= 1;
        }
    }

    fn post_recv(&mut self) -> bool {
        let Some(conn) = self.conn else { return false };
        let Some(b) = self.bufs.get(Class::Recv) else {
            return false;
        };
        let wr = RecvWr {
            wr_id: WrId::new(TAG_RECV, b.to_u64()),
            buf: self.bufs.local(b, self.recv_size),
        };
        if self.fabric.post_recv(conn, &wr).is_err() {
            self.bufs.put(b);
            return false;
        }
        self.recvs_posted += 1;
        true
    }

    /// Expose `len` bytes at `at` of buffer `b` to the connection for
    /// `access`, as a chunk of a Call about to be sent (RFC 8166 s8.1): the
    /// segment to advertise, or `None` when the fabric cannot (no
    /// connection, no window free).
    fn expose(&mut self, b: BufRef, at: u32, len: u32, access: Access) -> Option<Segment> {
        let conn = self.conn?;
        let offset = self.bufs.pool.offset(b)? as u64 + at as u64;
        let buf = LocalBuf {
            region: b.region,
            offset,
            len,
        };
        self.fabric.expose(conn, buf, access).ok()
    }

    /// Hide the given exposed handles (a Call that ended, or one whose
    /// submit failed after exposing them).
    fn hide(&mut self, handles: &[u32]) {
        let Some(conn) = self.conn else { return };
        for &h in handles {
            self.fabric.hide(conn, h);
        }
    }

    /// Call slot `i` ended (answered, failed or released): its chunk
    /// buffers are no longer exposed. Once per Call.
    #[inline]
    fn hide_call(&mut self, i: u32) {
        let Some(c) = self.calls.get_mut(i) else { return };
        if c.window_count > 0 {
            self.hide_windows(i);
        }
    }

    /// [`Requester::hide_call`] of a Call that exposed chunk buffers: out of
    /// line, so a chunk-free Call pays only the count's test.
    #[cold]
    #[inline(never)]
    pub(super) fn hide_windows(&mut self, i: u32) {
        let Some(c) = self.calls.get_mut(i) else { return };
        let n = std::mem::take(&mut c.window_count) as usize;
        let w = c.windows;
        self.hide(&w[..n]);
    }

    /// Take the inline thresholds from the negotiation state (its one
    /// source): after the connection is established (RFC 8797 sizes), a
    /// CONNPROP answer, and each negotiation step (the fixed version's
    /// defaults). Capped at our own send and receive buffers.
    fn refresh_thresholds(&mut self) {
        self.call_inline_max = self.neg.call_inline_threshold_bytes().min(self.send_size);
        self.reply_inline_max = self.neg.reply_inline_threshold_bytes().min(self.recv_size);
    }

    /// Ready to submit a Call now (connected, negotiated or negotiating with no
    /// message outstanding, a credit and a slot free).
    pub fn can_submit(&self) -> bool {
        matches!(self.link, LinkState::Ready) && self.credits.can_send() && self.calls.available() > 0
    }

    /// A registered buffer to encode a Call into (data-class size).
    pub fn call_buf(&mut self) -> Option<CallBuf<'p>> {
        let t0 = StageTimer::now();
        let b = self.bufs.get(Class::Data)?;
        Some(CallBuf {
            buf: b,
            bytes: self.bufs.bytes_mut(b),
            t0,
        })
    }

    /// Give back an unused call buffer.
    pub fn discard(&mut self, cb: CallBuf<'p>) {
        self.bufs.put(cb.buf);
    }

    /// The next finished Call, if any.
    pub fn poll_completion(&mut self) -> Option<Completed> {
        self.completions.pop_front()
    }

    /// The Reply of a finished Call (outcome [`CallOutcome::Reply`]).
    pub fn reply(&self, id: CallId) -> Option<ReplyView<'p>> {
        let c = self.calls.get(id.0)?;
        if c.outcome != Some(CallOutcome::Reply) {
            return None;
        }
        let layout = c.layout?;
        let reduced = match layout.kind {
            ReplyKind::Short => {
                // Decoded and checked when it arrived (`handle_recv`).
                let recv = self.bufs.bytes(c.recv?);
                recv.get(c.payload_at as usize..c.recv_len as usize)?
            }
            ReplyKind::Long => &self.bufs.bytes(c.reply_buf?)[..layout.reduced_len as usize],
        };
        let mut write_data: [&[u8]; plan::PLAN_WRITE_CHUNKS] = [&[]; plan::PLAN_WRITE_CHUNKS];
        for (k, &n) in layout.write_lens.iter().enumerate() {
            write_data[k] = &self.bufs.bytes(c.write_bufs[k]?)[..n as usize];
        }
        Some(ReplyView {
            vers: c.vers,
            xid: c.xid,
            kind: layout.kind,
            reduced,
            write_data,
            write_count: layout.write_lens.len(),
        })
    }

    /// Release a finished Call and all its buffers.
    pub fn release(&mut self, id: CallId) {
        if self.calls.get(id.0).is_some_and(|c| c.state == CallState::Done) {
            self.free_call(id.0);
        }
    }

    fn free_call(&mut self, i: u32) {
        let Some(c) = self.calls.get_mut(i) else { return };
        if c.window_count > 0 {
            // A Call that ended without its Reply (failed or released).
            self.hide_windows(i);
        }
        let Some(c) = self.calls.get_mut(i) else { return };
        // The header buffer stays with the slot (`slot_hdr`).
        c.hdr_buf = None;
        let held = [c.call_buf.take(), c.recv.take(), c.reply_buf.take()];
        let writes = c.write_bufs[0].is_some().then_some(c.write_bufs);
        c.state = CallState::Free;
        // `submit` writes the whole slot when it reuses it.
        self.calls.free(i);
        self.bufs.put_all(held);
        if let Some(w) = writes {
            self.bufs.put_all(w);
        }
    }

    /// One turn: connection events, completions, negotiation.
    pub fn poll(&mut self) -> usize {
        let mut work = 0;
        if self.recv_deficit > 0 {
            self.refill_recvs();
        }
        work += super::poll_cm(self, false);
        work += super::poll_completions(self);
        // Doorbell batching: what this turn posted goes to the device now.
        self.fabric.flush();
        work
    }

    /// Disconnect and return every buffer (calls, receives). Returns the calls
    /// still held afterwards (0 when clean).
    pub fn shutdown(&mut self, max_polls: usize) -> usize {
        if let Some(c) = self.conn {
            let _ = self.fabric.disconnect(c);
        }
        for _ in 0..max_polls {
            self.poll();
            if self.link == LinkState::Failed && self.recvs_posted == 0 && self.bc_sends_out == 0 {
                break;
            }
        }
        while self.completions.pop_front().is_some() {}
        self.drop_backward_calls();
        let ids: Vec<u32> = self.calls.used_indices().collect();
        for i in ids {
            self.free_call(i);
        }
        for k in 0..self.slot_hdr.len() {
            if let Some(b) = self.slot_hdr[k].take() {
                self.bufs.put(b);
            }
        }
        self.bufs.drain();
        self.calls.in_use()
    }

    /// Receives still posted (for accounting tests).
    pub fn recvs_posted(&self) -> u32 {
        self.recvs_posted
    }
}

super::impl_poll_loop!(Requester<'_, F>, [F: Fabric]);
