//! `shm`: the [`Fabric`] between two processes on one host, over shared
//! memory — the embedded default when no RDMA device is present.
//!
//! # Model
//!
//! - **Connection management** runs over an `AF_UNIX` `SOCK_SEQPACKET` socket
//!   (address: a filesystem path, or `@name` in the abstract namespace). The
//!   active side sends REQ, the passive side ACCEPT or REJECT, the active side
//!   RTU (message layout in `shm/wire.rs`). REQ and ACCEPT carry the CM
//!   private data (as an RDMA-CM REQ/REP does, RFC 8797 section 5.1) and, as
//!   `SCM_RIGHTS`, the descriptor of the sender's *ring file* and of every
//!   region it registered, with (region id, length, rkey) for each: each side
//!   maps all of the peer's registered regions read-write. The socket carries
//!   nothing else; closing it is the disconnect notification (liveness), and it
//!   is polled, non-blocking, only by [`Fabric::poll_cm`], at most once per
//!   [`ShmConfig::cm_sweep_period`] (an orderly close is seen sooner, on the
//!   data path, through the ring file's `closed` word).
//! - **Data path**: no system call. Each side's ring file holds the rings of
//!   its inbound direction: a receive-descriptor ring (the receiver posts
//!   `(rkey, offset, len, seq)` of its receive buffers; the sender pops) and a
//!   delivery ring (the sender pushes "the Send landed in descriptor `seq`,
//!   `byte_len` bytes, maybe invalidate `rkey`"; the receiver turns entries
//!   into Recv completions when it polls its CQ). Both are SPSC rings inside
//!   the shared mapping ([`ring`]).
//! - **One-sided, like RDMA**: the initiator does all the work in its own
//!   process, synchronously inside `post_send` (or a later `poll_cq` when the
//!   Send waits for a receive): a Send pops the peer's next descriptor, gathers
//!   the local SGEs into that buffer (in the peer's region, mapped here) and
//!   pushes the delivery entry; an RDMA Write / Read is a `memcpy` into / out
//!   of the peer's region after the key and bounds checks, in slices of at
//!   most [`ShmConfig::copy_slice_bytes`] per connection per poll (each
//!   slice after the same checks), so one connection's 1 MiB chunk does not
//!   hold up the other connections' messages: it completes with its last
//!   slice. Work requests of a QP execute and complete in posting order, so
//!   a Send is ordered after the Writes posted before it, and the delivery
//!   ring's Release store publishes the Writes' bytes together with the
//!   Send.
//! - **Direct placement**: since the peer's registered regions are mapped here,
//!   [`Fabric::remote_window`] hands out the memory an RDMA Write to a segment
//!   would write (same key and bounds checks; only on an established
//!   connection with nothing queued), so the responder's service can fill a
//!   Write chunk with plain stores; the next Send publishes them, as it does
//!   an RDMA Write's bytes.
//!
//! # Addresses and keys
//!
//! - `remote_addr(region, offset)` is `offset`: segments carry a
//!   **region-relative offset**, and the rkey names the region.
//! - A region's rkey (= lkey) is `salt << 16 | region id`, where `salt` is a
//!   per-fabric-instance 16-bit value; a peer's key is resolved by indexing its
//!   region table with the low 16 bits and comparing the whole key.
//! - As on hardware, the bound checked for an RDMA Write / Read is the
//!   registered region (`offset + local length <= region length`), not the
//!   segment's `length`. Zero-length operations are checked too (stricter than
//!   IB, which skips the key check for them).
//! - Regions registered after a connection was set up are not known to that
//!   peer (accesses to them fail with RemoteAccess).
//! - SendWithInv reports the rkey in the receiver's completion
//!   (`invalidated_rkey`); registrations are persistent, so nothing is
//!   actually invalidated.
//!
//! # Errors
//!
//! | what | initiator's completion | peer |
//! |---|---|---|
//! | local SGE unregistered or out of range | LocalProtection | Disconnected |
//! | Write/Read with bad rkey or out of range | RemoteAccess | Disconnected |
//! | Send larger than the receive buffer | RemoteInvalidRequest | Recv LocalLength |
//! | no receive posted, retries exhausted | RnrRetryExceeded | Disconnected |
//!
//! Any error completion moves the connection to the error state: the ring
//! file's `closed` word is set and the socket closed, so the peer's next
//! `poll_cq` or `poll_cm` moves its side to error too. Receives that landed
//! before complete normally; every other outstanding work request completes
//! with Flushed (QPs on an SRQ give their held receives back to the SRQ, as IB
//! does not flush SRQ receives when one QP fails); one terminal CM event
//! ([`CmEvent::Disconnected`], or `Rejected` / `Unreachable` before
//! establishment) is queued. A connection's slot is reused only after its
//! terminal event was polled and everything was flushed.
//!
//! RNR: a Send with no receive posted waits at the head of the send queue
//! (later work requests wait behind it); it is retried on every `poll_cq`, and
//! after `rnr_retry` periods of [`ShmConfig::rnr_timer`] it fails with
//! RnrRetryExceeded (`rnr_retry == 7`: forever).
//!
//! # Shared receive queues
//!
//! An SRQ is a local bounded queue of receives. Each QP attached to it has its
//! own descriptor ring, fed from the SRQ by this process (in `post_srq_recv`,
//! round-robin over the attached QPs, and topped up in every `poll_cq`), so
//! that at most [`ShmConfig::srq_window`] receives are handed to any one QP.
//! A receive handed to a QP can only be consumed by that QP's peer: size the
//! SRQ at least `srq_window` × QPs to avoid RNR on one QP while another holds
//! idle buffers.
//!
//! # Completion queues and bounds
//!
//! All queues are bounded and allocated when created. A CQ never overflows:
//! progress (executing sends, turning deliveries into completions, flushing)
//! happens only while the CQ has room, and resumes as the consumer polls.
//! `send_depth` bounds work requests waiting to execute (executed ones have
//! their completion in the CQ already); `recv_depth` (or `srq_window`) bounds
//! receives held by a QP, and sizes its rings (next power of two).
//!
//! # Cost of a poll
//!
//! `poll_cq` progresses every connection bound to the CQ (a few atomic loads
//! each when idle), so its cost is linear in the connections on that CQ.
//! `QpConfig::max_inline`, `max_rdma_reads` and `retry_count` are accepted and
//! ignored: copies are made by this process (a Read is complete when it
//! completes) and there is no lossy transport to retry over. A poll copies
//! at most [`ShmConfig::copy_slice_bytes`] of RDMA data per connection.
//!
//! # Trust
//!
//! The peer process is not trusted not to be buggy: everything read from the
//! shared rings and the socket is validated (indices, sequence numbers,
//! lengths, keys, descriptor counts, file sizes and seals), and a violation
//! moves the connection to error instead of panicking or touching memory
//! outside our mappings. The key checks are *cooperative*, though: the peer
//! has all our registered regions mapped and could write them without asking;
//! shm gives no isolation between the two processes beyond that.
//!
//! # Threading
//!
//! A `ShmFabric` is `Send` and belongs to one core; every method is called
//! from that core only (the trait's rule). Two fabrics in one process (tests)
//! work like two processes.
//!
//! # Files
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | configuration, the fabric object, its CQs and SRQs, posting and polling |
//! | `setup.rs` | connection setup over the Unix socket, CM events |
//! | `memory.rs` | region registration, addresses, windows into the peer's regions |
//! | `conn.rs` | one connection (queue pair) and its data path |
//! | `ring.rs` | the SPSC rings in the shared ring file |
//! | `mapping.rs` | the sealed memfd files that hold a connection's rings |
//! | `sock.rs` | the `SOCK_SEQPACKET` socket and descriptor passing |
//! | `wire.rs` | the CM message layout |
//! | `tests.rs` | tests of the fabric object |

