//! `sim`: an in-process, deterministic [`Fabric`] provider with fault injection.
//!
//! A [`SimNetwork`] is shared by any number of [`SimFabric`] endpoints (one per
//! simulated host or core). Everything the network does — latencies, the
//! interleaving of different connections, memory keys, injected faults — comes
//! from one `u64` seed ([`SimConfig::seed`]) through the generator in [`rng`], and
//! all state lives in vectors and B-tree maps, so one seed always produces the same
//! sequence of completions and connection events (checked by
//! [`SimNetwork::trace_hash`]).
//!
//! # Threading
//!
//! Single-threaded: a network and its endpoints share state through
//! `Rc<RefCell<..>>` and are neither `Send` nor `Sync`. Every method is called
//! from the thread that created the network.
//!
//! # Driving the network: explicit steps
//!
//! Posting a work request or a CM call only *queues* work; nothing moves until the
//! test driver advances the network with [`SimNetwork::step`] (one event),
//! [`SimNetwork::run_until_idle`] or [`SimNetwork::run_for`] (virtual time).
//! `poll_cq` and `poll_cm` just pop what earlier steps delivered, so a test decides
//! exactly how the engine's polling interleaves with the network. For code that
//! runs its own poll loop, [`SimConfig::steps_per_poll`] makes every `poll_cq` /
//! `poll_cm` first advance the network by that many steps (default 0: off).
//!
//! Time is virtual (nanoseconds, [`SimNetwork::now_ns`]); it jumps to the next
//! event and never depends on the wall clock.
//!
//! # What the simulation guarantees (RDMA reliable connected semantics)
//!
//! - **One QP's send queue executes in posting order**, one work request at a time,
//!   and its completions are reported in posting order. A Send posted after an RDMA
//!   Write on the same QP is delivered after the Write's data is placed. An RDMA
//!   Read's data is placed when it executes, so a later Send never overtakes it.
//! - **Different QPs are reordered freely**: every execution and every ACK gets a
//!   random latency in `min_latency_ns..=max_latency_ns`, so which connection's
//!   work lands first depends on the seed.
//! - A send completion is generated when the ACK arrives, after the peer's receive
//!   completion: a reply can be received *before* the completion of the Send that
//!   carried the request, as on hardware.
//! - **Send** consumes the peer's oldest posted receive (its own receive queue, or
//!   the SRQ its QP uses). The receiver's completion carries `byte_len`. A Send
//!   longer than the receive buffer completes that receive with
//!   [`WcStatus::LocalLength`], the sender's work request with
//!   [`WcStatus::RemoteInvalidRequest`], and the connection goes to error. A receive
//!   buffer outside a registered region gives [`WcStatus::LocalProtection`] at the
//!   receiver (IB says Remote Operation Error at the sender, for which the trait has
//!   no variant: RemoteInvalidRequest again).
//! - **No receive posted (RNR)**: the Send is retried after `rnr_timer_ns` of
//!   virtual time, blocking that send queue (RC order), up to
//!   [`QpConfig::rnr_retry`] retries (7 or more: forever); then
//!   [`WcStatus::RnrRetryExceeded`] at the sender and the connection goes to error.
//! - **RDMA Write / Read** check the remote key, bounds and access at the target:
//!   the rkey must be a window the peer opened with [`Fabric::expose`] *for this
//!   connection* and for this access (Read or Write), not hidden or invalidated;
//!   a region's own key grants nothing (regions are registered for local
//!   access, RFC 8166 s8.1); the transfer
//!   (the local SGEs' total length) must fit in the segment's `length` **and** in
//!   the region from the segment's `offset`. Offsets are region-relative: what
//!   [`Fabric::remote_addr`] returns. Any failure completes the initiator's work
//!   request with [`WcStatus::RemoteAccess`] and both QPs go to error. The sim is
//!   slightly stricter than hardware here (which checks only the registration, not
//!   the advertised segment length): writing past what a peer advertised is a bug
//!   hardware would let corrupt memory silently.
//! - **Local SGEs** must lie inside a region registered at this endpoint (checked
//!   when the work request executes, as hardware does); otherwise
//!   [`WcStatus::LocalProtection`] and the connection goes to error.
//! - **Inline**: a Send or Write no longer than [`QpConfig::max_inline`] is copied
//!   when posted, so the buffer may be reused at once. Anything else is read when it
//!   executes: reusing a buffer before its completion sends the new bytes, which
//!   is what hardware does too and what the sim is meant to expose.
//! - **RDMA Reads** execute one at a time per QP like everything else, so
//!   [`QpConfig::max_rdma_reads`] is never exceeded; a QP with `max_rdma_reads == 0`
//!   refuses Reads at `post_send` ([`FabricError::Unsupported`]).
//! - **Unsignaled** work requests keep their send-queue slot until a later signaled
//!   completion on the same QP (verbs frees slots only then); posting beyond
//!   `send_depth` returns [`FabricError::QueueFull`].
//!
//! # Memory exposure and Send with Invalidate
//!
//! Regions are registered once for the life of the fabric, for local access
//! only; their keys open nothing to a peer. [`Fabric::expose`] opens a
//! *window*: part of an [`RegionAccess::Exposable`] region, for RDMA Reads or
//! for RDMA Writes, to the peer of one connection, under a fresh key (the
//! endpoint's tag, a slot, a generation byte) until [`Fabric::hide`]. A peer
//! on another connection presenting that key, or any peer presenting a
//! region's key, gets RemoteAccess (both QPs to error). [`SendOp::SendWithInv`]
//! of a valid window of the receiving connection makes the receive completion
//! carry `invalidated_rkey: Some(rkey)` and **revokes the window**: later RDMA
//! Reads/Writes with it fail with RemoteAccess, a second invalidation of it
//! fails, and [`Fabric::hide`] then only frees its slot. Invalidating a key that
//! is not such a window completes the consumed receive and the sender's work
//! request with RemoteInvalidRequest (as Linux rxe does) and the connection goes
//! to error.
//!
//! # Errors, flushes and disconnection
//!
//! When a QP goes to error (a failed work request, [`Fabric::disconnect`], an
//! injected fault, the peer failing) every outstanding work request — the send
//! queue in posting order, then the QP's own receives — completes with
//! [`WcStatus::Flushed`] (receives posted to an SRQ stay posted), then the
//! connection reports [`CmEvent::Disconnected`] exactly once. The peer learns of it
//! after a CM latency and does the same, unless it failed at the same moment (a
//! remote access error puts both sides in error at once). Work requests posted to
//! a connection in error are accepted and complete at once, flushed (as verbs);
//! posting a Send before the active side's `Established` is
//! [`FabricError::NotConnected`]. The passive side may post as soon as it accepted
//! (`rdma_accept` moves its QP to RTS); its sends execute once the active side has
//! its `Established`. A passive connection that fails before its `Established`
//! reports only `Disconnected`, and receive completions may precede its
//! `Established` (the active side can send first), both as with RDMA-CM.
//!
//! A CQ that overflows is a consumer bug (hardware raises a fatal CQ error): the
//! sim panics with a message saying so.
//!
//! # Connection management
//!
//! [`Fabric::listen`] takes any non-empty name, unique in the network.
//! `connect(name, ..)` delivers [`CmEvent::ConnectRequest`] with the private data
//! at the listener (or [`CmEvent::Unreachable`] when no endpoint listens on that
//! name, or `Rejected` with empty private data past [`LISTEN_BACKLOG`] pending
//! requests); `accept` gives the active side `Established` with the accept's private
//! data, then the passive side `Established` with none; `reject` gives the active
//! side `Rejected` with the reject's private data. Private data longer than
//! [`crate::fabric::MAX_PRIVATE_DATA`] is truncated. Dropping a [`SimFabric`] fails
//! all its connections (peers see flushes and `Disconnected`) and makes its names
//! unreachable.
//!
//! # Fault injection ([`SimFaults`], all zero by default)
//!
//! | field | effect |
//! |---|---|
//! | `flush_error` | per step: a random ready QP goes to error (flushes, Disconnected; the peer follows) |
//! | `wr_error` | per executed send work request: it fails with RemoteAccess (both sides to error at once) or RetryExceeded (the peer learns later) |
//! | `rnr` | per Send attempt: the receiver looks as if it had no receive posted (one RNR NAK and retry; exhausts a finite `rnr_retry`) |
//! | `lost_connection` | per step: a random connection's link dies: on each side the oldest outstanding send work request completes with RetryExceeded, the rest is flushed, both see Disconnected at once |
//! | `slow_peer`, `slow_peer_ns` | per endpoint at creation: it becomes slow, adding up to `slow_peer_ns` to every delivery from or to it (also [`SimNetwork::set_slow`]) |
//! | `recv_starvation`, `recv_starvation_ns` | per posted receive: it becomes usable only up to `recv_starvation_ns` later, and receives behind it wait too (FIFO) |
//!
//! `recv_starvation` is this layer's model of credit starvation: the receiver has
//! granted credits (reposted in its own view) but the network does not see the
//! receives yet, so the peer's Sends stall in RNR retries — a finite `rnr_retry`
//! turns that into RnrRetryExceeded — and the requester's credit window stays
//! closed. The engine-level view (grants withheld in headers) is driven by the
//! engine's own tests. Every fault is counted in [`SimStats::faults`] and recorded
//! as a [`TraceEvent::Fault`].
//!
//! # Seeded test runs
//!
//! [`check_seeds`] runs a closure for a range of seeds, honours `SIM_SEED=<n>` (run
//! only that seed) and `SIM_SEEDS=<count>`, and on failure prints
//! `sim failure: seed=<n> (reproduce with SIM_SEED=<n>)`.
//!
//! # Memory access
//!
//! The sim reads and writes registered regions through raw pointers, as a NIC
//! does by DMA: buffers handed over by posting belong to the provider until their
//! completion, and windows are open to the peer's RDMA Reads and Writes at any
//! time until hidden (the protocol decides when the owner looks). [`poke`] and [`peek`] are test
//! helpers for filling and checking region bytes.

