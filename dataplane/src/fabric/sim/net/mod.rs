//! The simulated network's state and event processing. Everything here runs on
//! the one thread that owns the [`super::SimNetwork`]; the public handles borrow
//! it through a `RefCell` for the duration of one call.
//!
//! Layout: one global table of queue pairs (`qps`, indexed by a `usize` that
//! never changes), one table of endpoints (`eps`), and one event queue ordered by
//! `(virtual time, sequence number)`. Only `Vec`, `VecDeque` and `BTreeMap` are
//! used, so no iteration order depends on hashing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use mempool::region::Region;

use super::rng::SimRng;
use super::{ConnState, FaultKind, SimConfig, SimStats, TraceEvent};
use super::{LISTEN_BACKLOG, MAX_QUEUE_DEPTH, SIM_MAX_INLINE, SIM_MAX_MSG_SIZE};
use crate::fabric::{
    CmEvent, Completion, ConnId, ConnReqId, CqId, FabricError, ListenerId, LocalBuf, MrKeys, PrivateData, QpConfig,
    RecvWr, RemoteBuf, SendOp, SendWr, SrqId, WcOpcode, WcStatus, MAX_SGE,
};

/// RNR retry count meaning "retry forever" (IB: the 3-bit field's value 7).
const RNR_RETRY_INFINITE: u8 = 7;

/// A registered region at one endpoint.
struct Mr {
    region: Arc<Region>,
    keys: MrKeys,
    /// False once a Send with Invalidate named this rkey: remote access is revoked
    /// (local use through the lkey stays valid; see the module docs).
    rkey_valid: bool,
}

struct Cq {
    depth: usize,
    q: VecDeque<Completion>,
}

#[derive(Clone, Copy)]
struct PostedRecv {
    wr: RecvWr,
    /// Virtual time from which an incoming Send may use this receive (later
    /// than the posting time only under injected receive starvation).
    visible_at_ns: u64,
}

struct Srq {
    depth: usize,
    q: VecDeque<PostedRecv>,
}

struct ConnReq {
    active: usize,
}

struct Endpoint {
    /// False after the owning `SimFabric` was dropped.
    alive: bool,
    /// Per-endpoint byte in every key, so a key used at the wrong endpoint
    /// fails with high probability.
    tag: u8,
    /// Indexed by region id.
    regs: Vec<Option<Mr>>,
    cqs: Vec<Cq>,
    srqs: Vec<Srq>,
    /// `ConnId.0` → index into `Net::qps`.
    conns: Vec<usize>,
    listeners: Vec<String>,
    /// `ConnReqId.0` → pending request (taken by accept or reject).
    reqs: Vec<Option<ConnReq>>,
    pending_reqs: usize,
    cm: VecDeque<CmEvent>,
    slow_ns: u64,
}

#[derive(Clone)]
struct SqEntry {
    wr: SendWr,
    /// Data copied at post time for an inline Send or Write.
    inline: Option<Vec<u8>>,
}

struct Qp {
    ep: usize,
    conn: ConnId,
    cfg: QpConfig,
    state: ConnState,
    peer: Option<usize>,
    rq: VecDeque<PostedRecv>,
    /// Posted, not yet executed (the head may be waiting for an RNR retry).
    pending: VecDeque<SqEntry>,
    /// Executed at the peer, completion not yet generated (waiting for the
    /// ACK), with the byte count to report.
    inflight: VecDeque<(SqEntry, u32)>,
    /// Unsignaled work requests that completed successfully but whose send-queue
    /// slots are not yet released (verbs frees them at the next signaled
    /// completion).
    unsignaled_done: u32,
    exec_scheduled: bool,
    rnr_used: u32,
    last_ack_ns: u64,
    /// Disconnected, Rejected or Unreachable has been reported.
    terminal_reported: bool,
}

impl Qp {
    fn sq_used(&self) -> usize {
        self.pending.len() + self.inflight.len() + self.unsignaled_done as usize
    }
}

enum Event {
    /// Execute the head of a QP's send queue at the peer.
    Exec {
        qp: usize,
    },
    /// The ACK for the oldest executed work request arrives: complete it.
    Ack {
        qp: usize,
    },
    /// A connect request reaches the listener named `name`.
    ConnectArrive {
        qp: usize,
        name: String,
        pd: PrivateData,
    },
    /// The passive side's accept reaches the active side.
    AcceptArrive {
        qp: usize,
        pd: PrivateData,
    },
    /// The active side's RTU reaches the passive side.
    EstablishedPassive {
        qp: usize,
    },
    RejectArrive {
        qp: usize,
        pd: PrivateData,
    },
    UnreachableArrive {
        qp: usize,
    },
    /// The peer of `qp` went to error; `qp` learns of it.
    PeerDown {
        qp: usize,
    },
}

pub(super) struct Net {
    pub(super) cfg: SimConfig,
    now_ns: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Event>,
    rng: SimRng,
    fault_rng: SimRng,
    eps: Vec<Endpoint>,
    qps: Vec<Qp>,
    listeners: BTreeMap<String, (usize, ListenerId)>,
    stats: SimStats,
    hash: u64,
    trace: Option<Vec<TraceEvent>>,
}

fn opcode(op: SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithInv { .. } => WcOpcode::Send,
        SendOp::RdmaWrite => WcOpcode::RdmaWrite,
        SendOp::RdmaRead => WcOpcode::RdmaRead,
    }
}

/// `offset + len <= region_len`, without overflow.
fn in_bounds(region_len: usize, offset: u64, len: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= region_len as u64)
}

fn invalid_input(op: &'static str, what: &'static str) -> FabricError {
    FabricError::io(op, std::io::Error::new(std::io::ErrorKind::InvalidInput, what))
}

