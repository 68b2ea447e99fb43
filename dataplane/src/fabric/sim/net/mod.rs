//! The simulated network's state and event processing. Everything here runs on
//! the one thread that owns the [`super::SimNetwork`]; the public handles borrow
//! it through a `RefCell` for the duration of one call.
//!
//! Layout: one global table of queue pairs (`qps`, indexed by a `usize` that
//! never changes), one table of endpoints (`eps`), and one event queue ordered by
//! `(virtual time, sequence number)`. Only `Vec`, `VecDeque` and `BTreeMap` are
//! used, so no iteration order depends on hashing.
//!
//! This file holds that state, the clock, the trace, endpoints, regions and
//! queue resources; `cm.rs` the connection manager, `datapath.rs` posting,
//! polling and executing work requests, `step.rs` the event loop and the
//! faults it injects.

mod cm;
mod datapath;
mod step;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use mempool::region::Region;

use super::rng::SimRng;
use super::{ConnState, FaultKind, SimConfig, SimStats, TraceEvent};
use super::{LISTEN_BACKLOG, MAX_QUEUE_DEPTH, SIM_MAX_INLINE, SIM_MAX_MSG_SIZE};
use crate::fabric::{
    Access, CmEvent, Completion, ConnId, ConnReqId, CqId, FabricError, ListenerId, LocalBuf, MrKeys, PrivateData,
    QpConfig, RecvWr, RegionAccess, RemoteBuf, SendOp, SendWr, SrqId, WcOpcode, WcStatus, MAX_SGE,
};

/// RNR retry count meaning "retry forever" (IB: the 3-bit field's value 7).
const RNR_RETRY_INFINITE: u8 = 7;

/// A registered region at one endpoint.
struct Mr {
    region: Arc<Region>,
    keys: MrKeys,
    /// Registered [`RegionAccess::Exposable`]: windows may be opened on it.
    exposable: bool,
}

/// A window ([`crate::fabric::Fabric::expose`]) at one endpoint: part of a
/// region, open to the peer of one QP only, for one kind of access, until
/// hidden or invalidated by that peer's Send with Invalidate.
struct Window {
    /// Global index of the QP (at this endpoint) whose peer may use it.
    qp: usize,
    region: usize,
    start: u64,
    len: u64,
    access: Access,
    rkey: u32,
    /// False once the peer invalidated it (the slot stays taken until hidden).
    valid: bool,
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
    /// Windows, indexed by the rkey's middle 16 bits; `None` is a free slot.
    windows: Vec<Option<Window>>,
    /// Free slots of `windows`.
    free_windows: Vec<usize>,
    /// Bumped for every window opened: the rkey's low byte, so a stale key
    /// of a reused slot fails.
    window_gen: u8,
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
            windows: Vec::new(),
            free_windows: Vec::new(),
            window_gen: 0,
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

    pub(super) fn register_region(
        &mut self,
        ep: usize,
        region: &Arc<Region>,
        access: RegionAccess,
    ) -> Result<MrKeys, FabricError> {
        let id = region.id() as usize;
        if let Some(Some(mr)) = self.eps[ep].regs.get(id) {
            if Arc::ptr_eq(&mr.region, region) && mr.exposable == (access == RegionAccess::Exposable) {
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
            exposable: access == RegionAccess::Exposable,
        });
        Ok(keys)
    }

    /// [`crate::fabric::Fabric::expose`] at endpoint `ep`.
    pub(super) fn expose(
        &mut self,
        ep: usize,
        conn: ConnId,
        buf: LocalBuf,
        access: Access,
    ) -> Result<RemoteBuf, FabricError> {
        let q = self.qp_of(ep, conn)?;
        let e = &mut self.eps[ep];
        let id = buf.region as usize;
        let mr = e
            .regs
            .get(id)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotRegistered { region: buf.region })?;
        if !mr.exposable {
            return Err(FabricError::Unsupported(
                "exposing a region registered for local access",
            ));
        }
        if !in_bounds(mr.region.len(), buf.offset, u64::from(buf.len)) {
            return Err(FabricError::BadAddress(format!("{buf:?} is outside its region")));
        }
        let slot = match e.free_windows.pop() {
            Some(k) => k,
            None if e.windows.len() < 1 << 16 => {
                e.windows.push(None);
                e.windows.len() - 1
            }
            None => return Err(FabricError::QueueFull { what: "windows" }),
        };
        e.window_gen = e.window_gen.wrapping_add(1);
        let rkey = (u32::from(e.tag) << 24) | ((slot as u32) << 8) | u32::from(e.window_gen);
        e.windows[slot] = Some(Window {
            qp: q,
            region: id,
            start: buf.offset,
            len: u64::from(buf.len),
            access,
            rkey,
            valid: true,
        });
        Ok(RemoteBuf {
            handle: rkey,
            length: buf.len,
            offset: buf.offset,
        })
    }

    /// [`crate::fabric::Fabric::hide`] at endpoint `ep`.
    pub(super) fn hide(&mut self, ep: usize, conn: ConnId, rkey: u32) {
        let Ok(q) = self.qp_of(ep, conn) else { return };
        let e = &mut self.eps[ep];
        let slot = ((rkey >> 8) & 0xffff) as usize;
        if e.windows
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|w| w.rkey == rkey && w.qp == q)
        {
            e.windows[slot] = None;
            e.free_windows.push(slot);
        }
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

    pub(super) fn region_keys(&self, ep: usize, region: u16) -> Option<MrKeys> {
        self.eps[ep].regs.get(region as usize)?.as_ref().map(|m| m.keys)
    }

    pub(super) fn rkey_valid(&self, ep: usize, rkey: u32) -> bool {
        let slot = ((rkey >> 8) & 0xffff) as usize;
        self.eps[ep]
            .windows
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|w| w.rkey == rkey && w.valid)
    }

    /// Slot of the *valid* window `rkey` at endpoint `ep` open to the peer
    /// of QP `q`: the rkey's middle 16 bits are the slot (an array index, no
    /// lookup). A region's own key, another QP's window, a hidden or
    /// invalidated one: `None`.
    fn window_index(&self, ep: usize, q: usize, rkey: u32) -> Option<usize> {
        let slot = ((rkey >> 8) & 0xffff) as usize;
        let w = self.eps[ep].windows.get(slot)?.as_ref()?;
        (w.rkey == rkey && w.valid && w.qp == q).then_some(slot)
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

    /// Address of `len` bytes of a remote buffer at endpoint `ep`, reached
    /// through its QP `q` for `access`: a valid window of that QP allowing
    /// it, `len` within the advertised segment, the range inside the window.
    fn remote_range(&self, ep: usize, q: usize, seg: &RemoteBuf, len: u64, access: Access) -> Option<*mut u8> {
        let slot = self.window_index(ep, q, seg.handle)?;
        let w = self.eps[ep].windows[slot].as_ref()?;
        let end = seg.offset.checked_add(len)?;
        if !w.access.allows(access) || len > u64::from(seg.length) || seg.offset < w.start || end > w.start + w.len {
            return None;
        }
        let mr = self.eps[ep].regs[w.region].as_ref()?;
        if !in_bounds(mr.region.len(), seg.offset, len) {
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
}