mod net;
pub mod rng;
mod seeds;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use mempool::region::Region;

use crate::fabric::{
    Access, Caps, CmEvent, Completion, ConnId, ConnReqId, CqId, Fabric, FabricError, ListenerId, LocalBuf, MrKeys,
    QpConfig, RecvWr, RegionAccess, RemoteBuf, SendOp, SendWr, SrqId, WcOpcode, WcStatus, WrId, MAX_SGE,
};

pub use rng::SimRng;
pub use seeds::{check_seeds, run_seeds, seeds_from_env, SeedFailure};

/// Largest inline payload a QP may ask for ([`QpConfig::max_inline`]).
pub const SIM_MAX_INLINE: u32 = 256;
/// Largest message (Send, Write or Read) the sim carries.
pub const SIM_MAX_MSG_SIZE: u32 = 1 << 30;
/// Largest send, receive or shared receive queue (CQs may be 4 times larger).
pub const MAX_QUEUE_DEPTH: u32 = 1 << 16;
/// Connection requests a listener may have pending before new ones are rejected.
pub const LISTEN_BACKLOG: usize = 128;

const _: () = assert!(SIM_MAX_INLINE as u64 <= SIM_MAX_MSG_SIZE as u64);
const _: () = assert!((MAX_QUEUE_DEPTH as u64) * 4 <= u32::MAX as u64);
const _: () = assert!(MAX_SGE <= u8::MAX as usize);