pub mod mapping;
pub mod ring;

mod conn;
mod doorbell;
mod memory;
pub mod peermap;
mod setup;
mod sock;
pub mod window;
pub mod wire;

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conn::{Conn, Cq, LocalRegion, Peer, RegionTable, Srq, State};
use sock::{Recv, UnixAddr};
use wire::{Hello, Msg, RegionInfo, MAX_MSG_LEN};

use crate::fabric::{
    Access, Caps, CmEvent, Completion, ConnId, ConnReqId, CqId, Fabric, FabricError, ListenerId, LocalBuf, MrKeys,
    PrivateData, QpConfig, RecvWr, RegionAccess, RemoteBuf, SendWr, SrqId, MAX_SGE,
};
use crate::queue::GenSlab as Slab;

pub use conn::{file_layout, Layout, COPY_SLICE_BYTES};
pub use wire::MAX_REGIONS;

/// Largest CQ / SRQ depth accepted.
pub const MAX_QUEUE_DEPTH: u32 = 1 << 20;
/// Most connections one fabric may have (connection ids hold a 16-bit index).
pub const MAX_CONNS: u16 = u16::MAX;

const _: () = assert!(MAX_REGIONS < sock::MAX_FDS);

/// Configuration of an [`ShmFabric`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Most connections at once (live ones plus those not yet reaped).
    pub max_conns: u16,
    /// Largest per-QP receive ring, in entries: `QpConfig::recv_depth` (or
    /// `srq_window`) above this is refused. A peer's rings above it too.
    pub max_ring_depth: u32,
    /// Receives an SRQ hands to each attached QP's ring at most.
    pub srq_window: u32,
    /// Receiver-not-ready timer period (IB's `min_rnr_timer`).
    pub rnr_timer: Duration,
    /// Connection setup (REQ to RTU) must finish within this.
    pub connect_timeout: Duration,
    /// Largest message (Send, Write or Read) in bytes.
    pub max_msg_size: u32,
    /// Incoming connections that may wait for their REQ or for the consumer's
    /// accept/reject at once.
    pub max_pending_requests: u16,
    /// Refuse a peer whose regions are not sealed against shrinking (a peer
    /// that can truncate a region could make our accesses fault). Regions in a
    /// hugetlbfs directory cannot be sealed; set `false` to allow them.
    pub require_sealed_regions: bool,
    /// The connection manager's socket work (accepting, reading handshake
    /// messages, noticing a closed socket, connection timeouts) runs in
    /// [`Fabric::poll_cm`] at most once per this period; polls in between
    /// only hand out events already queued. It bounds the system calls of an
    /// engine that polls CM from a busy loop (one `accept` per listener and
    /// one `recvmsg` per connection each time). `ZERO`: on every poll.
    pub cm_sweep_period: Duration,
    /// Bytes at the front of a receive buffer to prefetch into this CPU's
    /// cache as soon as a delivery for it is seen, before the delivery entry
    /// is read (rounded up to cache lines, at most the buffer). A receiver
    /// that reads what it receives (an RPC engine decoding a Call or Reply)
    /// then fetches the message's lines from the sending CPU in parallel with
    /// the entry's instead of after it. `0` (the default): no prefetch, best
    /// for receivers that do not read their messages.
    pub recv_prefetch_bytes: u32,
    /// Bytes of each receive slot in a connection's ring file: a Send is
    /// copied there by the peer and from there into the posted receive
    /// buffer, so the peer maps none of our buffers. A Send longer than
    /// this fails as one longer than the receive buffer does. A multiple of
    /// 64; the slots are touched only as far as messages reach.
    pub recv_slot_bytes: u32,
    /// Window entries ([`Fabric::expose`]) each connection's table holds:
    /// the chunks of the Calls one requester connection may have in flight
    /// at once. At most [`window::MAX_WINDOWS`].
    pub max_windows: u32,
    /// Most bytes of RDMA Read and Write data one connection copies per
    /// poll ([`COPY_SLICE_BYTES`], the default, says why): a larger work
    /// request is copied over successive polls, interleaved with the other
    /// connections' work, and completes when its last byte is copied.
    /// Positive; `u32::MAX` copies every work request in one go.
    pub copy_slice_bytes: u32,
}