impl Net {
    pub(super) fn new(cfg: SimConfig) -> Net {
        let mut root = SimRng::new(cfg.seed);
        let rng = root.fork();
        let fault_rng = root.fork();
        Net {
            trace: cfg.trace.then(Vec::new),
            cfg,
            now_ns: 0,
            seq: 0,
            events: BTreeMap::new(),
            rng,
            fault_rng,
            eps: Vec::new(),
            qps: Vec::new(),
            listeners: BTreeMap::new(),
            stats: SimStats::default(),
            hash: 0xcbf2_9ce4_8422_2325,
        }
    }

    // ---------------------------------------------------------------- clock

    pub(super) fn now_ns(&self) -> u64 {
        self.now_ns
    }

    pub(super) fn pending_events(&self) -> usize {
        self.events.len()
    }

    pub(super) fn next_event_ns(&self) -> Option<u64> {
        self.events.first_key_value().map(|(&(t, _), _)| t)
    }

    pub(super) fn stats(&self) -> SimStats {
        self.stats
    }

    pub(super) fn trace_hash(&self) -> u64 {
        let mut h = self.hash;
        super::rng::splitmix64(&mut h)
    }

    pub(super) fn take_trace(&mut self) -> Vec<TraceEvent> {
        match &mut self.trace {
            Some(t) => std::mem::take(t),
            None => Vec::new(),
        }
    }

    pub(super) fn endpoints(&self) -> usize {
        self.eps.len()
    }

    pub(super) fn set_slow(&mut self, ep: usize, extra_ns: u64) -> bool {
        match self.eps.get_mut(ep) {
            Some(e) => {
                e.slow_ns = extra_ns;
                true
            }
            None => false,
        }
    }

    fn schedule(&mut self, at_ns: u64, ev: Event) {
        self.seq += 1;
        self.events.insert((at_ns, self.seq), ev);
    }

    fn slow(&self, a: usize, b: usize) -> u64 {
        self.eps[a].slow_ns.saturating_add(self.eps[b].slow_ns)
    }

    /// One-way data latency between endpoints `a` and `b`.
    fn wire_delay(&mut self, a: usize, b: usize) -> u64 {
        let base = self
            .rng
            .range_inclusive(self.cfg.min_latency_ns, self.cfg.max_latency_ns);
        base.saturating_add(self.slow(a, b))
    }

    /// Connection-manager message latency between endpoints `a` and `b`.
    fn cm_delay(&mut self, a: usize, b: usize) -> u64 {
        let base = self.rng.range_inclusive(1, self.cfg.cm_latency_ns.max(1));
        base.saturating_add(self.slow(a, b))
    }

    // --------------------------------------------------------------- trace

    fn record(&mut self, ev: TraceEvent) {
        let mut h = self.hash;
        ev.hash_words(&mut |w| {
            h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
            h ^= h >> 29;
        });
        self.hash = h;
        if let Some(t) = &mut self.trace {
            t.push(ev);
        }
    }

    fn push_wc(&mut self, ep: usize, cq: CqId, wc: Completion) {
        if !self.eps[ep].alive {
            return;
        }
        self.record(TraceEvent::Completion {
            time_ns: self.now_ns,
            endpoint: ep as u32,
            cq,
            wc,
        });
        let c = &mut self.eps[ep].cqs[cq.0 as usize];
        if c.q.len() >= c.depth {
            // Hardware raises a fatal CQ error here; the consumer must size its
            // CQs for every work request that can be outstanding.
            panic!(
                "sim: CQ {} of endpoint {ep} overflowed (depth {}): size CQs for every \
                 outstanding work request (hardware reports IBV_EVENT_CQ_ERR)",
                cq.0, c.depth
            );
        }
        c.q.push_back(wc);
    }

    fn push_cm(&mut self, ep: usize, event: CmEvent) {
        if !self.eps[ep].alive {
            return;
        }
        self.record(TraceEvent::Cm {
            time_ns: self.now_ns,
            endpoint: ep as u32,
            event,
        });
        self.eps[ep].cm.push_back(event);
    }

    fn fault(&mut self, ep: usize, conn: Option<ConnId>, kind: FaultKind) {
        let c = &mut self.stats.faults;
        match kind {
            FaultKind::FlushError => c.flush_errors += 1,
            FaultKind::WrError => c.wr_errors += 1,
            FaultKind::Rnr => c.rnr += 1,
            FaultKind::LostConnection => c.lost_connections += 1,
            FaultKind::SlowPeer => c.slow_peers += 1,
            FaultKind::RecvStarvation => c.starved_recvs += 1,
        }
        self.record(TraceEvent::Fault {
            time_ns: self.now_ns,
            endpoint: ep as u32,
            conn,
            kind,
        });
    }

    // ------------------------------------------------------------ endpoints

    pub(super) fn add_endpoint(&mut self) -> usize {
        let ep = self.eps.len();
        let tag = self.rng.next_u64() as u8;
        self.eps.push(Endpoint {
            alive: true,
            tag,
            regs: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            conns: Vec::new(),
            listeners: Vec::new(),
            reqs: Vec::new(),
            pending_reqs: 0,
            cm: VecDeque::new(),
            slow_ns: 0,
        });
        let f = self.cfg.faults;
        if self.fault_rng.chance(f.slow_peer) {
            let ns = self.fault_rng.range_inclusive(1, f.slow_peer_ns.max(1));
            self.eps[ep].slow_ns = ns;
            self.fault(ep, None, FaultKind::SlowPeer);
        }
        ep
    }

    /// The owning `SimFabric` is gone: its connections fail (peers see flushes
    /// and Disconnected), its names stop resolving, pending requests to it become
    /// Unreachable. Nothing more is delivered to it.
    pub(super) fn drop_endpoint(&mut self, ep: usize) {
        self.eps[ep].alive = false;
        let names = std::mem::take(&mut self.eps[ep].listeners);
        for n in names {
            if self.listeners.get(&n).is_some_and(|&(e, _)| e == ep) {
                self.listeners.remove(&n);
            }
        }
        let reqs = std::mem::take(&mut self.eps[ep].reqs);
        for r in reqs.into_iter().flatten() {
            let d = self.cm_delay(ep, self.qps[r.active].ep);
            let at = self.now_ns + d;
            self.schedule(at, Event::UnreachableArrive { qp: r.active });
        }
        let conns = self.eps[ep].conns.clone();
        for q in conns {
            self.enter_error(q);
        }
        self.eps[ep].cqs.clear();
        self.eps[ep].srqs.clear();
        self.eps[ep].cm.clear();
    }