/// Fault-injection rates. All default to zero (no faults). Probabilities are in
/// `0.0..=1.0`; see the module docs for what each one does.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct SimFaults {
    /// Per step: a random ready QP goes to error.
    pub flush_error: f64,
    /// Per executed send work request: RemoteAccess or RetryExceeded.
    pub wr_error: f64,
    /// Per Send attempt: an injected RNR NAK.
    pub rnr: f64,
    /// Per step: a random connection is lost on both sides.
    pub lost_connection: f64,
    /// Per endpoint, when created: it becomes slow.
    pub slow_peer: f64,
    /// A slow endpoint's extra delay is uniform in `1..=slow_peer_ns`.
    pub slow_peer_ns: u64,
    /// Per posted receive: it becomes usable only later.
    pub recv_starvation: f64,
    /// A starved receive's extra delay is uniform in `1..=recv_starvation_ns`.
    pub recv_starvation_ns: u64,
}

impl SimFaults {
    /// No faults.
    pub const NONE: SimFaults = SimFaults {
        flush_error: 0.0,
        wr_error: 0.0,
        rnr: 0.0,
        lost_connection: 0.0,
        slow_peer: 0.0,
        slow_peer_ns: 0,
        recv_starvation: 0.0,
        recv_starvation_ns: 0,
    };