/// [`ShmConfig::recv_prefetch_bytes`] for RPC engines: four cache lines hold
/// the transport header and the RPC header of every Call and Reply the
/// engines send inline in the common cases (a NULL, a READ Call with its
/// Write chunk and AUTH_SYS credential, a READ Reply's head).
pub const RPC_RECV_PREFETCH_BYTES: u32 = 256;

impl ShmConfig {
    /// The defaults, with receive buffers prefetched
    /// ([`RPC_RECV_PREFETCH_BYTES`]): the provider as a receiver that reads
    /// every message (an RPC engine) is best served.
    pub fn for_rpc_engine() -> ShmConfig {
        ShmConfig {
            recv_prefetch_bytes: RPC_RECV_PREFETCH_BYTES,
            ..ShmConfig::default()
        }
    }
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            max_conns: 256,
            max_ring_depth: 4096,
            srq_window: 64,
            rnr_timer: Duration::from_millis(1),
            connect_timeout: Duration::from_secs(5),
            max_msg_size: 1 << 30,
            max_pending_requests: 64,
            require_sealed_regions: true,
            cm_sweep_period: Duration::from_millis(1),
            recv_prefetch_bytes: 0,
            recv_slot_bytes: 64 << 10,
            max_windows: 1024,
            copy_slice_bytes: COPY_SLICE_BYTES,
        }
    }
}

