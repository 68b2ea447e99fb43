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

const TAG_RECV: u8 = 1;
const TAG_CALL: u8 = 2;
const TAG_CTRL: u8 = 3;

/// Completions polled per `poll_cq` call.
pub const CQ_BATCH: usize = 32;

/// Connection-manager events are control plane: they are polled once every this
/// many turns of the loop (and on the first), not on every turn, because a
/// provider's CM poll may cost syscalls (SPDK polls its CM channel on a separate,
/// slower poller for the same reason).
pub const CM_POLL_INTERVAL: u32 = 256;

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
}

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
    pub wc_errors: u64,
    pub fallbacks_to_v1: u64,
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
    rkeys: Vec<u32>,
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
    /// The peer's RFC 8797 / CONNPROP receive size: our call inline threshold.
    call_inline_max: u32,
    vers: u32,
    connprop_xid: Option<u32>,
    connprop_buf: Option<BufRef>,
    completions: std::collections::VecDeque<Completed>,
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
        let mut rkeys = Vec::new();
        for r in regions {
            let k = fabric.register_region(r)?;
            let id = r.id() as usize;
            if rkeys.len() <= id {
                rkeys.resize(id + 1, 0);
            }
            rkeys[id] = k.rkey;
        }
        let cq = fabric.create_cq(cfg.credits * 2 + cfg.send_depth + 8)?;
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
            cfg,
            fabric,
            rkeys,
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
            call_inline_max: 1024,
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
            send_depth: self.cfg.send_depth,
            recv_depth: self.cfg.credits + 2,
            ..QpConfig::default()
        };
        let id = self.fabric.connect(addr, &qp, &pd[..n])?;
        self.conn = Some(id);
        self.link = LinkState::Connecting;
        // Receives: one per credit, plus one for an unsolicited message.
        for _ in 0..self.cfg.credits + 1 {
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

    fn remote(&self, b: BufRef, at: u32, len: u32) -> Segment {
        let off = self.bufs.pool.offset(b).unwrap_or(0) as u64 + at as u64;
        Segment {
            handle: self.rkeys.get(b.region as usize).copied().unwrap_or(0),
            length: len,
            offset: self.fabric.remote_addr(b.region, off).unwrap_or(0),
        }
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

    /// Submit the Call of `len` bytes in `cb` whose DDP-eligible items are `items`
    /// and whose reply needs are `needs`. On error the buffer is returned to the
    /// caller inside the error tuple.
    pub fn submit(
        &mut self,
        mut cb: CallBuf<'p>,
        len: usize,
        items: &[DdpItem],
        needs: &ReplyNeeds,
    ) -> Result<CallId, (SubmitError, CallBuf<'p>)> {
        if self.link != LinkState::Ready {
            return Err((SubmitError::NotConnected, cb));
        }
        self.submit_t0 = cb.t0;
        if !self.credits.can_send() || self.calls.available() == 0 {
            return Err((SubmitError::Busy, cb));
        }
        if len > cb.len() || len < 4 {
            return Err((SubmitError::TooLarge, cb));
        }
        if self.neg.phase() == Phase::Negotiating {
            // The first v1 Call is the negotiation message (draft s7); the
            // negotiator tracks it (it may already be marked in flight).
            let _ = self.neg.try_send();
        }
        let params = CallParams {
            vers: self.vers,
            call_inline_max: self.call_inline_max.min(self.send_size),
            reply_inline_max: self.recv_size,
            ddp: self.cfg.ddp,
            max_segments_per_chunk: 1,
            pad_read_chunks: self.cfg.pad_read_chunks,
        };
        if plan::is_chunk_free_call(len, items, needs, &params) {
            return self.submit_chunk_free(cb, len);
        }
        if let Some(wlen) = plan::one_write_call(len, items, needs, &params) {
            return self.submit_one_write(cb, len, wlen);
        }
        let plan = match plan::plan_call(len, items, needs, &params) {
            Ok(p) => p,
            Err(e) => return Err((SubmitError::Plan(e), cb)),
        };
        let Some(i) = self.calls.alloc() else {
            unreachable!("availability checked above");
        };
        // Buffers: the slot's header buffer, one per Write chunk, one for the
        // Reply chunk.
        let Some(hdr) = self.slot_hdr_buf(i) else {
            self.calls.free(i);
            return Err((SubmitError::NoBuffers, cb));
        };
        let mut wbufs = [None; plan::PLAN_WRITE_CHUNKS];
        let mut ok = true;
        for (k, &wlen) in plan.write_chunks.iter().enumerate() {
            if wlen > self.data_size {
                ok = false;
                break;
            }
            match self.bufs.get(Class::Data) {
                Some(b) => wbufs[k] = Some(b),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        let rbuf = match plan.reply_chunk {
            Some(rlen) if ok && rlen <= self.data_size => match self.bufs.get(Class::Data) {
                Some(b) => Some(b),
                None => {
                    ok = false;
                    None
                }
            },
            Some(_) => {
                ok = false;
                None
            }
            None => None,
        };
        if !ok {
            self.calls.free(i);
            self.bufs.put_all([rbuf]);
            self.bufs.put_all(wbufs);
            return Err((SubmitError::NoBuffers, cb));
        }
        let xid = self.stamp_xid(i, &mut cb);
        // Segments: one per chunk, straight from registered buffers.
        let mut read_segs = [[Segment::default(); 1]; plan::PLAN_READ_CHUNKS];
        for (k, r) in plan.reads.iter().enumerate() {
            read_segs[k][0] = self.remote(cb.buf, r.range.start, r.range.len);
        }
        let read_refs: [&[Segment]; plan::PLAN_READ_CHUNKS] = std::array::from_fn(|k| &read_segs[k][..]);
        let mut write_segs = [[Segment::default(); 1]; plan::PLAN_WRITE_CHUNKS];
        for (k, &wlen) in plan.write_chunks.iter().enumerate() {
            write_segs[k][0] = self.remote(wbufs[k].expect("allocated"), 0, wlen);
        }
        let write_refs: [&[Segment]; plan::PLAN_WRITE_CHUNKS] = std::array::from_fn(|k| &write_segs[k][..]);
        let reply_seg = [plan
            .reply_chunk
            .map_or(Segment::default(), |l| self.remote(rbuf.expect("reply buf"), 0, l))];
        let out = self.bufs.bytes_mut(hdr);
        let hlen = match plan::encode_call_header(
            &plan,
            xid,
            self.credits.request(),
            0,
            &read_refs[..plan.reads.len()],
            &write_refs[..plan.write_chunks.len()],
            plan.reply_chunk.map(|_| &reply_seg[..]),
            out,
        ) {
            Ok(n) => n,
            Err(e) => {
                self.calls.free(i);
                self.bufs.put_all([rbuf]);
                self.bufs.put_all(wbufs);
                return Err((SubmitError::Plan(e), cb));
            }
        };
        // Inline part of the Call after the header (copied: at most the inline
        // threshold, which the plan checked).
        let mut send_len = hlen;
        for r in plan.inline.iter() {
            let src = &cb.bytes[r.range()];
            out[send_len..send_len + src.len()].copy_from_slice(src);
            send_len += src.len();
        }
        if !self.post_call(i, hdr, send_len) {
            self.calls.free(i);
            self.bufs.put_all([rbuf]);
            self.bufs.put_all(wbufs);
            return Err((SubmitError::NotConnected, cb));
        }
        let sent = self.credits.on_send();
        debug_assert!(sent);
        *self.calls.get_mut(i).expect("allocated") = Call {
            state: CallState::InFlight,
            xid,
            vers: self.vers,
            call_buf: Some(cb.buf),
            hdr_buf: Some(hdr),
            write_segs: std::array::from_fn(|k| write_segs[k][0]),
            write_count: plan.write_chunks.len() as u8,
            reply_seg: plan.reply_chunk.map(|_| reply_seg[0]),
            write_bufs: wbufs,
            reply_buf: rbuf,
            ..Call::default()
        };
        Ok(self.finish_submit(i, plan.kind))
    }

    /// What every submit ends with, once its Send is posted, its credit
    /// taken and call slot `i` holds the Call: it is counted by its `kind`,
    /// and the receives are reposted while the responder works.
    #[inline(always)]
    fn finish_submit(&mut self, i: u32, kind: CallKind) -> CallId {
        self.stats.calls += 1;
        match kind {
            CallKind::Short => self.stats.short_calls += 1,
            CallKind::Chunked => self.stats.chunked_calls += 1,
            CallKind::Long => self.stats.long_calls += 1,
        }
        self.refill_recvs();
        CallId(i)
    }

    /// Send call slot `i`'s header buffer `hdr` (`send_len` bytes: transport
    /// header and inline Call), first making sure a receive waits for every
    /// Reply in flight. `false` when the fabric refused the Send.
    #[inline]
    fn post_call(&mut self, i: u32, hdr: BufRef, send_len: usize) -> bool {
        let Some(conn) = self.conn else { return false };
        let wr = SendWr::new(
            WrId::new(TAG_CALL, i as u64),
            SendOp::Send,
            self.bufs.local(hdr, send_len as u32),
            Segment::default(),
        );
        // Every Call in flight needs a receive posted for its Reply.
        if self.recvs_posted <= self.credits.in_flight() {
            self.refill_recvs();
        }
        let ok = self.fabric.post_send(conn, &wr).is_ok();
        self.stages.lap(LAP_CALL_POSTED, self.submit_t0);
        if let Some(p) = self.posted_at.get_mut(i as usize) {
            *p = StageTimer::now();
        }
        ok
    }

    /// The XID of a new Call in slot `i`, written into its first word. The
    /// XID carries the slot in its low bits, so a Reply finds its Call with
    /// an array index (checked against the stored XID); it must equal the
    /// transport header's (RFC 8166 s4.2.1).
    #[inline]
    fn stamp_xid(&mut self, i: u32, cb: &mut CallBuf<'p>) -> u32 {
        let xid = ((self.next_xid << self.slot_bits) | i) & 0x7fff_ffff;
        self.next_xid = self.next_xid.wrapping_add(1);
        cb.bytes[..4].copy_from_slice(&xid.to_be_bytes());
        xid
    }

    /// The slot's header buffer (transport header and inline Call), taken
    /// from the pool on the slot's first use.
    #[inline]
    fn slot_hdr_buf(&mut self, i: u32) -> Option<BufRef> {
        if let Some(b) = self.slot_hdr[i as usize] {
            return Some(b);
        }
        let b = self.bufs.get(Class::Send)?;
        self.slot_hdr[i as usize] = Some(b);
        Some(b)
    }

    /// What the one-step submits share: a call slot and its header buffer,
    /// the XID stamped into the Call, the transport header `encode(xid,
    /// credits, segment of the Write chunk, out)` writes followed by the Call,
    /// the Send posted and the credit taken. `write_len`: also provision one
    /// data buffer of that many bytes as the one Write chunk. On failure
    /// nothing is held. Returns the slot, the XID, the header buffer and the
    /// Write chunk (buffer, segment) when one was provisioned.
    #[allow(clippy::type_complexity)]
    #[inline(always)]
    fn post_one_step(
        &mut self,
        cb: &mut CallBuf<'p>,
        len: usize,
        write_len: Option<u32>,
        encode: impl FnOnce(u32, u32, Segment, &mut [u8]) -> Option<usize>,
    ) -> Result<(u32, u32, BufRef, Option<(BufRef, Segment)>), SubmitError> {
        if write_len.is_some_and(|w| w > self.data_size) {
            return Err(SubmitError::NoBuffers);
        }
        let i = self.calls.alloc().ok_or(SubmitError::Busy)?;
        let Some(hdr) = self.slot_hdr_buf(i) else {
            self.calls.free(i);
            return Err(SubmitError::NoBuffers);
        };
        let write = match write_len {
            Some(w) => match self.bufs.get(Class::Data) {
                Some(b) => Some((b, self.remote(b, 0, w))),
                None => {
                    self.calls.free(i);
                    return Err(SubmitError::NoBuffers);
                }
            },
            None => None,
        };
        let xid = self.stamp_xid(i, cb);
        let out = self.bufs.bytes_mut(hdr);
        let seg = write.map_or(Segment::default(), |(_, s)| s);
        // The caller's check (`is_chunk_free_call`, `one_write_call`) put
        // header + Call within the inline threshold, which is at most our
        // send buffer's size.
        let sent = encode(xid, self.credits.request(), seg, out).and_then(|h| {
            out.get_mut(h..h + len)?.copy_from_slice(&cb.bytes[..len]);
            Some(h + len)
        });
        let err = match sent {
            None => Some(SubmitError::TooLarge),
            Some(n) if !self.post_call(i, hdr, n) => Some(SubmitError::NotConnected),
            Some(_) => None,
        };
        if let Some(e) = err {
            self.calls.free(i);
            if let Some((b, _)) = write {
                self.bufs.put(b);
            }
            return Err(e);
        }
        let ok = self.credits.on_send();
        debug_assert!(ok);
        Ok((i, xid, hdr, write))
    }

    /// [`Requester::submit`] of a Call that goes as a Short message without
    /// any chunk ([`plan::is_chunk_free_call`], checked by the caller): the
    /// one-step header, the Call after it, one Send. Nothing to provision,
    /// so no plan is built; the Reply is checked against "no chunks
    /// advertised" like any other.
    fn submit_chunk_free(&mut self, mut cb: CallBuf<'p>, len: usize) -> Result<CallId, (SubmitError, CallBuf<'p>)> {
        let vers = self.vers;
        let (i, xid, hdr, _) = match self.post_one_step(&mut cb, len, None, |xid, credits, _, out| {
            plan::encode_chunk_free_call_header(vers, xid, credits, out)
        }) {
            Ok(v) => v,
            Err(e) => return Err((e, cb)),
        };
        let c = self.calls.get_mut(i).expect("allocated");
        // A fresh slot; `write_segs` (read only up to `write_count`, 0 here)
        // is left as it was rather than rewritten.
        *c = Call {
            state: CallState::InFlight,
            xid,
            vers,
            call_buf: Some(cb.buf),
            hdr_buf: Some(hdr),
            write_segs: c.write_segs,
            ..Call::default()
        };
        Ok(self.finish_submit(i, CallKind::Short))
    }

    /// [`Requester::submit`] of a Call of the READ shape
    /// ([`plan::one_write_call`], checked by the caller): one data buffer
    /// provisioned as the one Write chunk of `wlen` bytes, the one-step header,
    /// the Call after it, one Send. No plan is built; the Reply is checked
    /// against the chunk like any other.
    fn submit_one_write(
        &mut self,
        mut cb: CallBuf<'p>,
        len: usize,
        wlen: u32,
    ) -> Result<CallId, (SubmitError, CallBuf<'p>)> {
        let vers = self.vers;
        let (i, xid, hdr, write) = match self.post_one_step(&mut cb, len, Some(wlen), |xid, credits, seg, out| {
            plan::encode_one_write_call_header(vers, xid, credits, seg, out)
        }) {
            Ok(v) => v,
            Err(e) => return Err((e, cb)),
        };
        let Some((wbuf, seg)) = write else {
            unreachable!("a Write chunk was asked for");
        };
        let c = self.calls.get_mut(i).expect("allocated");
        let mut write_segs = c.write_segs;
        write_segs[0] = seg;
        let mut write_bufs = [None; plan::PLAN_WRITE_CHUNKS];
        write_bufs[0] = Some(wbuf);
        *c = Call {
            state: CallState::InFlight,
            xid,
            vers,
            call_buf: Some(cb.buf),
            hdr_buf: Some(hdr),
            write_segs,
            write_count: 1,
            write_bufs,
            ..Call::default()
        };
        Ok(self.finish_submit(i, CallKind::Short))
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
        let cm_due = self.cm_tick == 0;
        self.cm_tick = (self.cm_tick + 1) % CM_POLL_INTERVAL;
        while let Some(ev) = if cm_due { self.fabric.poll_cm() } else { None } {
            self.handle_cm(ev);
            work += 1;
        }
        let n = self.fabric.poll_cq(self.cq, &mut self.wcs);
        self.polled_at = StageTimer::now();
        for k in 0..n {
            let wc = self.wcs[k];
            self.handle_completion(wc);
        }
        work + n
    }

    fn handle_cm(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::Established { conn, private_data } if Some(conn) == self.conn => {
                let peer = private_data::decode(private_data.as_bytes());
                self.neg.apply_private_data(&peer);
                let ours = Rfc8797::new(false, self.send_size, self.recv_size);
                self.call_inline_max = private_data::client_to_server_threshold_bytes(&ours, &peer.data());
                self.link = LinkState::Negotiating;
                self.start_negotiation();
            }
            CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn } if Some(conn) == self.conn => {
                self.link = LinkState::Failed;
                self.fail_all();
            }
            CmEvent::Disconnected { conn } if Some(conn) == self.conn => {
                self.link = LinkState::Failed;
                self.fail_all();
            }
            _ => {}
        }
    }

    /// The first message: a v2 requester sends RDMA2_CONNPROP (draft s5.3.4) and
    /// learns the version from the answer; a v1-only requester is ready at once
    /// and its first Call negotiates.
    fn start_negotiation(&mut self) {
        match self.neg.try_send() {
            Ok(p) if p.vers == RPCRDMA_VERSION_2 => self.send_connprop(p.vers),
            Ok(p) => {
                // v1: nothing to exchange before Calls; the credit limit of one
                // until the first reply (draft s7) applies through the credits.
                self.vers = p.vers;
                self.link = LinkState::Ready;
            }
            Err(_) => self.link = LinkState::Failed,
        }
    }

    fn send_connprop(&mut self, vers: u32) {
        let Some(conn) = self.conn else { return };
        let Some(b) = self.bufs.get(Class::Send) else {
            self.link = LinkState::Failed;
            return;
        };
        // Tagged so it never equals a Call's XID (those keep bit 31 clear).
        let xid = 0x8000_0000 | self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let rb = self.recv_size.to_be_bytes();
        let props = [Property {
            id: RDMA2_PROPID_RBSIZ,
            data: &rb,
        }];
        let h = HeaderOut {
            xid,
            vers,
            credits: self.credits.request(),
            flags: 0,
            body: BodyOut::ConnProp(&props),
        };
        let out = self.bufs.bytes_mut(b);
        let Ok(n) = header::encode(&h, out) else {
            self.bufs.put(b);
            self.link = LinkState::Failed;
            return;
        };
        let wr = SendWr::new(
            WrId::new(TAG_CTRL, 0),
            SendOp::Send,
            self.bufs.local(b, n as u32),
            Segment::default(),
        );
        if self.fabric.post_send(conn, &wr).is_err() {
            self.bufs.put(b);
            self.link = LinkState::Failed;
            return;
        }
        self.credits.on_send();
        self.connprop_xid = Some(xid);
        self.connprop_buf = Some(b);
    }

    fn handle_completion(&mut self, wc: Completion) {
        match wc.wr_id.tag() {
            TAG_RECV => self.handle_recv(wc),
            TAG_CALL => {
                let i = wc.wr_id.index() as u32;
                if !wc.status.is_success() {
                    self.on_wc_error(wc.status);
                }
                if let Some(c) = self.calls.get_mut(i) {
                    c.send_done = true;
                    if c.replied && c.state == CallState::InFlight {
                        c.state = CallState::Done;
                    }
                }
            }
            // The CONNPROP buffer is freed when its answer arrives or the link fails.
            TAG_CTRL if !wc.status.is_success() => self.on_wc_error(wc.status),
            _ => {}
        }
    }

    fn on_wc_error(&mut self, status: WcStatus) {
        if status != WcStatus::Flushed {
            self.stats.wc_errors += 1;
        }
        if let Some(c) = self.conn {
            let _ = self.fabric.disconnect(c);
        }
        if self.link != LinkState::Failed {
            self.link = LinkState::Failed;
            self.fail_all();
        }
    }

    /// The connection is gone: every Call in flight ends with ConnectionLost.
    fn fail_all(&mut self) {
        let ids: Vec<u32> = self.calls.used_indices().collect();
        for i in ids {
            let c = self.calls.get_mut(i).expect("used");
            if c.state == CallState::InFlight {
                c.state = CallState::Done;
                c.outcome = Some(CallOutcome::ConnectionLost);
                let xid = c.xid;
                self.credits.on_abandon();
                self.completions.push_back(Completed {
                    id: CallId(i),
                    xid,
                    outcome: CallOutcome::ConnectionLost,
                });
            }
        }
        if let Some(b) = self.connprop_buf.take() {
            self.bufs.put(b);
        }
    }

    fn handle_recv(&mut self, wc: Completion) {
        let Some(b) = BufRef::from_u64(wc.wr_id.index()) else {
            return;
        };
        self.recvs_posted = self.recvs_posted.saturating_sub(1);
        if !wc.status.is_success() {
            self.bufs.put(b);
            self.on_wc_error(wc.status);
            return;
        }
        // Reposted by the next submit or poll.
        self.recv_deficit += 1;
        let len = (wc.byte_len as usize).min(self.recv_size as usize);
        let msg = &self.bufs.bytes(b)[..len];
        if self.short_reply(b, msg) {
            return;
        }
        let Some(prefix) = header::peek_prefix(msg) else {
            self.bufs.put(b);
            return;
        };
        // Version negotiation answers (CONNPROP or the first v1 call).
        let decoded = header::decode(msg, &self.cfg.limits);
        if Some(prefix.xid) == self.connprop_xid {
            self.connprop_xid = None;
            if let Some(cb) = self.connprop_buf.take() {
                self.bufs.put(cb);
            }
            self.credits.on_reply(prefix.credits);
            let kind = match decoded {
                Ok(h) => match h.body {
                    Body::ErrorV1(header::V1Error::Vers { low, high })
                    | Body::ErrorV2(header::V2Error::Vers { low, high }) => {
                        negotiate::ReplyKind::VersionError { low, high }
                    }
                    Body::ErrorV1(_) | Body::ErrorV2(_) => negotiate::ReplyKind::OtherError,
                    _ => negotiate::ReplyKind::Normal { credits: h.credits },
                },
                Err(_) => match header::peek_err_vers_v1_layout(msg) {
                    Some((low, high)) => negotiate::ReplyKind::VersionError { low, high },
                    None => negotiate::ReplyKind::OtherError,
                },
            };
            if let Ok(h) = decoded {
                if let Body::ConnProp(p) = h.body {
                    let _ = self.neg.set_peer_receive_size(p.rbsiz());
                    self.call_inline_max = p.rbsiz().min(self.send_size);
                }
            }
            let _ = self.neg.handle_reply(prefix.vers, kind);
            self.bufs.put(b);
            self.after_negotiation_input();
            return;
        }
        let h = match decoded {
            Ok(h) => h,
            Err(_) => {
                self.stats.bad_replies += 1;
                self.bufs.put(b);
                return;
            }
        };
        let Some(i) = self.find_call(h.xid) else {
            self.stats.unmatched += 1;
            self.bufs.put(b);
            return;
        };
        self.accept_reply(i, h.credits);
        if self.neg.phase() == Phase::Negotiating {
            let kind = match h.body {
                Body::ErrorV1(header::V1Error::Vers { low, high })
                | Body::ErrorV2(header::V2Error::Vers { low, high }) => {
                    negotiate::ReplyKind::VersionError { low, high }
                }
                Body::ErrorV1(_) | Body::ErrorV2(_) => negotiate::ReplyKind::OtherError,
                _ => negotiate::ReplyKind::Normal { credits: h.credits },
            };
            let _ = self.neg.handle_reply(h.vers, kind);
        }
        let outcome = match h.body {
            Body::ErrorV1(e) => {
                self.stats.transport_errors += 1;
                CallOutcome::TransportErrorV1(e)
            }
            Body::ErrorV2(e) => {
                self.stats.transport_errors += 1;
                CallOutcome::TransportErrorV2(e)
            }
            Body::Msg { .. } | Body::NoMsg { .. } => {
                // The Reply is checked against what the Call advertised.
                let c = self.calls.get(i).expect("found");
                let n = (c.write_count as usize).min(plan::PLAN_WRITE_CHUNKS);
                let writes: [&[Segment]; plan::PLAN_WRITE_CHUNKS] =
                    std::array::from_fn(|k| std::slice::from_ref(&c.write_segs[k]));
                let reply = c.reply_seg.as_ref().map(std::slice::from_ref);
                match plan::reassemble_reply_provisioned(&h, &writes[..n], reply) {
                    Ok(layout) => {
                        let cm = self.calls.get_mut(i).expect("found");
                        cm.layout = Some(layout);
                        self.stats.replies += 1;
                        CallOutcome::Reply
                    }
                    _ => {
                        self.stats.bad_replies += 1;
                        CallOutcome::BadReply
                    }
                }
            }
            _ => {
                self.stats.bad_replies += 1;
                CallOutcome::BadReply
            }
        };
        let payload_at = match h.body {
            Body::Msg { payload_offset, .. } => payload_offset as u32,
            _ => 0,
        };
        self.complete_call(i, b, len as u32, payload_at, outcome);
        self.after_negotiation_input();
    }

    /// The slot of the Call in flight that a Reply with `xid` answers: the
    /// XID carries the slot in its low bits ([`Self::stamp_xid`]), checked
    /// against the XID stored there. `None` for any other XID.
    #[inline(always)]
    fn find_call(&self, xid: u32) -> Option<u32> {
        let i = xid & ((1 << self.slot_bits) - 1);
        self.calls.get(i).filter(|c| c.answers(xid)).map(|_| i)
    }

    /// [`Self::find_call`], with the Call.
    #[inline(always)]
    fn find_call_mut(&mut self, xid: u32) -> Option<(u32, &mut Call)> {
        let i = xid & ((1 << self.slot_bits) - 1);
        self.calls.get_mut(i).filter(|c| c.answers(xid)).map(|c| (i, c))
    }

    /// The Reply to call slot `i` ([`Self::find_call`]) is taken: the Call
    /// leaves the credits in flight and the Reply's grant is the new limit
    /// (RFC 8166 s3.3.1).
    #[inline(always)]
    fn accept_reply(&mut self, i: u32, grant: u32) {
        self.credits.on_reply(grant);
        if let Some(&p) = self.posted_at.get(i as usize) {
            self.stages.interval(LAP_REPLY_SEEN, p, self.polled_at);
        }
    }

    /// Call slot `i` is answered: its Reply (`len` bytes, the RPC message at
    /// `payload_at`) stays in receive buffer `b`, and the Call is reported
    /// with `outcome`. A reply implies the Send was delivered; its completion
    /// may still be pending in the CQ, but the buffers are no longer used by
    /// the device.
    #[inline]
    fn complete_call(&mut self, i: u32, b: BufRef, len: u32, payload_at: u32, outcome: CallOutcome) {
        let Some(c) = self.calls.get_mut(i) else { return };
        c.recv = Some(b);
        c.recv_len = len;
        c.payload_at = payload_at;
        c.replied = true;
        c.outcome = Some(outcome);
        c.state = CallState::Done;
        let xid = c.xid;
        self.completions.push_back(Completed {
            id: CallId(i),
            xid,
            outcome,
        });
        self.stages.lap(LAP_REPLY_COMPLETED, self.polled_at);
    }

    /// A chunk-free Reply (RDMA_MSG / RDMA2_MSG with three empty lists) to
    /// a Call in flight that provisioned no Write chunk, in receive buffer
    /// `b` (`msg`: its bytes), on a link in its steady state: the same
    /// outcome as the rest of [`Self::handle_recv`] (the credit grant taken,
    /// the Call done with [`plan::ReplyLayout::short_inline`]), with the
    /// checks a chunk-free Reply needs made once. `false`, having changed
    /// nothing, for any other message or state, which `handle_recv` then
    /// handles.
    ///
    /// Called on the requester's core only.
    #[inline]
    fn short_reply(&mut self, b: BufRef, msg: &[u8]) -> bool {
        if self.link != LinkState::Ready || self.connprop_xid.is_some() || self.neg.phase() != Phase::Established {
            return false;
        }
        // RFC 8166 s4.2 / draft s5.3.1, validated as `header::decode` would.
        let Some(h) = header::decode_chunk_free_msg(msg) else {
            return false;
        };
        let Some((i, c)) = self.find_call_mut(h.xid) else {
            return false;
        };
        if c.write_count != 0 {
            return false;
        }
        // No Write chunk to check the Reply's (empty) Write list against,
        // and an unused Reply chunk, if one was provisioned, is allowed
        // (RFC 8166 s3.4.6, s3.5.3).
        let payload_len = h.payload().map_or(0, <[u8]>::len) as u32;
        c.layout = Some(plan::ReplyLayout::short_inline(payload_len));
        self.accept_reply(i, h.credits);
        self.stats.replies += 1;
        self.complete_call(i, b, msg.len() as u32, h.header_len as u32, CallOutcome::Reply);
        true
    }

    fn after_negotiation_input(&mut self) {
        match self.neg.phase() {
            Phase::Established => {
                if let Some(v) = self.neg.version() {
                    if v == RPCRDMA_VERSION_1 && self.vers == RPCRDMA_VERSION_2 {
                        self.stats.fallbacks_to_v1 += 1;
                    }
                    self.vers = v;
                }
                self.link = LinkState::Ready;
            }
            Phase::Failed(_) | Phase::Closed => self.link = LinkState::Failed,
            Phase::Negotiating => {
                if let Some(RequesterAction::Resend { params }) = self.neg.poll_action() {
                    // The server does not speak our version: use the one it offered.
                    // v1 needs no CONNPROP; the next Call goes in v1.
                    if params.vers == RPCRDMA_VERSION_1 {
                        self.stats.fallbacks_to_v1 += 1;
                        self.vers = RPCRDMA_VERSION_1;
                        self.link = LinkState::Ready;
                    } else {
                        self.send_connprop(params.vers);
                    }
                }
            }
        }
    }

    /// Disconnect and return every buffer (calls, receives). Returns the calls
    /// still held afterwards (0 when clean).
    pub fn shutdown(&mut self, max_polls: usize) -> usize {
        if let Some(c) = self.conn {
            let _ = self.fabric.disconnect(c);
        }
        for _ in 0..max_polls {
            self.poll();
            if self.link == LinkState::Failed && self.recvs_posted == 0 {
                break;
            }
        }
        while self.completions.pop_front().is_some() {}
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