    /// # Panics
    /// When a probability is outside `0.0..=1.0` or NaN.
    fn validate(&self) {
        for (name, p) in self.probabilities() {
            assert!((0.0..=1.0).contains(&p), "SimFaults::{name} = {p} is not a probability");
        }
    }

    fn probabilities(&self) -> [(&'static str, f64); 6] {
        [
            ("flush_error", self.flush_error),
            ("wr_error", self.wr_error),
            ("rnr", self.rnr),
            ("lost_connection", self.lost_connection),
            ("slow_peer", self.slow_peer),
            ("recv_starvation", self.recv_starvation),
        ]
    }
}

/// Network configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The one source of every random choice.
    pub seed: u64,
    /// One-way latency of a data transfer or an ACK: uniform in
    /// `min_latency_ns..=max_latency_ns`.
    pub min_latency_ns: u64,
    pub max_latency_ns: u64,
    /// Connection-manager message latency: uniform in `1..=cm_latency_ns`.
    pub cm_latency_ns: u64,
    /// Delay before a Send that met no receive (RNR NAK) is retried.
    pub rnr_timer_ns: u64,
    pub faults: SimFaults,
    /// Keep every [`TraceEvent`] for [`SimNetwork::take_trace`] (the hash is
    /// always kept). Memory grows with the run; meant for tests.
    pub trace: bool,
    /// Steps `poll_cq` / `poll_cm` run before polling (0: the driver steps).
    pub steps_per_poll: u32,
}

impl SimConfig {
    /// Defaults with `seed`.
    pub fn with_seed(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            ..SimConfig::default()
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            min_latency_ns: 500,
            max_latency_ns: 5_000,
            cm_latency_ns: 20_000,
            rnr_timer_ns: 10_000,
            faults: SimFaults::NONE,
            trace: false,
            steps_per_poll: 0,
        }
    }
}

/// Which fault was injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    FlushError,
    WrError,
    Rnr,
    LostConnection,
    SlowPeer,
    RecvStarvation,
}

/// How many faults of each kind were injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub flush_errors: u64,
    pub wr_errors: u64,
    pub rnr: u64,
    pub lost_connections: u64,
    pub slow_peers: u64,
    pub starved_recvs: u64,
}

/// Network counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events processed.
    pub steps: u64,
    /// Successful Sends (including Send with Invalidate), RDMA Writes, RDMA Reads.
    pub sends: u64,
    pub writes: u64,
    pub reads: u64,
    /// RNR NAKs, injected or real.
    pub rnr_naks: u64,
    /// Connections that went to error because of a failed work request or a lost
    /// link (one per side).
    pub conn_errors: u64,
    pub faults: FaultCounts,
}

/// State of a simulated connection, for tests ([`SimFabric::conn_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Active side, waiting for the accept.
    Connecting,
    /// Ready to send and receive (RTS).
    Ready,
    /// Failed, disconnected, rejected or unreachable: only flushes from now on.
    Error,
}

/// One thing the network did. Every event feeds [`SimNetwork::trace_hash`]; with
/// [`SimConfig::trace`] they are also kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A send-queue work request took effect at the peer (`Success`) or failed.
    Executed {
        time_ns: u64,
        endpoint: u32,
        conn: ConnId,
        wr_id: WrId,
        op: SendOp,
        status: WcStatus,
    },
    /// A completion was queued on a CQ.
    Completion {
        time_ns: u64,
        endpoint: u32,
        cq: CqId,
        wc: Completion,
    },
    /// A CM event was queued.
    Cm {
        time_ns: u64,
        endpoint: u32,
        event: CmEvent,
    },
    /// A fault was injected.
    Fault {
        time_ns: u64,
        endpoint: u32,
        conn: Option<ConnId>,
        kind: FaultKind,
    },
}