#[derive(Debug)]
struct Listener {
    fd: OwnedFd,
    path: Option<PathBuf>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// An accepted socket whose REQ has not arrived yet.
#[derive(Debug)]
struct Incoming {
    listener: ListenerId,
    sock: OwnedFd,
    deadline: Instant,
}

/// A decoded REQ waiting for accept or reject.
#[derive(Debug)]
struct Request {
    sock: OwnedFd,
    hello: Hello,
    fds: Vec<OwnedFd>,
}

static NEXT_SALT: AtomicU32 = AtomicU32::new(0);

/// A 16-bit key salt, different for every fabric of this process and unlikely
/// to repeat across processes.
pub(super) fn new_salt() -> u16 {
    let n = NEXT_SALT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mix = (std::process::id() as u64) << 32 ^ (nanos as u64) ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let s = (mix ^ (mix >> 16) ^ (mix >> 32) ^ (mix >> 48)) as u16;
    // Non-zero, so a zeroed segment never carries a valid key.
    s.wrapping_add(n as u16) | 1
}

/// The shared-memory fabric. See the module documentation.
#[derive(Debug)]
pub struct ShmFabric {
    cfg: ShmConfig,
    salt: u16,
    regions: RegionTable,
    cqs: Vec<Cq>,
    srqs: Vec<Srq>,
    conns: Slab<Conn>,
    listeners: Vec<Listener>,
    incoming: Vec<Incoming>,
    requests: Slab<Request>,
    events: VecDeque<CmEvent>,
    msg: Box<[u8; MAX_MSG_LEN]>,
    fds_in: Vec<OwnedFd>,
    /// The next connection-manager socket sweep is due then.
    next_cm_sweep: Instant,
    /// Our doorbell, passed to every peer (`doorbell`); `None` if no
    /// eventfd could be had (the fabric then never arms).
    bell: Option<doorbell::Bell>,
    /// Some connection has send work the next poll executes (a Read or
    /// Write copied in slices): [`Fabric::progressing`]. Set by posts,
    /// recomputed by every progress of the connections.
    progressing: bool,
}

fn io_err(op: &'static str) -> impl FnOnce(std::io::Error) -> FabricError {
    move |e| FabricError::io(op, e)
}

impl ShmFabric {
    /// A fabric with no regions, queues or connections yet. Start-up; any
    /// thread (then owned by one core).
    pub fn new(cfg: ShmConfig) -> Result<ShmFabric, FabricError> {
        if cfg.max_conns == 0 || cfg.max_pending_requests == 0 {
            return Err(FabricError::Other(
                "max_conns and max_pending_requests must be positive".into(),
            ));
        }
        if cfg.max_ring_depth == 0 || cfg.max_ring_depth > ring::MAX_RING_CAP {
            return Err(FabricError::Other(format!(
                "max_ring_depth must be in 1..={}",
                ring::MAX_RING_CAP
            )));
        }
        if conn::file_layout(1, cfg.max_windows, cfg.recv_slot_bytes).is_none() {
            return Err(FabricError::Other(format!(
                "recv_slot_bytes must be a positive multiple of 64 and max_windows at most {}",
                window::MAX_WINDOWS
            )));
        }
        if cfg.copy_slice_bytes == 0 {
            return Err(FabricError::Other("copy_slice_bytes must be positive".into()));
        }
        if cfg.srq_window == 0 || cfg.srq_window > cfg.max_ring_depth {
            return Err(FabricError::Other("srq_window must be in 1..=max_ring_depth".into()));
        }
        let events = 2 * cfg.max_conns as usize + 2 * cfg.max_pending_requests as usize;
        Ok(ShmFabric {
            salt: new_salt(),
            regions: RegionTable::default(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            conns: Slab::with_capacity(cfg.max_conns),
            listeners: Vec::new(),
            incoming: Vec::with_capacity(cfg.max_pending_requests as usize),
            requests: Slab::with_capacity(cfg.max_pending_requests),
            events: VecDeque::with_capacity(events),
            msg: Box::new([0; MAX_MSG_LEN]),
            fds_in: Vec::with_capacity(sock::MAX_FDS),
            next_cm_sweep: Instant::now(),
            bell: doorbell::Bell::new().ok(),
            progressing: false,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShmConfig {
        &self.cfg
    }

    /// The key region `region` was registered with, if it was (tests: a
    /// hostile peer presenting a region's real key). Owning core.
    pub fn region_key(&self, region: u16) -> Option<u32> {
        self.regions.rkey(region)
    }

    /// How many of the peer's regions connection `conn` mapped (`None`
    /// before the peer's ring file and regions arrived): a responder's peer
    /// maps none. Owning core.
    pub fn peer_regions_mapped(&self, conn: ConnId) -> Option<usize> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        c.peer.as_ref().map(conn::Peer::regions_mapped)
    }

    /// Connections currently held (live or waiting to be reaped). Any time.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    fn check_qp(&self, qp: &QpConfig) -> Result<(usize, Option<usize>), FabricError> {
        let (cq, srq) = qp.check_ids(self.cqs.len(), self.srqs.len())?;
        if qp.send_depth == 0 || qp.send_depth > MAX_QUEUE_DEPTH {
            return Err(FabricError::Other(format!(
                "send_depth must be in 1..={MAX_QUEUE_DEPTH}"
            )));
        }
        Ok((cq, srq))
    }

    /// Remove connection `ci` if it is over and its terminal event was polled.
    fn try_reap(&mut self, ci: usize) {
        let Some(c) = self.conns.get(ci) else { return };
        if !(c.finished() && c.terminal_delivered) {
            return;
        }
        let (cq, srq) = (c.cq, c.srq);
        if let Some(p) = self.cqs[cq].conns.iter().position(|&x| x == ci) {
            self.cqs[cq].conns.swap_remove(p);
        }
        if let Some(s) = srq {
            let v = &mut self.srqs[s].conns;
            if let Some(p) = v.iter().position(|&x| x == ci) {
                v.swap_remove(p);
            }
        }
        self.conns.remove(ci);
    }

    /// Hand queued SRQ receives to the attached QPs, one at a time,
    /// round-robin, each QP up to its window.
    fn distribute_srq(&mut self, s: usize) {
        let Self {
            srqs,
            conns,
            regions,
            events,
            ..
        } = self;
        let srq = &mut srqs[s];
        let n = srq.conns.len();
        while let Some(&wr) = srq.queue.front() {
            let mut target = None;
            for _ in 0..n {
                let ci = srq.conns[srq.next % n];
                srq.next = srq.next.wrapping_add(1);
                if conns.get(ci).is_some_and(|c| c.is_live() && c.recv_room()) {
                    target = Some(ci);
                    break;
                }
            }
            let Some(ci) = target else { break };
            let id = ConnId(conns.id_of(ci));
            let Some(c) = conns.get_mut(ci) else { break };
            srq.queue.pop_front();
            if !c.give(id, wr, regions, events) {
                srq.queue.push_front(wr);
            }
        }
    }

    /// Progress every connection bound to CQ `qi` (data path).
    fn progress_cq(&mut self, qi: usize) {
        let Self {
            conns,
            cqs,
            srqs,
            regions,
            cfg,
            events,
            ..
        } = self;
        let (mut reap, mut pending) = (false, false);
        let mut k = 0;
        while k < cqs[qi].conns.len() {
            let ci = cqs[qi].conns[k];
            k += 1;
            let id = ConnId(conns.id_of(ci));
            let Some(c) = conns.get_mut(ci) else { continue };
            let srq = c.srq.map(|s| &mut srqs[s]);
            c.new_turn(cfg);
            c.progress(id, &mut cqs[qi], srq, regions, cfg, events);
            reap |= c.finished() && c.terminal_delivered;
            pending |= c.sends_pending();
        }
        // One CQ's connections (the engines use one CQ per fabric).
        self.progressing = pending;
        if reap {
            let list: Vec<usize> = self.cqs[qi].conns.clone();
            for ci in list {
                self.try_reap(ci);
            }
        }
    }
}

impl Fabric for ShmFabric {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn caps(&self) -> Caps {
        Caps {
            send_with_invalidate: true,
            srq: true,
            max_inline: 0,
            max_sge: MAX_SGE as u32,
            max_msg_size: self.cfg.max_msg_size,
        }
    }

    /// Registers `region` for local use; an exposable one is also passed to
    /// (and mapped by) every peer connected *after* this call, for the
    /// windows [`Fabric::expose`] opens. At most [`MAX_REGIONS`] regions.
    fn register_region(
        &mut self,
        region: &Arc<mempool::region::Region>,
        access: RegionAccess,
    ) -> Result<MrKeys, FabricError> {
        self.do_register_region(region, access)
    }

    /// An entry in the connection's window table: a few stores, no system
    /// call ([`window`]).
    fn expose(&mut self, conn: ConnId, buf: LocalBuf, access: Access) -> Result<RemoteBuf, FabricError> {
        self.do_expose(conn, buf, access)
    }

    fn hide(&mut self, conn: ConnId, handle: u32) {
        if let Some(c) = self.conns.index(conn.0).and_then(|ci| self.conns.get_mut(ci)) {
            c.hide(handle);
        }
    }

    /// Region-relative: returns `offset` (after checking the region is
    /// registered and `offset` is within it).
    fn remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError> {
        self.do_remote_addr(region, offset)
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId, FabricError> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH {
            return Err(FabricError::Other(format!("CQ depth must be in 1..={MAX_QUEUE_DEPTH}")));
        }
        self.cqs.push(Cq::new(depth as usize));
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    fn create_srq(&mut self, depth: u32) -> Result<SrqId, FabricError> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH {
            return Err(FabricError::Other(format!(
                "SRQ depth must be in 1..={MAX_QUEUE_DEPTH}"
            )));
        }
        self.srqs.push(Srq::new(depth));
        Ok(SrqId(self.srqs.len() as u32 - 1))
    }

    /// `addr`: a socket path, or `@name` (abstract namespace). A stale socket
    /// file at the path is replaced; the file is removed when the fabric is
    /// dropped.
    fn listen(&mut self, addr: &str) -> Result<ListenerId, FabricError> {
        self.do_listen(addr)
    }

    /// Creates the QP's rings and starts the connection; the outcome is a
    /// later `Established`, `Rejected` or `Unreachable` event (a refused or
    /// missing socket is `Unreachable`, not an error here).
    fn connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        self.do_connect(addr, qp, private_data)
    }

    /// Maps the requester's ring file and regions, creates this side's rings
    /// and answers ACCEPT. `Established` follows when the requester confirms.
    /// On a local failure the request is dropped (the requester sees
    /// `Unreachable`) and the error returned.
    fn accept(&mut self, req: ConnReqId, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        self.do_accept(req, qp, private_data)
    }

    fn reject(&mut self, req: ConnReqId, private_data: &[u8]) -> Result<(), FabricError> {
        self.do_reject(req, private_data)
    }

    /// Moves the connection to error (outstanding work requests are flushed
    /// by later `poll_cq` calls) and queues `Disconnected`; the peer sees the
    /// socket close. Idempotent: a connection already in error, or already
    /// reaped, is `Ok`.
    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        self.do_disconnect(conn)
    }