    pub(super) fn register_region(&mut self, ep: usize, region: &Arc<Region>) -> Result<MrKeys, FabricError> {
        let id = region.id() as usize;
        if let Some(Some(mr)) = self.eps[ep].regs.get(id) {
            if Arc::ptr_eq(&mr.region, region) {
                return Ok(mr.keys);
            }
            return Err(FabricError::Other(format!(
                "sim: region id {id} is already registered with a different region"
            )));
        }
        let k1 = self.rng.next_u64() as u8;
        let k2 = self.rng.next_u64() as u8;
        let base = (u32::from(self.eps[ep].tag) << 24) | ((id as u32) << 8);
        let keys = MrKeys {
            lkey: base | u32::from(k1),
            rkey: base | u32::from(k2),
        };
        let e = &mut self.eps[ep];
        if e.regs.len() <= id {
            e.regs.resize_with(id + 1, || None);
        }
        e.regs[id] = Some(Mr {
            region: Arc::clone(region),
            keys,
            rkey_valid: true,
        });
        Ok(keys)
    }

    pub(super) fn remote_addr(&self, ep: usize, region: u16, offset: u64) -> Result<u64, FabricError> {
        let mr = self.eps[ep]
            .regs
            .get(region as usize)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotRegistered { region })?;
        if offset > mr.region.len() as u64 {
            return Err(FabricError::BadAddress(format!(
                "offset {offset} is beyond region {region} ({} bytes)",
                mr.region.len()
            )));
        }
        Ok(offset)
    }

    pub(super) fn rkey_valid(&self, ep: usize, rkey: u32) -> bool {
        self.mr_index(ep, rkey).is_some()
    }

    /// Index of the region whose *valid* rkey is `rkey` at endpoint `ep`: the
    /// rkey's middle 16 bits are the region id (an array index, no lookup).
    fn mr_index(&self, ep: usize, rkey: u32) -> Option<usize> {
        let id = ((rkey >> 8) & 0xffff) as usize;
        let mr = self.eps[ep].regs.get(id)?.as_ref()?;
        (mr.keys.rkey == rkey && mr.rkey_valid).then_some(id)
    }

    /// Address of a local buffer, if it is inside a registered region.
    fn resolve(&self, ep: usize, b: &LocalBuf) -> Option<*mut u8> {
        let mr = self.eps[ep].regs.get(b.region as usize)?.as_ref()?;
        if !in_bounds(mr.region.len(), b.offset, u64::from(b.len)) {
            return None;
        }
        // SAFETY: `offset <= offset + len <= region.len()`, so the result stays
        // inside (or one past the end of) the region's live mapping, which the
        // `Arc` in `regs` keeps mapped.
        Some(unsafe { mr.region.as_ptr().add(b.offset as usize) })
    }

    /// Address of `len` bytes of a remote buffer at endpoint `ep`: a valid rkey,
    /// `len` within the advertised segment and the range inside the region.
    fn remote_range(&self, ep: usize, seg: &RemoteBuf, len: u64) -> Option<*mut u8> {
        let id = self.mr_index(ep, seg.handle)?;
        let mr = self.eps[ep].regs[id].as_ref()?;
        if len > u64::from(seg.length) || !in_bounds(mr.region.len(), seg.offset, len) {
            return None;
        }
        // SAFETY: as in `resolve`: `offset + len <= region.len()`.
        Some(unsafe { mr.region.as_ptr().add(seg.offset as usize) })
    }

    // ------------------------------------------------------------ resources

    pub(super) fn create_cq(&mut self, ep: usize, depth: u32) -> Result<CqId, FabricError> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH * 4 {
            return Err(invalid_input("create_cq", "depth must be 1..=4*MAX_QUEUE_DEPTH"));
        }
        let e = &mut self.eps[ep];
        e.cqs.push(Cq {
            depth: depth as usize,
            q: VecDeque::new(),
        });
        Ok(CqId(e.cqs.len() as u32 - 1))
    }

    pub(super) fn create_srq(&mut self, ep: usize, depth: u32) -> Result<SrqId, FabricError> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH {
            return Err(invalid_input("create_srq", "depth must be 1..=MAX_QUEUE_DEPTH"));
        }
        let e = &mut self.eps[ep];
        e.srqs.push(Srq {
            depth: depth as usize,
            q: VecDeque::new(),
        });
        Ok(SrqId(e.srqs.len() as u32 - 1))
    }

    fn check_qp_config(&self, ep: usize, cfg: &QpConfig) -> Result<(), FabricError> {
        let e = &self.eps[ep];
        if cfg.cq.0 as usize >= e.cqs.len() {
            return Err(FabricError::UnknownId {
                what: "cq",
                id: cfg.cq.0,
            });
        }
        if let Some(s) = cfg.srq {
            if s.0 as usize >= e.srqs.len() {
                return Err(FabricError::UnknownId { what: "srq", id: s.0 });
            }
        } else if cfg.recv_depth == 0 || cfg.recv_depth > MAX_QUEUE_DEPTH {
            return Err(invalid_input("create_qp", "recv_depth must be 1..=MAX_QUEUE_DEPTH"));
        }
        if cfg.send_depth == 0 || cfg.send_depth > MAX_QUEUE_DEPTH {
            return Err(invalid_input("create_qp", "send_depth must be 1..=MAX_QUEUE_DEPTH"));
        }
        if cfg.max_inline > SIM_MAX_INLINE {
            return Err(FabricError::Unsupported("max_inline above Caps::max_inline"));
        }
        Ok(())
    }

    fn new_qp(&mut self, ep: usize, cfg: &QpConfig, state: ConnState, peer: Option<usize>) -> (usize, ConnId) {
        let q = self.qps.len();
        let conn = ConnId(self.eps[ep].conns.len() as u32);
        self.qps.push(Qp {
            ep,
            conn,
            cfg: *cfg,
            state,
            peer,
            rq: VecDeque::new(),
            pending: VecDeque::new(),
            inflight: VecDeque::new(),
            unsignaled_done: 0,
            exec_scheduled: false,
            rnr_used: 0,
            last_ack_ns: 0,
            terminal_reported: false,
        });
        self.eps[ep].conns.push(q);
        (q, conn)
    }

    fn qp_of(&self, ep: usize, conn: ConnId) -> Result<usize, FabricError> {
        self.eps[ep]
            .conns
            .get(conn.0 as usize)
            .copied()
            .ok_or(FabricError::UnknownId {
                what: "connection",
                id: conn.0,
            })
    }

    pub(super) fn conn_state(&self, ep: usize, conn: ConnId) -> Option<ConnState> {
        let q = self.qp_of(ep, conn).ok()?;
        Some(self.qps[q].state)
    }

    pub(super) fn outstanding_sends(&self, ep: usize, conn: ConnId) -> usize {
        self.qp_of(ep, conn)
            .map(|q| self.qps[q].pending.len() + self.qps[q].inflight.len())
            .unwrap_or(0)
    }

    pub(super) fn posted_recvs(&self, ep: usize, conn: ConnId) -> usize {
        self.qp_of(ep, conn).map(|q| self.qps[q].rq.len()).unwrap_or(0)
    }

    pub(super) fn srq_len(&self, ep: usize, srq: SrqId) -> usize {
        self.eps[ep].srqs.get(srq.0 as usize).map_or(0, |s| s.q.len())
    }

    pub(super) fn cq_len(&self, ep: usize, cq: CqId) -> usize {
        self.eps[ep].cqs.get(cq.0 as usize).map_or(0, |c| c.q.len())
    }

    // ------------------------------------------------------------------- CM

    pub(super) fn listen(&mut self, ep: usize, addr: &str) -> Result<ListenerId, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::BadAddress(String::new()));
        }
        if self.listeners.contains_key(addr) {
            return Err(FabricError::io(
                "listen",
                std::io::Error::new(std::io::ErrorKind::AddrInUse, addr.to_string()),
            ));
        }
        let e = &mut self.eps[ep];
        let id = ListenerId(e.listeners.len() as u32);
        e.listeners.push(addr.to_string());
        self.listeners.insert(addr.to_string(), (ep, id));
        Ok(id)
    }

    pub(super) fn connect(&mut self, ep: usize, addr: &str, cfg: &QpConfig, pd: &[u8]) -> Result<ConnId, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::BadAddress(String::new()));
        }
        self.check_qp_config(ep, cfg)?;
        let (q, conn) = self.new_qp(ep, cfg, ConnState::Connecting, None);
        let at = self.now_ns + self.cm_delay(ep, ep);
        self.schedule(
            at,
            Event::ConnectArrive {
                qp: q,
                name: addr.to_string(),
                pd: PrivateData::new(pd),
            },
        );
        Ok(conn)
    }

    fn take_req(&mut self, ep: usize, req: ConnReqId) -> Result<ConnReq, FabricError> {
        let r = self.eps[ep]
            .reqs
            .get_mut(req.0 as usize)
            .and_then(Option::take)
            .ok_or(FabricError::UnknownId {
                what: "connection request",
                id: req.0,
            })?;
        self.eps[ep].pending_reqs -= 1;
        Ok(r)
    }

    pub(super) fn accept(
        &mut self,
        ep: usize,
        req: ConnReqId,
        cfg: &QpConfig,
        pd: &[u8],
    ) -> Result<ConnId, FabricError> {
        self.check_qp_config(ep, cfg)?;
        let r = self.take_req(ep, req)?;
        let active = r.active;
        // rdma_accept moves the passive QP to RTS before the REP leaves, so it
        // may post sends at once; they execute once the active side is ready.
        let (p, conn) = self.new_qp(ep, cfg, ConnState::Ready, Some(active));
        let at = self.now_ns + self.cm_delay(ep, self.qps[active].ep);
        if self.qps[active].state == ConnState::Connecting {
            self.qps[active].peer = Some(p);
            self.schedule(
                at,
                Event::AcceptArrive {
                    qp: active,
                    pd: PrivateData::new(pd),
                },
            );
        } else {
            // The active side gave up meanwhile.
            self.schedule(at, Event::PeerDown { qp: p });
        }
        Ok(conn)
    }

    pub(super) fn reject(&mut self, ep: usize, req: ConnReqId, pd: &[u8]) -> Result<(), FabricError> {
        let r = self.take_req(ep, req)?;
        let at = self.now_ns + self.cm_delay(ep, self.qps[r.active].ep);
        self.schedule(
            at,
            Event::RejectArrive {
                qp: r.active,
                pd: PrivateData::new(pd),
            },
        );
        Ok(())
    }

    pub(super) fn disconnect(&mut self, ep: usize, conn: ConnId) -> Result<(), FabricError> {
        let q = self.qp_of(ep, conn)?;
        self.enter_error(q);
        Ok(())
    }

    pub(super) fn poll_cm(&mut self, ep: usize) -> Option<CmEvent> {
        self.auto_step();
        self.eps[ep].cm.pop_front()
    }

    // ---------------------------------------------------------- data path

    pub(super) fn post_send(&mut self, ep: usize, conn: ConnId, wr: &SendWr) -> Result<(), FabricError> {
        let q = self.qp_of(ep, conn)?;
        if wr.num_sge as usize > MAX_SGE {
            return Err(invalid_input("post_send", "num_sge > MAX_SGE"));
        }
        if wr.op == SendOp::RdmaRead && self.qps[q].cfg.max_rdma_reads == 0 {
            return Err(FabricError::Unsupported("RDMA Read on a QP with max_rdma_reads = 0"));
        }
        match self.qps[q].state {
            ConnState::Connecting => Err(FabricError::NotConnected(conn)),
            ConnState::Error => {
                // As verbs: posting to a QP in the error state succeeds and the
                // work request completes at once, flushed.
                let cq = self.qps[q].cfg.cq;
                self.push_wc(
                    ep,
                    cq,
                    Completion {
                        wr_id: wr.wr_id,
                        status: WcStatus::Flushed,
                        opcode: opcode(wr.op),
                        conn,
                        byte_len: 0,
                        invalidated_rkey: None,
                    },
                );
                Ok(())
            }
            ConnState::Ready => {
                let qp = &self.qps[q];
                if qp.sq_used() >= qp.cfg.send_depth as usize {
                    return Err(FabricError::QueueFull { what: "send queue" });
                }
                let inline = self.snapshot_inline(ep, q, wr);
                self.qps[q].pending.push_back(SqEntry { wr: *wr, inline });
                self.kick(q);
                Ok(())
            }
        }
    }

    /// For a Send or Write no longer than the QP's `max_inline`: the data, copied
    /// now (the consumer may reuse the buffers as soon as `post_send` returns).
    /// `None` when not inline or when a buffer is invalid (execution then reports
    /// LocalProtection).
    fn snapshot_inline(&self, ep: usize, q: usize, wr: &SendWr) -> Option<Vec<u8>> {
        let max = u64::from(self.qps[q].cfg.max_inline);
        if wr.op == SendOp::RdmaRead || max == 0 || wr.len() > max {
            return None;
        }
        let mut data = Vec::with_capacity(wr.len() as usize);
        for s in wr.sges() {
            let p = self.resolve(ep, s)?;
            // SAFETY: `resolve` checked that `[p, p + len)` lies in a live
            // registered region. The consumer handed these bytes to the
            // provider by posting them (verbs contract), so nothing writes them
            // concurrently; the network runs on this thread only.
            let src = unsafe { std::slice::from_raw_parts(p, s.len as usize) };
            data.extend_from_slice(src);
        }
        Some(data)
    }

    pub(super) fn post_recv(&mut self, ep: usize, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError> {
        let q = self.qp_of(ep, conn)?;
        if self.qps[q].cfg.srq.is_some() {
            return Err(FabricError::Unsupported("post_recv on a connection that uses an SRQ"));
        }
        if self.qps[q].state == ConnState::Error {
            let cq = self.qps[q].cfg.cq;
            self.push_wc(ep, cq, flushed_recv(wr, conn));
            return Ok(());
        }
        if self.qps[q].rq.len() >= self.qps[q].cfg.recv_depth as usize {
            return Err(FabricError::QueueFull { what: "receive queue" });
        }
        let visible_at_ns = self.recv_visibility(ep, Some(conn));
        self.qps[q].rq.push_back(PostedRecv { wr: *wr, visible_at_ns });
        Ok(())
    }

    pub(super) fn post_srq_recv(&mut self, ep: usize, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError> {
        let s = self.eps[ep]
            .srqs
            .get(srq.0 as usize)
            .ok_or(FabricError::UnknownId { what: "srq", id: srq.0 })?;
        if s.q.len() >= s.depth {
            return Err(FabricError::QueueFull {
                what: "shared receive queue",
            });
        }
        let visible_at_ns = self.recv_visibility(ep, None);
        self.eps[ep].srqs[srq.0 as usize]
            .q
            .push_back(PostedRecv { wr: *wr, visible_at_ns });
        Ok(())
    }

    /// When a receive posted now becomes usable: now, or later under injected
    /// receive starvation.
    fn recv_visibility(&mut self, ep: usize, conn: Option<ConnId>) -> u64 {
        let f = self.cfg.faults;
        if self.fault_rng.chance(f.recv_starvation) {
            let d = self.fault_rng.range_inclusive(1, f.recv_starvation_ns.max(1));
            self.fault(ep, conn, FaultKind::RecvStarvation);
            self.now_ns.saturating_add(d)
        } else {
            self.now_ns
        }
    }

    pub(super) fn poll_cq(&mut self, ep: usize, cq: CqId, out: &mut [Completion]) -> usize {
        self.auto_step();
        let Some(c) = self.eps[ep].cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = out.len().min(c.q.len());
        for (slot, wc) in out.iter_mut().zip(c.q.drain(..n)) {
            *slot = wc;
        }
        n
    }

    fn auto_step(&mut self) {
        for _ in 0..self.cfg.steps_per_poll {
            if !self.step() {
                break;
            }
        }
    }

    /// Schedule execution of `q`'s send-queue head if it can run: the QP and its
    /// peer are ready and no execution is already scheduled.
    fn kick(&mut self, q: usize) {
        let qp = &self.qps[q];
        if qp.state != ConnState::Ready || qp.exec_scheduled || qp.pending.is_empty() {
            return;
        }
        let Some(p) = qp.peer else { return };
        if self.qps[p].state != ConnState::Ready {
            return;
        }
        let (a, b) = (qp.ep, self.qps[p].ep);
        self.qps[q].exec_scheduled = true;
        let at = self.now_ns + self.wire_delay(a, b);
        self.schedule(at, Event::Exec { qp: q });
    }

    // ------------------------------------------------------------- stepping

    /// Process the earliest event. False when there is none.
    pub(super) fn step(&mut self) -> bool {
        let Some(((t, _), ev)) = self.events.pop_first() else {
            return false;
        };
        self.now_ns = self.now_ns.max(t);
        self.stats.steps += 1;
        self.inject_step_faults();
        self.handle(ev);
        true
    }

    /// Process every event due within `duration_ns` of now, then move the clock
    /// to that time. Returns the number of steps.
    pub(super) fn run_for(&mut self, duration_ns: u64) -> u64 {
        let target = self.now_ns.saturating_add(duration_ns);
        let mut steps = 0;
        while self.next_event_ns().is_some_and(|t| t <= target) {
            self.step();
            steps += 1;
        }
        self.now_ns = self.now_ns.max(target);
        steps
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exec { qp } => self.exec(qp),
            Event::Ack { qp } => {
                if let Some((e, n)) = self.qps[qp].inflight.pop_front() {
                    self.complete_send(qp, &e.wr, WcStatus::Success, n);
                }
            }
            Event::ConnectArrive { qp, name, pd } => self.connect_arrive(qp, &name, pd),
            Event::AcceptArrive { qp, pd } => {
                if self.qps[qp].state != ConnState::Connecting {
                    return;
                }
                let Some(p) = self.qps[qp].peer else { return };
                self.qps[qp].state = ConnState::Ready;
                let (ep, conn) = (self.qps[qp].ep, self.qps[qp].conn);
                self.push_cm(ep, CmEvent::Established { conn, private_data: pd });
                let at = self.now_ns + self.cm_delay(ep, self.qps[p].ep);
                self.schedule(at, Event::EstablishedPassive { qp: p });
                self.kick(p);
                self.kick(qp);
            }
            Event::EstablishedPassive { qp } => {
                let x = &self.qps[qp];
                if x.state == ConnState::Ready && !x.terminal_reported {
                    let (ep, conn) = (x.ep, x.conn);
                    self.push_cm(
                        ep,
                        CmEvent::Established {
                            conn,
                            private_data: PrivateData::EMPTY,
                        },
                    );
                }
            }
            Event::RejectArrive { qp, pd } => {
                if self.qps[qp].state == ConnState::Connecting {
                    let conn = self.qps[qp].conn;
                    self.close_unconnected(qp, CmEvent::Rejected { conn, private_data: pd });
                }
            }
            Event::UnreachableArrive { qp } => {
                if self.qps[qp].state == ConnState::Connecting {
                    let conn = self.qps[qp].conn;
                    self.close_unconnected(qp, CmEvent::Unreachable { conn });
                }
            }
            Event::PeerDown { qp } => self.enter_error(qp),
        }
    }

    fn connect_arrive(&mut self, q: usize, name: &str, pd: PrivateData) {
        if self.qps[q].state != ConnState::Connecting {
            return;
        }
        let conn = self.qps[q].conn;
        let Some(&(lep, listener)) = self.listeners.get(name) else {
            self.close_unconnected(q, CmEvent::Unreachable { conn });
            return;
        };
        if self.eps[lep].pending_reqs >= LISTEN_BACKLOG {
            self.close_unconnected(
                q,
                CmEvent::Rejected {
                    conn,
                    private_data: PrivateData::EMPTY,
                },
            );
            return;
        }
        let e = &mut self.eps[lep];
        let req = ConnReqId(e.reqs.len() as u32);
        e.reqs.push(Some(ConnReq { active: q }));
        e.pending_reqs += 1;
        self.push_cm(
            lep,
            CmEvent::ConnectRequest {
                listener,
                req,
                private_data: pd,
            },
        );
    }

    fn inject_step_faults(&mut self) {
        let f = self.cfg.faults;
        if self.fault_rng.chance(f.flush_error) {
            if let Some(q) = self.random_ready_qp() {
                let (ep, conn) = (self.qps[q].ep, self.qps[q].conn);
                self.fault(ep, Some(conn), FaultKind::FlushError);
                self.enter_error(q);
            }
        }
        if self.fault_rng.chance(f.lost_connection) {
            if let Some(q) = self.random_ready_qp() {
                let (ep, conn) = (self.qps[q].ep, self.qps[q].conn);
                self.fault(ep, Some(conn), FaultKind::LostConnection);
                let peer = self.qps[q].peer;
                self.lose(q);
                if let Some(p) = peer {
                    self.lose(p);
                }
            }
        }
    }

    fn random_ready_qp(&mut self) -> Option<usize> {
        let ready = |x: &Qp| x.state == ConnState::Ready && self.eps[x.ep].alive;
        let n = self.qps.iter().filter(|x| ready(x)).count();
        if n == 0 {
            return None;
        }
        let k = self.fault_rng.index(n);
        self.qps
            .iter()
            .enumerate()
            .filter(|(_, x)| ready(x))
            .nth(k)
            .map(|(i, _)| i)
    }

    /// The link under `q` is gone: its oldest outstanding send work request
    /// exhausts transport retries, the rest is flushed.
    fn lose(&mut self, q: usize) {
        if self.qps[q].state == ConnState::Error {
            return;
        }
        let oldest = match self.qps[q].inflight.pop_front() {
            Some((e, _)) => Some(e),
            None => self.qps[q].pending.pop_front(),
        };
        if let Some(e) = oldest {
            self.complete_send(q, &e.wr, WcStatus::RetryExceeded, 0);
        }
        self.stats.conn_errors += 1;
        self.enter_error(q);
    }

    // ------------------------------------------------------------ execution

    fn exec(&mut self, q: usize) {
        self.qps[q].exec_scheduled = false;
        if self.qps[q].state != ConnState::Ready {
            return;
        }
        let Some(p) = self.qps[q].peer else { return };
        // Connecting: the accept's arrival kicks us. Error: a PeerDown for `q`
        // is already scheduled and will flush this work request.
        if self.qps[p].state != ConnState::Ready {
            return;
        }
        let Some(entry) = self.qps[q].pending.front().cloned() else {
            return;
        };
        let (ep, pep) = (self.qps[q].ep, self.qps[p].ep);
        let wr = entry.wr;

        if self.fault_rng.chance(self.cfg.faults.wr_error) {
            let conn = self.qps[q].conn;
            self.fault(ep, Some(conn), FaultKind::WrError);
            if self.fault_rng.below(2) == 0 {
                // As a real remote access error: the responder fails too.
                self.enter_error(p);
                self.fail_send(q, WcStatus::RemoteAccess);
            } else {
                self.fail_send(q, WcStatus::RetryExceeded);
            }
            return;
        }

        let total = wr.len();
        if total > u64::from(SIM_MAX_MSG_SIZE) {
            self.fail_send(q, WcStatus::LocalLength);
            return;
        }

        // Local buffers: the inline copy, or every SGE inside a registered region.
        let mut bufs: [(*mut u8, usize); MAX_SGE] = [(std::ptr::null_mut(), 0); MAX_SGE];
        let mut nbufs = 0;
        if let Some(data) = entry.inline.as_ref().filter(|_| wr.op != SendOp::RdmaRead) {
            bufs[0] = (data.as_ptr().cast_mut(), data.len());
            nbufs = 1;
        } else {
            for s in wr.sges() {
                match self.resolve(ep, s) {
                    Some(ptr) => {
                        bufs[nbufs] = (ptr, s.len as usize);
                        nbufs += 1;
                    }
                    None => {
                        self.fail_send(q, WcStatus::LocalProtection);
                        return;
                    }
                }
            }
        }
        let bufs = &bufs[..nbufs];

        match wr.op {
            SendOp::Send | SendOp::SendWithInv { .. } => {
                if self.fault_rng.chance(self.cfg.faults.rnr) {
                    let conn = self.qps[q].conn;
                    self.fault(ep, Some(conn), FaultKind::Rnr);
                    self.rnr(q);
                    return;
                }
                let srq = self.qps[p].cfg.srq;
                let head = match srq {
                    Some(s) => self.eps[pep].srqs[s.0 as usize].q.front().copied(),
                    None => self.qps[p].rq.front().copied(),
                };
                let r = match head {
                    Some(r) if r.visible_at_ns <= self.now_ns => r,
                    _ => {
                        self.rnr(q);
                        return;
                    }
                };
                match srq {
                    Some(s) => self.eps[pep].srqs[s.0 as usize].q.pop_front(),
                    None => self.qps[p].rq.pop_front(),
                };
                let Some(dst) = self.resolve(pep, &r.wr.buf) else {
                    // IB would report Remote Operation Error to the requester;
                    // this trait's nearest status is RemoteInvalidRequest.
                    self.fail_at_receiver(q, p, &r.wr, WcStatus::LocalProtection);
                    return;
                };
                if total > u64::from(r.wr.buf.len) {
                    self.fail_at_receiver(q, p, &r.wr, WcStatus::LocalLength);
                    return;
                }
                let inv = match wr.op {
                    SendOp::SendWithInv { rkey } => match self.mr_index(pep, rkey) {
                        Some(i) => Some((i, rkey)),
                        None => {
                            self.fail_at_receiver(q, p, &r.wr, WcStatus::RemoteInvalidRequest);
                            return;
                        }
                    },
                    _ => None,
                };
                let mut at = 0usize;
                for &(src, len) in bufs {
                    // SAFETY: `src` is `len` readable bytes (a checked SGE or the
                    // inline copy); `dst + at .. dst + at + len` lies in the
                    // receive buffer, which `resolve` checked is inside a live
                    // region and which is at least `total >= at + len` bytes long.
                    // Posting handed both buffers to the provider (verbs
                    // contract), and the network is single-threaded. `copy`
                    // (memmove) tolerates overlap when both lie in one region.
                    unsafe { std::ptr::copy(src, dst.add(at), len) };
                    at += len;
                }
                if let Some((i, _)) = inv {
                    if let Some(mr) = self.eps[pep].regs[i].as_mut() {
                        mr.rkey_valid = false;
                    }
                }
                let (pcq, pconn) = (self.qps[p].cfg.cq, self.qps[p].conn);
                self.push_wc(
                    pep,
                    pcq,
                    Completion {
                        wr_id: r.wr.wr_id,
                        status: WcStatus::Success,
                        opcode: WcOpcode::Recv,
                        conn: pconn,
                        byte_len: total as u32,
                        invalidated_rkey: inv.map(|(_, k)| k),
                    },
                );
                self.stats.sends += 1;
                self.succeed(q, total);
            }
            SendOp::RdmaWrite => {
                let Some(dst) = self.remote_range(pep, &wr.remote, total) else {
                    self.enter_error(p);
                    self.fail_send(q, WcStatus::RemoteAccess);
                    return;
                };
                let mut at = 0usize;
                for &(src, len) in bufs {
                    // SAFETY: `src` is `len` readable bytes (checked SGE or
                    // inline copy); `remote_range` checked `total` bytes from
                    // `dst` lie in a live region the peer exposed for remote
                    // write (hardware DMA has the same contract).
                    unsafe { std::ptr::copy(src, dst.add(at), len) };
                    at += len;
                }
                self.stats.writes += 1;
                self.succeed(q, total);
            }
            SendOp::RdmaRead => {
                let Some(src) = self.remote_range(pep, &wr.remote, total) else {
                    self.enter_error(p);
                    self.fail_send(q, WcStatus::RemoteAccess);
                    return;
                };
                let mut at = 0usize;
                for &(dst, len) in bufs {
                    // SAFETY: as for the Write, with the roles swapped: `total`
                    // bytes from `src` are inside the peer's region, each `dst`
                    // is `len` writable bytes of a checked local SGE.
                    unsafe { std::ptr::copy(src.add(at), dst, len) };
                    at += len;
                }
                self.stats.reads += 1;
                self.succeed(q, total);
            }
        }
    }

    /// The head of `q`'s send queue executed: it waits for its ACK, the next one
    /// is scheduled.
    fn succeed(&mut self, q: usize, total: u64) {
        let Some(entry) = self.qps[q].pending.pop_front() else {
            return;
        };
        let p = self.qps[q].peer.unwrap_or(q);
        let (ep, pep) = (self.qps[q].ep, self.qps[p].ep);
        self.record(TraceEvent::Executed {
            time_ns: self.now_ns,
            endpoint: ep as u32,
            conn: self.qps[q].conn,
            wr_id: entry.wr.wr_id,
            op: entry.wr.op,
            status: WcStatus::Success,
        });
        self.qps[q].rnr_used = 0;
        let ack = self.now_ns + self.wire_delay(pep, ep);
        // Completions of one send queue are reported in posting order.
        let at = ack.max(self.qps[q].last_ack_ns);
        self.qps[q].last_ack_ns = at;
        self.qps[q].inflight.push_back((entry, total as u32));
        self.schedule(at, Event::Ack { qp: q });
        if !self.qps[q].pending.is_empty() {
            self.qps[q].exec_scheduled = true;
            let next = self.now_ns + self.wire_delay(ep, pep);
            self.schedule(next, Event::Exec { qp: q });
        }
    }

    /// Receiver not ready: retry after the RNR timer, or give up.
    fn rnr(&mut self, q: usize) {
        self.stats.rnr_naks += 1;
        let qp = &mut self.qps[q];
        qp.rnr_used += 1;
        if qp.cfg.rnr_retry < RNR_RETRY_INFINITE && qp.rnr_used > u32::from(qp.cfg.rnr_retry) {
            self.fail_send(q, WcStatus::RnrRetryExceeded);
            return;
        }
        qp.exec_scheduled = true;
        let p = qp.peer.unwrap_or(q);
        let at = self.now_ns + self.cfg.rnr_timer_ns + self.slow(self.qps[q].ep, self.qps[p].ep);
        self.schedule(at, Event::Exec { qp: q });
    }

    /// A Send failed at the receiver: the receive it consumed completes with
    /// `recv_status`, both QPs go to error, the sender's work request completes
    /// with RemoteInvalidRequest (the NAK an IB responder sends for these).
    fn fail_at_receiver(&mut self, q: usize, p: usize, recv: &RecvWr, recv_status: WcStatus) {
        let (pep, pcq, pconn) = (self.qps[p].ep, self.qps[p].cfg.cq, self.qps[p].conn);
        self.push_wc(
            pep,
            pcq,
            Completion {
                wr_id: recv.wr_id,
                status: recv_status,
                opcode: WcOpcode::Recv,
                conn: pconn,
                byte_len: 0,
                invalidated_rkey: None,
            },
        );
        self.enter_error(p);
        self.fail_send(q, WcStatus::RemoteInvalidRequest);
    }

    /// The head of `q`'s send queue failed with `status`: earlier executed work
    /// requests complete successfully (the NAK acknowledges them), this one with
    /// `status`, everything else is flushed and the QP goes to error.
    fn fail_send(&mut self, q: usize, status: WcStatus) {
        let Some(entry) = self.qps[q].pending.pop_front() else {
            return;
        };
        while let Some((e, n)) = self.qps[q].inflight.pop_front() {
            self.complete_send(q, &e.wr, WcStatus::Success, n);
        }
        self.record(TraceEvent::Executed {
            time_ns: self.now_ns,
            endpoint: self.qps[q].ep as u32,
            conn: self.qps[q].conn,
            wr_id: entry.wr.wr_id,
            op: entry.wr.op,
            status,
        });
        self.complete_send(q, &entry.wr, status, 0);
        self.stats.conn_errors += 1;
        self.enter_error(q);
    }

    fn complete_send(&mut self, q: usize, wr: &SendWr, status: WcStatus, byte_len: u32) {
        let qp = &mut self.qps[q];
        if status.is_success() && !wr.signaled {
            qp.unsignaled_done += 1;
            return;
        }
        qp.unsignaled_done = 0;
        let (ep, cq, conn) = (qp.ep, qp.cfg.cq, qp.conn);
        self.push_wc(
            ep,
            cq,
            Completion {
                wr_id: wr.wr_id,
                status,
                opcode: opcode(wr.op),
                conn,
                byte_len: if status.is_success() { byte_len } else { 0 },
                invalidated_rkey: None,
            },
        );
    }

    /// Move `q` to the error state: flush its send queue (oldest first) and its
    /// own receives (SRQ receives stay posted), report Disconnected once, and
    /// let the peer learn of it after a CM latency.
    fn enter_error(&mut self, q: usize) {
        if self.qps[q].state == ConnState::Error {
            return;
        }
        self.qps[q].state = ConnState::Error;
        self.flush(q);
        let (ep, conn) = (self.qps[q].ep, self.qps[q].conn);
        if !self.qps[q].terminal_reported {
            self.qps[q].terminal_reported = true;
            self.push_cm(ep, CmEvent::Disconnected { conn });
        }
        if let Some(p) = self.qps[q].peer {
            if self.qps[p].state != ConnState::Error {
                let at = self.now_ns + self.cm_delay(ep, self.qps[p].ep);
                self.schedule(at, Event::PeerDown { qp: p });
            }
        }
    }

    /// A connect that never got established ends with `ev` (Rejected or
    /// Unreachable); receives posted meanwhile are flushed.
    fn close_unconnected(&mut self, q: usize, ev: CmEvent) {
        self.qps[q].state = ConnState::Error;
        self.flush(q);
        self.qps[q].terminal_reported = true;
        let ep = self.qps[q].ep;
        self.push_cm(ep, ev);
    }

    fn flush(&mut self, q: usize) {
        let inflight = std::mem::take(&mut self.qps[q].inflight);
        for (e, _) in &inflight {
            self.complete_send(q, &e.wr, WcStatus::Flushed, 0);
        }
        let pending = std::mem::take(&mut self.qps[q].pending);
        for e in &pending {
            self.complete_send(q, &e.wr, WcStatus::Flushed, 0);
        }
        let rq = std::mem::take(&mut self.qps[q].rq);
        let (ep, cq, conn) = (self.qps[q].ep, self.qps[q].cfg.cq, self.qps[q].conn);
        for r in &rq {
            self.push_wc(ep, cq, flushed_recv(&r.wr, conn));
        }
        self.qps[q].unsignaled_done = 0;
    }
}

fn flushed_recv(wr: &RecvWr, conn: ConnId) -> Completion {
    Completion {
        wr_id: wr.wr_id,
        status: WcStatus::Flushed,
        opcode: WcOpcode::Recv,
        conn,
        byte_len: 0,
        invalidated_rkey: None,
    }
}