fn status_code(s: WcStatus) -> u64 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocalLength => 1,
        WcStatus::LocalProtection => 2,
        WcStatus::Flushed => 3,
        WcStatus::RemoteAccess => 4,
        WcStatus::RemoteInvalidRequest => 5,
        WcStatus::RnrRetryExceeded => 6,
        WcStatus::RetryExceeded => 7,
        WcStatus::General => 8,
    }
}

fn op_code(op: SendOp) -> u64 {
    match op {
        SendOp::Send => 0,
        SendOp::SendWithInv { rkey } => 1 | (u64::from(rkey) << 8),
        SendOp::RdmaWrite => 2,
        SendOp::RdmaRead => 3,
    }
}

fn private_words(pd: &crate::fabric::PrivateData, f: &mut dyn FnMut(u64)) {
    let b = pd.as_bytes();
    f(b.len() as u64);
    for chunk in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        f(u64::from_le_bytes(w));
    }
}

impl TraceEvent {
    /// Virtual time of the event.
    pub fn time_ns(&self) -> u64 {
        match *self {
            TraceEvent::Executed { time_ns, .. }
            | TraceEvent::Completion { time_ns, .. }
            | TraceEvent::Cm { time_ns, .. }
            | TraceEvent::Fault { time_ns, .. } => time_ns,
        }
    }

    /// Feed a fixed encoding of the event to `f` (for hashing).
    fn hash_words(&self, f: &mut dyn FnMut(u64)) {
        match *self {
            TraceEvent::Executed {
                time_ns,
                endpoint,
                conn,
                wr_id,
                op,
                status,
            } => {
                for w in [
                    1,
                    time_ns,
                    endpoint.into(),
                    conn.0.into(),
                    wr_id.0,
                    op_code(op),
                    status_code(status),
                ] {
                    f(w);
                }
            }
            TraceEvent::Completion {
                time_ns,
                endpoint,
                cq,
                wc,
            } => {
                let opc = match wc.opcode {
                    WcOpcode::Send => 0,
                    WcOpcode::RdmaWrite => 1,
                    WcOpcode::RdmaRead => 2,
                    WcOpcode::Recv => 3,
                };
                let inv = wc.invalidated_rkey.map_or(0, |k| (1 << 32) | u64::from(k));
                for w in [
                    2,
                    time_ns,
                    endpoint.into(),
                    cq.0.into(),
                    wc.wr_id.0,
                    status_code(wc.status),
                    opc,
                    wc.conn.0.into(),
                    wc.byte_len.into(),
                    inv,
                ] {
                    f(w);
                }
            }
            TraceEvent::Cm {
                time_ns,
                endpoint,
                event,
            } => {
                f(3);
                f(time_ns);
                f(endpoint.into());
                match event {
                    CmEvent::ConnectRequest {
                        listener,
                        req,
                        private_data,
                    } => {
                        f(0);
                        f(listener.0.into());
                        f(req.0.into());
                        private_words(&private_data, f);
                    }
                    CmEvent::Established { conn, private_data } => {
                        f(1);
                        f(conn.0.into());
                        private_words(&private_data, f);
                    }
                    CmEvent::Rejected { conn, private_data } => {
                        f(2);
                        f(conn.0.into());
                        private_words(&private_data, f);
                    }
                    CmEvent::Unreachable { conn } => {
                        f(3);
                        f(conn.0.into());
                    }
                    CmEvent::Disconnected { conn } => {
                        f(4);
                        f(conn.0.into());
                    }
                }
            }
            TraceEvent::Fault {
                time_ns,
                endpoint,
                conn,
                kind,
            } => {
                let k = match kind {
                    FaultKind::FlushError => 0,
                    FaultKind::WrError => 1,
                    FaultKind::Rnr => 2,
                    FaultKind::LostConnection => 3,
                    FaultKind::SlowPeer => 4,
                    FaultKind::RecvStarvation => 5,
                };
                let c = conn.map_or(0, |c| (1 << 32) | u64::from(c.0));
                for w in [4, time_ns, endpoint.into(), c, k] {
                    f(w);
                }
            }
        }
    }
}