    /// The peer's registered regions are mapped here, so a Write chunk can be
    /// filled with plain stores ([`conn::Conn::window`]).
    fn remote_window(&mut self, conn: ConnId, seg: &RemoteBuf, len: u32) -> Option<std::ptr::NonNull<u8>> {
        self.do_remote_window(conn, seg, len)
    }

    /// Both ends are on this host: the loopback address.
    fn peer_addr(&self, _conn: ConnId) -> Option<std::net::IpAddr> {
        Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
    }

    /// Hands out queued events; when none is queued and a sweep is due
    /// ([`ShmConfig::cm_sweep_period`]), does the socket work first.
    fn poll_cm(&mut self) -> Option<CmEvent> {
        self.do_poll_cm()
    }

    fn post_send(&mut self, conn: ConnId, wr: &SendWr) -> Result<(), FabricError> {
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        if wr.num_sge as usize > MAX_SGE {
            return Err(FabricError::Other(format!("num_sge {} > {MAX_SGE}", wr.num_sge)));
        }
        let Self {
            conns,
            cqs,
            srqs,
            regions,
            cfg,
            events,
            ..
        } = self;
        let Some(c) = conns.get_mut(ci) else {
            return Err(FabricError::NotConnected(conn));
        };
        if !matches!(c.state, State::Established | State::Error) {
            return Err(FabricError::NotConnected(conn));
        }
        if c.sq_len() >= c.qp.send_depth as usize {
            return Err(FabricError::QueueFull { what: "send queue" });
        }
        let srq = c.srq.map(|s| &mut srqs[s]);
        let cq = c.cq;
        c.post_send(conn, wr, &mut cqs[cq], srq, regions, cfg, events);
        self.progressing |= c.sends_pending();
        Ok(())
    }