/// [`SimNetwork::run_until_idle`] gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("sim network not idle after {steps} steps (virtual time {now_ns} ns, {pending} events pending)")]
    NotIdle { steps: u64, now_ns: u64, pending: usize },
}

/// The simulated network: a handle (cheap to clone) to state shared with every
/// [`SimFabric`] made from it. Single-threaded; see the module docs.
#[derive(Clone)]
pub struct SimNetwork {
    inner: Rc<RefCell<net::Net>>,
}

impl fmt::Debug for SimNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.inner.borrow();
        f.debug_struct("SimNetwork")
            .field("seed", &n.cfg.seed)
            .field("now_ns", &n.now_ns())
            .field("endpoints", &n.endpoints())
            .field("pending_events", &n.pending_events())
            .finish()
    }
}

impl SimNetwork {
    /// A network configured by `cfg`.
    ///
    /// # Panics
    /// When a fault probability is outside `0.0..=1.0` (or NaN) or
    /// `min_latency_ns > max_latency_ns`: a mistake in the test, not an input.
    pub fn new(cfg: SimConfig) -> SimNetwork {
        cfg.faults.validate();
        assert!(
            cfg.min_latency_ns <= cfg.max_latency_ns,
            "SimConfig: min_latency_ns {} > max_latency_ns {}",
            cfg.min_latency_ns,
            cfg.max_latency_ns
        );
        SimNetwork {
            inner: Rc::new(RefCell::new(net::Net::new(cfg))),
        }
    }

    /// A network with default settings and `seed`.
    pub fn with_seed(seed: u64) -> SimNetwork {
        SimNetwork::new(SimConfig::with_seed(seed))
    }

    /// A new endpoint (a host with its own regions, CQs, SRQs and connections).
    pub fn endpoint(&self) -> SimFabric {
        let ep = self.inner.borrow_mut().add_endpoint();
        SimFabric {
            net: Rc::clone(&self.inner),
            ep,
        }
    }

    pub fn seed(&self) -> u64 {
        self.inner.borrow().cfg.seed
    }

    pub fn config(&self) -> SimConfig {
        self.inner.borrow().cfg.clone()
    }

    /// Virtual time, in nanoseconds since the network was made.
    pub fn now_ns(&self) -> u64 {
        self.inner.borrow().now_ns()
    }

    /// Process the earliest pending event (advancing the clock to it). Returns
    /// false, doing nothing, when no event is pending.
    pub fn step(&self) -> bool {
        self.inner.borrow_mut().step()
    }

    /// Step until no event is pending; returns the steps taken, or
    /// [`SimError::NotIdle`] after `max_steps` (e.g. a Send retrying RNR forever).
    pub fn run_until_idle(&self, max_steps: u64) -> Result<u64, SimError> {
        let mut n = self.inner.borrow_mut();
        let mut steps = 0;
        while steps < max_steps {
            if !n.step() {
                return Ok(steps);
            }
            steps += 1;
        }
        if n.pending_events() == 0 {
            return Ok(steps);
        }
        Err(SimError::NotIdle {
            steps,
            now_ns: n.now_ns(),
            pending: n.pending_events(),
        })
    }

    /// Process every event due in the next `duration_ns` of virtual time, then
    /// set the clock to the end of that interval. Returns the steps taken.
    pub fn run_for(&self, duration_ns: u64) -> u64 {
        self.inner.borrow_mut().run_for(duration_ns)
    }

    /// No event is pending.
    pub fn is_idle(&self) -> bool {
        self.inner.borrow().pending_events() == 0
    }

    pub fn pending_events(&self) -> usize {
        self.inner.borrow().pending_events()
    }

    /// Virtual time of the next event.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.inner.borrow().next_event_ns()
    }

    /// A hash of every event so far (completions, CM events, executions,
    /// faults, with their virtual times). Equal seeds and equal driving give
    /// equal hashes.
    pub fn trace_hash(&self) -> u64 {
        self.inner.borrow().trace_hash()
    }

    /// The events recorded since the last call (empty unless
    /// [`SimConfig::trace`]).
    pub fn take_trace(&self) -> Vec<TraceEvent> {
        self.inner.borrow_mut().take_trace()
    }

    pub fn stats(&self) -> SimStats {
        self.inner.borrow().stats()
    }

    /// Number of endpoints made so far.
    pub fn endpoints(&self) -> usize {
        self.inner.borrow().endpoints()
    }

    /// Change the fault rates from now on (e.g. connect cleanly, then inject).
    /// `slow_peer` applies to endpoints made afterwards.
    ///
    /// # Panics
    /// As [`SimNetwork::new`], for a probability outside `0.0..=1.0`.
    pub fn set_faults(&self, faults: SimFaults) {
        faults.validate();
        self.inner.borrow_mut().cfg.faults = faults;
    }

    /// Make endpoint `endpoint` slow: `extra_ns` is added to every delivery from
    /// or to it (0 restores it). False for an unknown endpoint.
    pub fn set_slow(&self, endpoint: u32, extra_ns: u64) -> bool {
        self.inner.borrow_mut().set_slow(endpoint as usize, extra_ns)
    }
}

/// One endpoint of a [`SimNetwork`]; implements [`Fabric`]. Not `Send`.
/// Dropping it fails its connections (see the module docs).
pub struct SimFabric {
    net: Rc<RefCell<net::Net>>,
    ep: usize,
}

impl fmt::Debug for SimFabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFabric").field("endpoint", &self.ep).finish()
    }
}

impl Drop for SimFabric {
    fn drop(&mut self) {
        if let Ok(mut n) = self.net.try_borrow_mut() {
            n.drop_endpoint(self.ep);
        }
    }
}

impl SimFabric {
    /// This endpoint's index in the network (as in [`TraceEvent`]s and
    /// [`SimNetwork::set_slow`]).
    pub fn endpoint_id(&self) -> u32 {
        self.ep as u32
    }

    /// A handle to the network this endpoint belongs to.
    pub fn network(&self) -> SimNetwork {
        SimNetwork {
            inner: Rc::clone(&self.net),
        }
    }

    /// State of a connection (`None` for an unknown id).
    pub fn conn_state(&self, conn: ConnId) -> Option<ConnState> {
        self.net.borrow().conn_state(self.ep, conn)
    }

    /// Send work requests posted on `conn` and not yet completed (executed or
    /// not); unsignaled ones leave this count when they execute and are acked.
    pub fn outstanding_sends(&self, conn: ConnId) -> usize {
        self.net.borrow().outstanding_sends(self.ep, conn)
    }

    /// Receives posted on `conn`'s own receive queue and not yet consumed.
    pub fn posted_recvs(&self, conn: ConnId) -> usize {
        self.net.borrow().posted_recvs(self.ep, conn)
    }

    /// Receives posted to `srq` and not yet consumed.
    pub fn srq_len(&self, srq: SrqId) -> usize {
        self.net.borrow().srq_len(self.ep, srq)
    }

    /// Completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.net.borrow().cq_len(self.ep, cq)
    }

    /// Whether `rkey` is a window ([`Fabric::expose`]) of this endpoint
    /// that still grants remote access (false once hidden or invalidated
    /// by a Send with Invalidate; always false for a region's own key).
    pub fn rkey_valid(&self, rkey: u32) -> bool {
        self.net.borrow().rkey_valid(self.ep, rkey)
    }

    /// The keys region `region` was registered with, if it was (tests: a
    /// hostile peer presenting a region's real key).
    pub fn region_keys(&self, region: u16) -> Option<MrKeys> {
        self.net.borrow().region_keys(self.ep, region)
    }
}

impl Fabric for SimFabric {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn caps(&self) -> Caps {
        Caps {
            send_with_invalidate: true,
            srq: true,
            max_inline: SIM_MAX_INLINE,
            max_sge: MAX_SGE as u32,
            max_msg_size: SIM_MAX_MSG_SIZE,
        }
    }