    /// Receives may be posted from `connect`/`accept` on (before
    /// `Established`); on a connection in error they complete Flushed.
    fn post_recv(&mut self, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError> {
        if self.regions.resolve(&wr.buf).is_none() {
            return Err(match self.regions.rkey(wr.buf.region) {
                None => FabricError::NotRegistered { region: wr.buf.region },
                Some(_) => FabricError::BadAddress(format!("{:?} is outside its region", wr.buf)),
            });
        }
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let Self {
            conns, regions, events, ..
        } = self;
        let Some(c) = conns.get_mut(ci) else {
            return Err(FabricError::NotConnected(conn));
        };
        if c.srq.is_some() {
            return Err(FabricError::Other("this connection receives from an SRQ".into()));
        }
        if !c.recv_room() {
            return Err(FabricError::QueueFull { what: "receive queue" });
        }
        c.post_recv(conn, *wr, regions, events);
        Ok(())
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError> {
        let s = srq.0 as usize;
        if s >= self.srqs.len() {
            return Err(FabricError::UnknownId { what: "srq", id: srq.0 });
        }
        if self.regions.resolve(&wr.buf).is_none() {
            return Err(match self.regions.rkey(wr.buf.region) {
                None => FabricError::NotRegistered { region: wr.buf.region },
                Some(_) => FabricError::BadAddress(format!("{:?} is outside its region", wr.buf)),
            });
        }
        let q = &mut self.srqs[s];
        if q.outstanding >= q.depth {
            return Err(FabricError::QueueFull {
                what: "shared receive queue",
            });
        }
        q.outstanding += 1;
        q.queue.push_back(*wr);
        self.distribute_srq(s);
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut [Completion]) -> usize {
        let qi = cq.0 as usize;
        if qi >= self.cqs.len() || out.is_empty() {
            return 0;
        }
        let mut n = pop_into(&mut self.cqs[qi], out);
        if n < out.len() {
            self.progress_cq(qi);
            n += pop_into(&mut self.cqs[qi], &mut out[n..]);
        }
        n
    }

    fn wake_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.do_wake_fds()
    }

    fn arm_wakeup(&mut self) -> bool {
        self.do_arm_wakeup()
    }

    fn disarm_wakeup(&mut self) {
        self.do_disarm_wakeup()
    }

    /// A Read or Write is being copied in slices, or other send work waits
    /// for the next poll ([`ShmConfig::copy_slice_bytes`]).
    fn progressing(&self) -> bool {
        self.progressing
    }
}

fn pop_into(cq: &mut Cq, out: &mut [Completion]) -> usize {
    let mut n = 0;
    while n < out.len() {
        let Some(c) = cq.queue.pop_front() else { break };
        out[n] = c;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests;