    /// Keys are `tag << 24 | region_id << 8 | key`: the region id is the array
    /// index, the endpoint tag and the random key byte catch keys used at the
    /// wrong endpoint or made up. Registering the same `Arc` again returns the
    /// same keys; another region with an already registered id is an error.
    fn register_region(&mut self, region: &Arc<Region>, access: RegionAccess) -> Result<MrKeys, FabricError> {
        self.net.borrow_mut().register_region(self.ep, region, access)
    }

    fn expose(&mut self, conn: ConnId, buf: LocalBuf, access: Access) -> Result<RemoteBuf, FabricError> {
        self.net.borrow_mut().expose(self.ep, conn, buf, access)
    }

    fn hide(&mut self, conn: ConnId, handle: u32) {
        self.net.borrow_mut().hide(self.ep, conn, handle)
    }

    /// Region-relative: returns `offset` (checked against the region).
    fn remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError> {
        self.net.borrow().remote_addr(self.ep, region, offset)
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId, FabricError> {
        self.net.borrow_mut().create_cq(self.ep, depth)
    }

    fn create_srq(&mut self, depth: u32) -> Result<SrqId, FabricError> {
        self.net.borrow_mut().create_srq(self.ep, depth)
    }

    fn listen(&mut self, addr: &str) -> Result<ListenerId, FabricError> {
        self.net.borrow_mut().listen(self.ep, addr)
    }

    fn connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        self.net.borrow_mut().connect(self.ep, addr, qp, private_data)
    }

    fn accept(&mut self, req: ConnReqId, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        self.net.borrow_mut().accept(self.ep, req, qp, private_data)
    }

    fn reject(&mut self, req: ConnReqId, private_data: &[u8]) -> Result<(), FabricError> {
        self.net.borrow_mut().reject(self.ep, req, private_data)
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        self.net.borrow_mut().disconnect(self.ep, conn)
    }

    /// Both ends are on this host: the loopback address.
    fn peer_addr(&self, _conn: ConnId) -> Option<std::net::IpAddr> {
        Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
    }

    fn poll_cm(&mut self) -> Option<CmEvent> {
        self.net.borrow_mut().poll_cm(self.ep)
    }

    fn post_send(&mut self, conn: ConnId, wr: &SendWr) -> Result<(), FabricError> {
        self.net.borrow_mut().post_send(self.ep, conn, wr)
    }

    fn post_recv(&mut self, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError> {
        self.net.borrow_mut().post_recv(self.ep, conn, wr)
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError> {
        self.net.borrow_mut().post_srq_recv(self.ep, srq, wr)
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut [Completion]) -> usize {
        self.net.borrow_mut().poll_cq(self.ep, cq, out)
    }
}

/// Copy `data` into `region` at `offset`. False (nothing written) when the range
/// is outside the region. A test helper.
///
/// # Safety
/// No reference to those bytes may be alive, and no other thread may access them
/// during the call (the same rule as for any write into a region).
pub unsafe fn poke(region: &Region, offset: u64, data: &[u8]) -> bool {
    let fits = offset
        .checked_add(data.len() as u64)
        .is_some_and(|end| end <= region.len() as u64);
    if !fits {
        return false;
    }
    // SAFETY: the range is inside the region's live mapping (checked above);
    // the caller guarantees nothing else accesses it; `data` cannot overlap a
    // range nobody may reference.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), region.as_ptr().add(offset as usize), data.len()) };
    true
}

/// Copy `out.len()` bytes of `region` from `offset` into `out`. False (nothing
/// read) when the range is outside the region. A test helper.
///
/// # Safety
/// No mutable reference to those bytes may be alive, and no other thread may
/// write them during the call.
pub unsafe fn peek(region: &Region, offset: u64, out: &mut [u8]) -> bool {
    let fits = offset
        .checked_add(out.len() as u64)
        .is_some_and(|end| end <= region.len() as u64);
    if !fits {
        return false;
    }
    // SAFETY: the range is inside the region's live mapping (checked above);
    // the caller guarantees nobody writes it; `out` is a distinct Rust buffer.
    unsafe { std::ptr::copy_nonoverlapping(region.as_ptr().add(offset as usize), out.as_mut_ptr(), out.len()) };
    true
}
