//! One shm connection (queue pair) and its data path: posting receive
//! descriptors, executing send-queue work requests by copying in this process,
//! turning the peer's delivery entries into receive completions, RNR retry, and
//! the error state (drain what landed, flush the rest).
//!
//! Everything here is called from the core that owns the [`super::ShmFabric`];
//! nothing makes a system call except `Instant::now()` (vDSO) while a Send
//! waits for the peer to post a receive.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mempool::region::Region;

use super::mapping::SharedFile;
use super::ring::{ring_bytes, Consumer, Producer, INDEX_BLOCK};
use super::sock::{self, UnixAddr};
use super::window::{self, Windows, MAX_WINDOWS, WINDOW_BYTES};
use super::ShmConfig;
use crate::fabric::{
    Access, CmEvent, Completion, ConnId, LocalBuf, PrivateData, QpConfig, RecvWr, RemoteBuf, SendOp, SendWr, WcOpcode,
    WcStatus, MAX_SGE,
};

/// Words of a receive descriptor: `len << 32`, spare, `seq`, spare. The
/// message lands in the receive slot `seq` names in the receiver's ring file,
/// never in the receiver's buffers: the sender maps none of them.
pub const DESC_WORDS: usize = 4;
/// Words of a delivery entry: `seq | byte_len << 32`, `kind | inv_rkey << 32`.
pub const DELIV_WORDS: usize = 2;

/// Delivery kinds.
const KIND_SEND: u32 = 1;
const KIND_SEND_INV: u32 = 2;
/// The message was larger than the receive buffer (receiver: LocalLength).
const KIND_LEN_ERR: u32 = 3;
/// The Send with Invalidate named a key that is no window of the receiver's
/// on this connection (receiver: RemoteInvalidRequest, as on rxe).
const KIND_INV_ERR: u32 = 5;

/// "RSHQ": magic of a connection's ring file.
const FILE_MAGIC: u32 = u32::from_le_bytes(*b"RSHQ");
const FILE_VERSION: u32 = 2;
/// Offsets in the ring file header. The `closed` word is alone in block 0 (it
/// is polled by the peer); magic, version and capacity sit in block 1.
const OFF_CLOSED: usize = 0;
const OFF_MAGIC: usize = INDEX_BLOCK;
const OFF_VERSION: usize = INDEX_BLOCK + 4;
const OFF_CAP: usize = INDEX_BLOCK + 8;
const OFF_WINDOWS: usize = INDEX_BLOCK + 12;
const OFF_SLOT: usize = INDEX_BLOCK + 16;
const FILE_HEADER: usize = 2 * INDEX_BLOCK;

const _: () = assert!(FILE_HEADER & (INDEX_BLOCK - 1) == 0);
const _: () = assert!(DESC_WORDS >= 3 && DELIV_WORDS >= 2);

/// Where the parts of a ring file live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub desc: usize,
    pub deliv: usize,
    /// The window table ([`window`]).
    pub windows: usize,
    /// The receive slots: `cap` slots of `slot_bytes`.
    pub area: usize,
    pub total: usize,
}

/// Round `n` up to a multiple of [`INDEX_BLOCK`].
fn block_up(n: usize) -> Option<usize> {
    Some(n.checked_add(INDEX_BLOCK - 1)? & !(INDEX_BLOCK - 1))
}

/// The layout of a ring file with rings of capacity `cap`, `windows` window
/// entries and receive slots of `slot_bytes`.
///
/// A connection's ring file holds *its owner's inbound direction* and what
/// the owner shares with that one peer: the receive-descriptor ring (owner
/// produces, peer consumes), the delivery ring (peer produces, owner
/// consumes), the owner's window table (owner writes, peer reads before its
/// RDMA Reads and Writes) and the receive slots a Send is copied into (peer
/// writes, owner copies out into the posted receive buffer). Each side
/// creates its own and passes it to the other, so each sizes it from its own
/// receive depth.
pub fn file_layout(cap: u32, windows: u32, slot_bytes: u32) -> Option<Layout> {
    if windows > MAX_WINDOWS || slot_bytes == 0 || !(slot_bytes as usize).is_multiple_of(INDEX_BLOCK) {
        return None;
    }
    let desc = ring_bytes(cap, DESC_WORDS)?;
    let deliv = ring_bytes(cap, DELIV_WORDS)?;
    let desc_off = FILE_HEADER;
    let deliv_off = desc_off.checked_add(desc)?;
    let win_off = block_up(deliv_off.checked_add(deliv)?)?;
    let area_off = block_up(win_off.checked_add((windows as usize).checked_mul(WINDOW_BYTES)?)?)?;
    let total = area_off.checked_add((cap as usize).checked_mul(slot_bytes as usize)?)?;
    Some(Layout {
        desc: desc_off,
        deliv: deliv_off,
        windows: win_off,
        area: area_off,
        total,
    })
}

/// Largest peer ring file this side maps.
const MAX_PEER_FILE: u64 = 1 << 30;

fn header_word(file: &SharedFile, off: usize) -> &AtomicU32 {
    debug_assert!(off & 3 == 0 && off + 4 <= FILE_HEADER && FILE_HEADER <= file.len());
    // SAFETY: `off` is a 4-aligned offset inside the header, which every ring
    // file has (layouts start the rings after it and the mapping is page
    // aligned and at least FILE_HEADER long); AtomicU32 is valid for any bit
    // pattern; the returned reference borrows `file`, keeping it mapped.
    unsafe { &*file.as_ptr().add(off).cast::<AtomicU32>() }
}

/// Connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Active side: socket not yet connected (`connected == false`, the
    /// listener's backlog was full) or REQ sent and waiting for ACCEPT/REJECT.
    Connecting {
        connected: bool,
    },
    /// Passive side: ACCEPT sent, waiting for the active side's RTU.
    AcceptWait,
    Established,
    /// Error or disconnected: draining deliveries that landed before, then
    /// flushing. Terminal.
    Error,
}

/// A peer region mapped into this process.
#[derive(Debug)]
pub struct PeerRegion {
    /// Usable length (the smaller of what the peer announced and what we mapped).
    pub len: u64,
    /// Shared with the other connections handed the same file
    /// ([`super::peermap`]).
    pub region: Arc<Region>,
}

/// What this side holds of the peer: its ring file and the regions it
/// registered exposable (none, for a responder).
#[derive(Debug)]
pub struct Peer {
    file: Arc<SharedFile>,
    layout: Layout,
    /// Entries of the peer's window table.
    windows: u32,
    /// Bytes of each of the peer's receive slots.
    slot_bytes: u32,
    /// Capacity of the peer's rings (and number of its receive slots).
    cap: u32,
    /// Pop the peer's receive descriptors (peer's inbound descriptor ring).
    desc_rx: Consumer<DESC_WORDS>,
    /// Push deliveries into the peer (peer's inbound delivery ring).
    deliv_tx: Producer<DELIV_WORDS>,
    /// Indexed by region id (= rkey & 0xffff).
    regions: Vec<Option<PeerRegion>>,
    /// The peer's doorbell, rung when it sleeps (`doorbell`).
    pub bell: Option<super::doorbell::Bell>,
}

impl Peer {
    /// Map the peer's ring file (`fds[0]`) and regions (`fds[1..]`, in the
    /// order of `hello.regions`). Everything the peer said is checked against
    /// the kernel's view (file sizes, seals) and our limits. Control path.
    pub fn attach(hello: &super::wire::Hello, mut fds: Vec<OwnedFd>, cfg: &ShmConfig) -> Result<Peer, String> {
        // A trailing descriptor is the peer's doorbell (`doorbell`).
        let bell = (fds.len() == 2 + hello.regions.len())
            .then(|| fds.pop().map(super::doorbell::Bell::from_peer))
            .flatten();
        if fds.len() != 1 + hello.regions.len() {
            return Err(format!("{} descriptors for {} regions", fds.len(), hello.regions.len()));
        }
        let cap = hello.ring_cap;
        if !cap.is_power_of_two() || cap > cfg.max_ring_depth.next_power_of_two() {
            return Err(format!("peer ring capacity {cap} is not a power of two within limits"));
        }
        if hello.file_len < FILE_HEADER as u64 || hello.file_len > MAX_PEER_FILE {
            return Err("peer ring file length out of limits".into());
        }
        let mut fds = fds.into_iter();
        let ring_fd = fds.next().ok_or("missing ring descriptor")?;
        let file =
            Arc::new(SharedFile::open_peer(ring_fd, hello.file_len as usize).map_err(|e| format!("ring file: {e}"))?);
        // Acquire: the peer wrote the header before sending the descriptor;
        // the socket already orders that, this only documents intent.
        let magic = header_word(&file, OFF_MAGIC).load(Ordering::Acquire);
        let version = header_word(&file, OFF_VERSION).load(Ordering::Acquire);
        let fcap = header_word(&file, OFF_CAP).load(Ordering::Acquire);
        let windows = header_word(&file, OFF_WINDOWS).load(Ordering::Acquire);
        let slot_bytes = header_word(&file, OFF_SLOT).load(Ordering::Acquire);
        if magic != FILE_MAGIC || version != FILE_VERSION || fcap != cap {
            return Err("peer ring file header does not match".into());
        }
        let layout = file_layout(cap, windows, slot_bytes).ok_or("bad ring layout")?;
        if layout.total > file.len() {
            return Err("peer ring file is shorter than its layout".into());
        }
        let desc_rx = Consumer::new(Arc::clone(&file), layout.desc, cap, 0).ok_or("descriptor ring")?;
        let deliv_tx = Producer::new(Arc::clone(&file), layout.deliv, cap, 0).ok_or("delivery ring")?;
        let max_id = hello.regions.iter().map(|r| r.id as usize).max();
        let mut regions: Vec<Option<PeerRegion>> = Vec::new();
        regions.resize_with(max_id.map_or(0, |m| m + 1), || None);
        for (ri, fd) in hello.regions.iter().zip(fds) {
            // Once per process, shared by every connection handed the same
            // file (`peermap`); reached only through this connection's
            // windows.
            let region = super::peermap::map(fd, ri.len, ri.id).map_err(|e| format!("peer region {}: {e}", ri.id))?;
            if cfg.require_sealed_regions && !region.is_sealed() {
                return Err(format!(
                    "peer region {} is not sealed against shrinking (set require_sealed_regions = false to allow)",
                    ri.id
                ));
            }
            let len = ri.len.min(region.len() as u64);
            regions[ri.id as usize] = Some(PeerRegion { len, region });
        }
        Ok(Peer {
            file,
            layout,
            windows,
            slot_bytes,
            cap,
            desc_rx,
            deliv_tx,
            regions,
            bell,
        })
    }

    /// The peer's memory for `[offset, offset + len)` reached through its
    /// window `key` for `access`: the window must be open on this connection
    /// for that access ([`window::lookup`]), the range inside it and inside
    /// a region the peer registered exposable.
    #[inline]
    fn resolve(&self, key: u32, offset: u64, len: u64, access: Access) -> Option<*mut u8> {
        let w = window::lookup(&self.file, self.layout.windows, self.windows, key, access)?;
        let end = offset.checked_add(len)?;
        if offset < w.start || end > w.start.checked_add(w.len)? {
            return None;
        }
        let r = self.regions.get(w.region as usize)?.as_ref()?;
        if end > r.len {
            return None;
        }
        // SAFETY: offset + len <= r.len <= the mapping's length, so the
        // pointer stays inside the live mapping `r.region` owns.
        Some(unsafe { r.region.as_ptr().add(offset as usize) })
    }

    /// The peer's receive slot for descriptor `seq`, if `len` bytes fit it.
    #[inline]
    fn slot(&self, seq: u32, len: u64) -> Option<*mut u8> {
        if len > u64::from(self.slot_bytes) {
            return None;
        }
        let at = self.layout.area + (seq & (self.cap - 1)) as usize * self.slot_bytes as usize;
        // SAFETY: `at + slot_bytes <= layout.total <= file.len()` (checked
        // in `attach`): inside the live mapping `file` owns.
        Some(unsafe { self.file.as_ptr().add(at) })
    }

    /// How many of the peer's regions are mapped here.
    pub fn regions_mapped(&self) -> usize {
        self.regions.iter().flatten().count()
    }

    fn closed(&self) -> bool {
        // Acquire: pairs with the peer's Release store of its closed word in
        // `Conn::fail` (or its drop): deliveries it published before closing
        // are visible when we drain.
        header_word(&self.file, OFF_CLOSED).load(Ordering::Acquire) != 0
    }
}

/// A locally registered region.
#[derive(Debug)]
pub struct LocalRegion {
    pub region: Arc<Region>,
    pub rkey: u32,
    /// Registered [`crate::fabric::RegionAccess::Exposable`]: passed to
    /// peers (mapped by them) so windows can be opened on it.
    pub exposable: bool,
}

/// This fabric's registered regions, indexed by region id.
#[derive(Debug, Default)]
pub struct RegionTable {
    pub by_id: Vec<Option<LocalRegion>>,
    pub count: usize,
}

impl RegionTable {
    /// Local memory of `buf` if its region is registered and the range is
    /// inside it.
    #[inline]
    pub fn resolve(&self, buf: &LocalBuf) -> Option<*mut u8> {
        let r = self.by_id.get(buf.region as usize)?.as_ref()?;
        let end = buf.offset.checked_add(buf.len as u64)?;
        if end > r.region.len() as u64 {
            return None;
        }
        // SAFETY: offset + len <= region length: inside the live mapping the
        // Arc keeps alive.
        Some(unsafe { r.region.as_ptr().add(buf.offset as usize) })
    }

    #[inline]
    pub fn rkey(&self, region: u16) -> Option<u32> {
        self.by_id.get(region as usize)?.as_ref().map(|r| r.rkey)
    }
}

/// A completion queue: completions generated but not yet polled, bounded by
/// its depth, and the connections whose progress feeds it.
#[derive(Debug)]
pub struct Cq {
    pub queue: VecDeque<Completion>,
    pub depth: usize,
    /// Connection slot indices bound to this CQ.
    pub conns: Vec<usize>,
}

impl Cq {
    pub fn new(depth: usize) -> Cq {
        Cq {
            queue: VecDeque::with_capacity(depth),
            depth,
            conns: Vec::new(),
        }
    }
    #[inline]
    fn room(&self) -> usize {
        self.depth - self.queue.len()
    }
    #[inline]
    fn push(&mut self, c: Completion) {
        debug_assert!(self.queue.len() < self.depth);
        self.queue.push_back(c);
    }
}

/// A shared receive queue: receives posted but not yet handed to a QP's
/// descriptor ring. `outstanding` counts every receive posted to the SRQ and not
/// yet completed (queued here or sitting in a QP's ring), bounded by `depth`.
#[derive(Debug)]
pub struct Srq {
    pub queue: VecDeque<RecvWr>,
    pub depth: u32,
    pub outstanding: u32,
    /// Connection slot indices attached to this SRQ.
    pub conns: Vec<usize>,
    /// Round-robin cursor into `conns`.
    pub next: usize,
}

impl Srq {
    pub fn new(depth: u32) -> Srq {
        Srq {
            queue: VecDeque::with_capacity(depth as usize),
            depth,
            outstanding: 0,
            conns: Vec::new(),
            next: 0,
        }
    }
}

/// Outcome of executing one send-queue work request.
enum Exec {
    Done(WcStatus, u32),
    /// Send found no receive posted at the peer.
    Rnr,
    /// An RDMA Read or Write copied what this turn's budget allowed
    /// ([`COPY_SLICE_BYTES`]) and has more to copy on a later poll.
    Partial,
}

/// Most bytes of RDMA Read and Write data one connection copies per turn of
/// its core's loop (per [`super::ShmFabric::poll_cq`], and once more for
/// work posted in between): the default of [`ShmConfig::copy_slice_bytes`].
///
/// On shm the initiator's own core does the copy a NIC's DMA engine would
/// do. Done in one go, a 1 MiB Read chunk holds the core for the whole
/// `memcpy` (a few hundred microseconds on a loaded host), and every other
/// connection's small message waits behind it (head-of-line blocking: issue
/// 21 item 5). Copied in slices, one per connection per poll, the work
/// requests of all connections advance round-robin, as a NIC serves its
/// queues, and a small message waits for at most about one slice per busy
/// connection. 64 KiB is:
/// - the size of a Send's receive slot ([`ShmConfig::recv_slot_bytes`]'s
///   default), the largest copy the fabric already makes in one go for a
///   Send, so no single copy is longer than before for the small messages;
/// - a few microseconds of `memcpy` (about one 4 KiB READ's service time),
///   so a small Call waits behind a slice about as long as behind one more
///   small Call;
/// - large enough that the per-poll cost of going round again (a few hundred
///   instructions) is well under 1% of a slice's copy, so bulk throughput
///   is unchanged (1 MiB takes 16 polls instead of 1).
pub const COPY_SLICE_BYTES: u32 = 64 << 10;

/// RNR state of the send at the head of the queue.
#[derive(Clone, Copy, Debug)]
struct Rnr {
    retries: u8,
    next: Instant,
}

/// One connection.
#[derive(Debug)]
pub struct Conn {
    pub state: State,
    pub cq: usize,
    pub srq: Option<usize>,
    pub qp: QpConfig,
    /// The CM socket (None once closed).
    pub sock: Option<OwnedFd>,
    /// Active side, while connecting: where to.
    pub addr: Option<UnixAddr>,
    /// Connection setup must finish by then.
    pub deadline: Instant,
    /// Our inbound ring file (passed to the peer).
    pub file: Arc<SharedFile>,
    pub ring_cap: u32,
    layout: Layout,
    slot_bytes: u32,
    /// The windows this side opened to this connection's peer.
    windows: Windows,
    desc_tx: Producer<DESC_WORDS>,
    deliv_rx: Consumer<DELIV_WORDS>,
    pub peer: Option<Peer>,
    /// Most receives this QP keeps posted (recv_depth, or the SRQ window).
    recv_limit: usize,
    /// Send work requests not yet executed (head may be waiting on RNR), and in
    /// the error state those still to be flushed.
    sq: VecDeque<SendWr>,
    /// Bytes of the head send work request's RDMA Read / Write data already
    /// copied (0 when it has not started, or is no RDMA operation).
    head_done: u64,
    /// Bytes of RDMA data this connection may still copy this turn
    /// ([`COPY_SLICE_BYTES`]; renewed by [`Conn::new_turn`]).
    copy_budget: u32,
    /// Receives whose descriptor is in our descriptor ring (or, in the error
    /// state, still to flush), oldest first. `front_seq` is the descriptor
    /// sequence number of the front entry.
    posted: VecDeque<RecvWr>,
    front_seq: u32,
    next_seq: u32,
    rnr: Option<Rnr>,
    /// In the error state: deliveries up to this index landed before the error
    /// and still complete normally.
    drain_limit: u32,
    /// The terminal CM event was handed to the consumer.
    pub terminal_delivered: bool,
    /// Active side: the private data to send in REQ (kept for a retried
    /// connect).
    pub pending_pd: PrivateData,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Release: pairs with the peer's Acquire load in `Peer::closed`.
        header_word(&self.file, OFF_CLOSED).store(1, Ordering::Release);
        if let Some(peer) = self.peer.as_ref() {
            super::doorbell::ring_if_sleeping(&peer.file, peer.bell.as_ref());
        }
    }
}

fn opcode(op: SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithInv { .. } => WcOpcode::Send,
        SendOp::RdmaWrite => WcOpcode::RdmaWrite,
        SendOp::RdmaRead => WcOpcode::RdmaRead,
    }
}

/// Copy the local scatter/gather list into contiguous memory at `dst`.
///
/// # Safety
/// `src[i]` are valid for `len` bytes of reads, `dst` for their sum of writes.
unsafe fn gather(src: &[(*mut u8, usize)], mut dst: *mut u8) {
    for &(p, n) in src {
        // SAFETY: per the contract. Source and destination are different
        // mappings (ours and the peer's, or two buffers the consumer chose);
        // bytes in a shared mapping are outside Rust's object model, and who
        // may touch them is the buffer-ownership rule RDMA imposes on both
        // sides.
        unsafe {
            std::ptr::copy_nonoverlapping(p, dst, n);
            dst = dst.add(n);
        }
    }
}

impl Conn {
    /// [`super::doorbell::ring_if_sleeping`] for the peer, after a Send (of
    /// the work requests `op` names) was delivered. Out of line: inlined into `complete_send` it cost the NULL
    /// round trip 65 instructions (callgrind, `scripts/callgrind-engine.sh`),
    /// most of them inlining lost elsewhere; out of line, a call and the
    /// check.
    #[inline(never)]
    fn wake_peer(&self, op: &SendOp) {
        if !matches!(op, SendOp::Send | SendOp::SendWithInv { .. }) {
            return;
        }
        if let Some(peer) = self.peer.as_ref() {
            super::doorbell::ring_if_sleeping(&peer.file, peer.bell.as_ref());
        }
    }

    /// A new connection with its inbound ring file created. Control path.
    pub fn new(qp: &QpConfig, cq: usize, srq: Option<usize>, cfg: &ShmConfig, now: Instant) -> Result<Conn, String> {
        let recv_limit = if srq.is_some() { cfg.srq_window } else { qp.recv_depth };
        if recv_limit > cfg.max_ring_depth {
            return Err(format!(
                "receive depth {recv_limit} exceeds max_ring_depth {}",
                cfg.max_ring_depth
            ));
        }
        let cap = recv_limit.max(1).next_power_of_two();
        let layout = file_layout(cap, cfg.max_windows, cfg.recv_slot_bytes).ok_or("bad ring layout")?;
        let file = Arc::new(SharedFile::create("qp", layout.total).map_err(|e| format!("ring file: {e}"))?);
        // Relaxed: the file reaches the peer through a socket message sent
        // after these stores, which orders them.
        header_word(&file, OFF_MAGIC).store(FILE_MAGIC, Ordering::Relaxed);
        header_word(&file, OFF_VERSION).store(FILE_VERSION, Ordering::Relaxed);
        header_word(&file, OFF_CAP).store(cap, Ordering::Relaxed);
        header_word(&file, OFF_WINDOWS).store(cfg.max_windows, Ordering::Relaxed);
        header_word(&file, OFF_SLOT).store(cfg.recv_slot_bytes, Ordering::Relaxed);
        let desc_tx = Producer::new(Arc::clone(&file), layout.desc, cap, 0).ok_or("descriptor ring")?;
        let deliv_rx = Consumer::new(Arc::clone(&file), layout.deliv, cap, 0).ok_or("delivery ring")?;
        Ok(Conn {
            state: State::Connecting { connected: false },
            cq,
            srq,
            qp: *qp,
            sock: None,
            addr: None,
            deadline: now + cfg.connect_timeout,
            file,
            ring_cap: cap,
            layout,
            slot_bytes: cfg.recv_slot_bytes,
            windows: Windows::new(layout.windows, cfg.max_windows, super::new_salt()),
            desc_tx,
            deliv_rx,
            peer: None,
            recv_limit: recv_limit as usize,
            sq: VecDeque::with_capacity(qp.send_depth as usize),
            head_done: 0,
            copy_budget: cfg.copy_slice_bytes,
            posted: VecDeque::with_capacity(recv_limit as usize),
            front_seq: 0,
            next_seq: 0,
            rnr: None,
            drain_limit: 0,
            terminal_delivered: false,
            pending_pd: PrivateData::EMPTY,
        })
    }

    /// Length of our ring file.
    pub fn file_len(&self) -> u64 {
        self.file.len() as u64
    }

    pub fn is_live(&self) -> bool {
        !matches!(self.state, State::Error)
    }

    /// Everything is over: in the error state, nothing queued, nothing posted,
    /// nothing left to drain.
    pub fn finished(&self) -> bool {
        self.state == State::Error
            && self.sq.is_empty()
            && self.posted.is_empty()
            && self.deliv_rx.position() == self.drain_limit
    }

    pub fn peer_closed(&self) -> bool {
        self.peer.as_ref().is_some_and(|p| p.closed())
    }

    /// Move to the error state (once) and queue `ev` (the terminal CM event):
    /// mark our ring file closed for the peer, close the socket (the peer sees
    /// end-of-file), remember how many deliveries landed before (when
    /// `keep_draining`; a corrupt delivery ring stops draining). The remaining
    /// work requests are flushed by later [`Conn::progress`] calls.
    pub fn fail(&mut self, ev: CmEvent, events: &mut VecDeque<CmEvent>, keep_draining: bool) {
        if self.state == State::Error {
            return;
        }
        self.state = State::Error;
        // Release: pairs with the peer's Acquire load in `Peer::closed`.
        header_word(&self.file, OFF_CLOSED).store(1, Ordering::Release);
        if let Some(peer) = self.peer.as_ref() {
            super::doorbell::ring_if_sleeping(&peer.file, peer.bell.as_ref());
        }
        if let Some(s) = self.sock.take() {
            sock::shutdown(s.as_fd());
        }
        self.addr = None;
        self.rnr = None;
        let pos = self.deliv_rx.position();
        self.drain_limit = if keep_draining {
            self.deliv_rx.snapshot().unwrap_or(pos)
        } else {
            pos
        };
        events.push_back(ev);
    }

    /// Push the descriptor of `wr` into our descriptor ring. The caller checked
    /// that `posted.len() < recv_limit`, so the ring has room unless the peer
    /// corrupted the consumer index. `false` on corruption.
    fn push_desc(&mut self, wr: RecvWr, regions: &RegionTable) -> bool {
        if regions.rkey(wr.buf.region).is_none() {
            return false;
        }
        // The peer copies into our slot, at most what the buffer takes.
        let len = wr.buf.len.min(self.slot_bytes);
        let item = [(len as u64) << 32, 0, self.next_seq as u64, 0];
        match self.desc_tx.try_push(item) {
            Ok(true) => {
                self.posted.push_back(wr);
                self.next_seq = self.next_seq.wrapping_add(1);
                true
            }
            Ok(false) | Err(_) => false,
        }
    }

    /// Test hook: push a raw delivery entry into the peer's delivery ring, as
    /// a buggy or hostile peer could.
    #[cfg(test)]
    pub fn inject_delivery(&mut self, item: [u64; DELIV_WORDS]) -> bool {
        self.peer
            .as_mut()
            .is_some_and(|p| p.deliv_tx.try_push(item) == Ok(true))
    }

    /// Can one more receive be posted to this QP?
    pub fn recv_room(&self) -> bool {
        self.posted.len() < self.recv_limit
    }

    /// Post a receive on this QP's own receive queue (buffer already checked).
    pub fn post_recv(&mut self, id: ConnId, wr: RecvWr, regions: &RegionTable, events: &mut VecDeque<CmEvent>) {
        debug_assert!(self.recv_room());
        if self.state == State::Error {
            // Flushed by the next progress call.
            self.posted.push_back(wr);
        } else if !self.push_desc(wr, regions) {
            self.posted.push_back(wr);
            self.fail(CmEvent::Disconnected { conn: id }, events, false);
        }
    }

    /// Queue a send work request (the caller checked the queue depth and the
    /// state).
    fn queue_send(&mut self, wr: SendWr) {
        debug_assert!(self.sq.len() < self.qp.send_depth as usize);
        self.sq.push_back(wr);
    }

    /// Post a send work request (the caller checked the queue depth and the
    /// state). When nothing waits ahead of it on an established connection
    /// it executes at once, without going through the queue or the rest of
    /// [`Conn::progress`] (deliveries are the CQ poll's business); otherwise,
    /// or when it meets no posted receive, it is queued and progressed.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn post_send(
        &mut self,
        id: ConnId,
        wr: &SendWr,
        cq: &mut Cq,
        srq: Option<&mut Srq>,
        regions: &RegionTable,
        cfg: &ShmConfig,
        events: &mut VecDeque<CmEvent>,
    ) {
        if self.sq.is_empty() && self.state == State::Established && cq.room() > 0 && !self.peer_closed() {
            if let Some(peer) = self.peer.as_mut() {
                let mut done = 0;
                match execute(wr, peer, regions, cfg, &mut done, &mut self.copy_budget) {
                    Exec::Done(status, byte_len) => {
                        self.complete_send(id, wr, status, byte_len, cq, events);
                        return;
                    }
                    // Started: the head of the queue now, continued by later
                    // polls (`run_sends`).
                    Exec::Partial => {
                        self.queue_send(*wr);
                        self.head_done = done;
                        return;
                    }
                    Exec::Rnr => {}
                }
            }
        }
        self.queue_send(*wr);
        self.progress(id, cq, srq, regions, cfg, events);
    }

    /// Account an executed send work request: its completion when it is
    /// signaled or failed (the caller checked the CQ's room); a failure moves
    /// the connection to error.
    #[inline]
    fn complete_send(
        &mut self,
        id: ConnId,
        wr: &SendWr,
        status: WcStatus,
        byte_len: u32,
        cq: &mut Cq,
        events: &mut VecDeque<CmEvent>,
    ) {
        // Every executed Send (both paths come here) may wake a sleeping
        // peer (`doorbell`).
        self.wake_peer(&wr.op);
        if wr.signaled || !status.is_success() {
            cq.push(Completion {
                wr_id: wr.wr_id,
                status,
                opcode: opcode(wr.op),
                conn: id,
                byte_len,
                invalidated_rkey: None,
            });
        }
        if !status.is_success() && self.state != State::Error {
            self.fail(CmEvent::Disconnected { conn: id }, events, true);
        }
    }

    /// Where the `len` bytes of an RDMA Write to `seg` would land in the
    /// peer's memory ([`crate::Fabric::remote_window`]): on an established
    /// connection with nothing queued ahead (a Write posted now would execute
    /// now), after the checks [`execute`] makes for that Write.
    pub fn window(&self, seg: &RemoteBuf, len: u32) -> Option<NonNull<u8>> {
        if self.state != State::Established || !self.sq.is_empty() || self.peer_closed() {
            return None;
        }
        NonNull::new(
            self.peer
                .as_ref()?
                .resolve(seg.handle, seg.offset, u64::from(len), Access::Write)?,
        )
    }

    /// Open a window on `buf` (whose region `regions` says is registered
    /// exposable; the caller checked) to this connection's peer for
    /// `access` ([`crate::fabric::Fabric::expose`]). `None` when the table
    /// is full.
    #[inline]
    pub fn expose(&mut self, buf: &LocalBuf, access: Access) -> Option<RemoteBuf> {
        let key = self
            .windows
            .open(&self.file, buf.region, buf.offset, u64::from(buf.len), access)?;
        Some(RemoteBuf {
            handle: key,
            length: buf.len,
            offset: buf.offset,
        })
    }

    /// Close window `key` ([`crate::fabric::Fabric::hide`]).
    #[inline]
    pub fn hide(&mut self, key: u32) {
        self.windows.close(&self.file, key);
    }

    /// A new turn of the core's loop ([`super::ShmFabric::poll_cq`]): this
    /// connection may copy [`ShmConfig::copy_slice_bytes`] of RDMA data again.
    #[inline]
    pub fn new_turn(&mut self, cfg: &ShmConfig) {
        self.copy_budget = cfg.copy_slice_bytes;
    }

    /// Send work requests wait that the next poll executes (or flushes):
    /// the head is not waiting for the peer to post a receive.
    #[inline]
    pub fn sends_pending(&self) -> bool {
        !self.sq.is_empty() && self.rnr.is_none()
    }

    pub fn sq_len(&self) -> usize {
        self.sq.len()
    }

    /// Take one SRQ receive into this QP's descriptor ring (the caller
    /// checked `recv_room`). `false` if the QP failed instead (the caller
    /// keeps the receive).
    pub fn give(&mut self, id: ConnId, wr: RecvWr, regions: &RegionTable, events: &mut VecDeque<CmEvent>) -> bool {
        if self.push_desc(wr, regions) {
            return true;
        }
        self.fail(CmEvent::Disconnected { conn: id }, events, false);
        false
    }

    /// Hand receives from `srq` to this QP until it holds its window (the
    /// receiver's own poll loop feeding the QP's descriptor ring).
    pub fn refill_from(&mut self, id: ConnId, srq: &mut Srq, regions: &RegionTable, events: &mut VecDeque<CmEvent>) {
        while self.state != State::Error && self.recv_room() {
            let Some(wr) = srq.queue.pop_front() else { break };
            if !self.give(id, wr, regions, events) {
                srq.queue.push_front(wr);
            }
        }
    }

    /// All data-path progress for this connection: peer-closed check,
    /// deliveries into receive completions, SRQ refill, send queue (with RNR
    /// retry), and in the error state the drain and flush. Bounded by the CQ's
    /// free room; never blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn progress(
        &mut self,
        id: ConnId,
        cq: &mut Cq,
        mut srq: Option<&mut Srq>,
        regions: &RegionTable,
        cfg: &ShmConfig,
        events: &mut VecDeque<CmEvent>,
    ) {
        if matches!(self.state, State::Established | State::AcceptWait) && self.peer_closed() {
            let ev = if self.state == State::Established {
                CmEvent::Disconnected { conn: id }
            } else {
                CmEvent::Unreachable { conn: id }
            };
            self.fail(ev, events, true);
        }
        self.drain_deliveries(id, cq, srq.as_deref_mut(), regions, cfg.recv_prefetch_bytes, events);
        if let Some(s) = srq.as_deref_mut() {
            self.refill_from(id, s, regions, events);
        }
        self.run_sends(id, cq, regions, cfg, events);
        if self.state == State::Error && self.deliv_rx.position() == self.drain_limit {
            self.flush_posted(id, cq, srq);
        }
    }

    fn drain_deliveries(
        &mut self,
        id: ConnId,
        cq: &mut Cq,
        mut srq: Option<&mut Srq>,
        regions: &RegionTable,
        prefetch_bytes: u32,
        events: &mut VecDeque<CmEvent>,
    ) {
        while cq.room() > 0 {
            if self.state == State::Error && self.deliv_rx.position() == self.drain_limit {
                return;
            }
            if prefetch_bytes > 0 {
                match self.deliv_rx.ready() {
                    Ok(true) => {
                        // The delivery is for the front receive (checked
                        // below): start fetching its message now.
                        if let Some(wr) = self.posted.front() {
                            self.prefetch_slot(self.front_seq, wr.buf.len.min(prefetch_bytes));
                        }
                    }
                    Ok(false) => return,
                    Err(_) => return self.protocol_error(id, events),
                }
            }
            let item = match self.deliv_rx.try_pop() {
                Ok(Some(item)) => item,
                Ok(None) => return,
                Err(_) => return self.protocol_error(id, events),
            };
            let seq = item[0] as u32;
            let byte_len = (item[0] >> 32) as u32;
            let kind = item[1] as u32;
            let inv_rkey = (item[1] >> 32) as u32;
            let Some(&wr) = self.posted.front() else {
                return self.protocol_error(id, events);
            };
            if seq != self.front_seq {
                return self.protocol_error(id, events);
            }
            let (status, len, inv) = match kind {
                KIND_SEND | KIND_SEND_INV if byte_len <= wr.buf.len.min(self.slot_bytes) => {
                    let Some(dst) = regions.resolve(&LocalBuf {
                        len: byte_len,
                        ..wr.buf
                    }) else {
                        return self.protocol_error(id, events);
                    };
                    let at = self.layout.area + (seq & (self.ring_cap - 1)) as usize * self.slot_bytes as usize;
                    // SAFETY: the slot lies inside our ring file (`layout`),
                    // `byte_len <= slot_bytes`; `dst` has `byte_len` bytes in
                    // our registered region, handed to us by the posted
                    // receive. The two never overlap (a region is not the
                    // ring file).
                    unsafe { std::ptr::copy_nonoverlapping(self.file.as_ptr().add(at), dst, byte_len as usize) };
                    let inv = (kind == KIND_SEND_INV).then_some(inv_rkey);
                    if let Some(k) = inv {
                        self.windows.invalidate(&self.file, k);
                    }
                    (WcStatus::Success, byte_len, inv)
                }
                KIND_LEN_ERR => (WcStatus::LocalLength, 0, None),
                KIND_INV_ERR => (WcStatus::RemoteInvalidRequest, 0, None),
                _ => return self.protocol_error(id, events),
            };
            self.posted.pop_front();
            self.front_seq = self.front_seq.wrapping_add(1);
            if let Some(s) = srq.as_deref_mut() {
                s.outstanding -= 1;
            }
            cq.push(Completion {
                wr_id: wr.wr_id,
                status,
                opcode: WcOpcode::Recv,
                conn: id,
                byte_len: len,
                invalidated_rkey: inv,
            });
            if !status.is_success() {
                self.fail(CmEvent::Disconnected { conn: id }, events, true);
            }
        }
    }

    /// Prefetches the first `bytes` of our receive slot for descriptor `seq`
    /// (rounded up to cache lines) into this CPU's caches. A hint only.
    #[inline]
    fn prefetch_slot(&self, seq: u32, bytes: u32) {
        let at = self.layout.area + (seq & (self.ring_cap - 1)) as usize * self.slot_bytes as usize;
        let len = bytes.min(self.slot_bytes) as usize;
        let mut k = 0;
        while k < len {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch never faults and reads nothing into the
            // program's state; the address is inside our ring file's slot.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    self.file.as_ptr().add(at + k).cast::<i8>(),
                );
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = at;
            k += mempool::pool::CACHE_LINE;
        }
    }

    /// The peer broke the ring protocol: error state, stop draining.
    fn protocol_error(&mut self, id: ConnId, events: &mut VecDeque<CmEvent>) {
        if self.state == State::Error {
            self.drain_limit = self.deliv_rx.position();
        } else {
            self.fail(CmEvent::Disconnected { conn: id }, events, false);
        }
    }

    fn flush_posted(&mut self, id: ConnId, cq: &mut Cq, srq: Option<&mut Srq>) {
        match srq {
            // SRQ receives are not flushed when one QP fails (as on IB): the
            // buffers this QP held go back to the SRQ for the other QPs.
            Some(s) => {
                while let Some(wr) = self.posted.pop_back() {
                    s.queue.push_front(wr);
                }
            }
            None => {
                while cq.room() > 0 {
                    let Some(wr) = self.posted.pop_front() else { break };
                    cq.push(Completion {
                        wr_id: wr.wr_id,
                        status: WcStatus::Flushed,
                        opcode: WcOpcode::Recv,
                        conn: id,
                        byte_len: 0,
                        invalidated_rkey: None,
                    });
                }
            }
        }
    }

    fn run_sends(
        &mut self,
        id: ConnId,
        cq: &mut Cq,
        regions: &RegionTable,
        cfg: &ShmConfig,
        events: &mut VecDeque<CmEvent>,
    ) {
        while let Some(&wr) = self.sq.front() {
            if cq.room() == 0 {
                return;
            }
            let outcome = match (self.state, self.peer.as_mut()) {
                (State::Error, _) => Exec::Done(WcStatus::Flushed, 0),
                (State::Established, Some(peer)) => {
                    execute(&wr, peer, regions, cfg, &mut self.head_done, &mut self.copy_budget)
                }
                _ => return,
            };
            let (status, byte_len) = match outcome {
                Exec::Done(s, n) => (s, n),
                Exec::Rnr => match self.rnr_wait(cfg.rnr_timer) {
                    true => return,
                    false => (WcStatus::RnrRetryExceeded, 0),
                },
                // The rest of this copy, and what waits behind it, on a
                // later turn.
                Exec::Partial => return,
            };
            self.sq.pop_front();
            self.head_done = 0;
            self.rnr = None;
            self.complete_send(id, &wr, status, byte_len, cq, events);
        }
    }

    /// The head Send met no posted receive. `true`: keep waiting (retry on a
    /// later poll); `false`: retries are exhausted.
    ///
    /// Hardware retries once per RNR timer period; here a retry is attempted on
    /// every poll, and only the periods are counted: after `rnr_retry` periods
    /// (`timer` each, [`ShmConfig::rnr_timer`]) without a receive the Send fails. `rnr_retry == 7`
    /// retries forever (IBA 9.7.5.2.8); `0` fails at once.
    fn rnr_wait(&mut self, timer: std::time::Duration) -> bool {
        const INFINITE: u8 = 7;
        let retry = self.qp.rnr_retry;
        match self.rnr {
            None if retry == 0 => false,
            None => {
                self.rnr = Some(Rnr {
                    retries: 0,
                    next: Instant::now() + timer,
                });
                true
            }
            Some(mut r) => {
                let now = Instant::now();
                if now < r.next {
                    return true;
                }
                r.retries = r.retries.saturating_add(1);
                if retry != INFINITE && r.retries >= retry {
                    return false;
                }
                r.next = now + timer;
                self.rnr = Some(r);
                true
            }
        }
    }
}

/// Execute one send-queue work request in this process: check the local
/// buffers (LocalProtection), the remote key and range (RemoteAccess), copy.
///
/// An RDMA Read or Write copies its bytes `[*done, total)` as far as
/// `*budget` allows, advancing both, and is [`Exec::Partial`] until its last
/// byte is copied. Every call makes the checks a whole copy makes (local
/// buffers, the window's key, access and range over the whole operation)
/// before copying its slice, so a window closed mid-copy fails the rest
/// with RemoteAccess, as a NIC's next packet would.
fn execute(
    wr: &SendWr,
    peer: &mut Peer,
    regions: &RegionTable,
    cfg: &ShmConfig,
    done: &mut u64,
    budget: &mut u32,
) -> Exec {
    let mut local = [(std::ptr::null_mut::<u8>(), 0usize); MAX_SGE];
    let mut total: u64 = 0;
    let sges = wr.sges();
    for (slot, s) in local.iter_mut().zip(sges) {
        let Some(p) = regions.resolve(s) else {
            return Exec::Done(WcStatus::LocalProtection, 0);
        };
        *slot = (p, s.len as usize);
        total += s.len as u64;
    }
    let local = &local[..sges.len()];
    if total > cfg.max_msg_size as u64 {
        return Exec::Done(WcStatus::LocalLength, 0);
    }
    let total32 = total as u32;
    match wr.op {
        SendOp::Send | SendOp::SendWithInv { .. } => {
            let desc = match peer.desc_rx.try_pop() {
                Ok(Some(d)) => d,
                Ok(None) => return Exec::Rnr,
                Err(_) => return Exec::Done(WcStatus::RemoteInvalidRequest, 0),
            };
            let cap = (desc[0] >> 32) as u32;
            let seq = desc[2] as u32;
            let inv_ok = match wr.op {
                SendOp::SendWithInv { rkey } => window::is_open(&peer.file, peer.layout.windows, peer.windows, rkey),
                _ => true,
            };
            let (kind, inv, status) = match peer.slot(seq, total) {
                _ if total > cap as u64 => (KIND_LEN_ERR, 0, WcStatus::RemoteInvalidRequest),
                None => (KIND_LEN_ERR, 0, WcStatus::RemoteInvalidRequest),
                Some(_) if !inv_ok => (KIND_INV_ERR, 0, WcStatus::RemoteInvalidRequest),
                Some(dst) => {
                    // SAFETY: `local` entries were resolved inside our
                    // registered regions; `dst` is the peer's receive slot
                    // of `slot_bytes >= total` bytes inside its ring file.
                    unsafe { gather(local, dst) };
                    match wr.op {
                        SendOp::SendWithInv { rkey } => (KIND_SEND_INV, rkey, WcStatus::Success),
                        _ => (KIND_SEND, 0, WcStatus::Success),
                    }
                }
            };
            // The Release inside try_push publishes the copied bytes (and the
            // bytes of every earlier RDMA Write on this QP) with the entry.
            let entry = [seq as u64 | total << 32, kind as u64 | (inv as u64) << 32];
            match peer.deliv_tx.try_push(entry) {
                Ok(true) => Exec::Done(status, if status.is_success() { total32 } else { 0 }),
                Ok(false) | Err(_) => Exec::Done(WcStatus::RemoteInvalidRequest, 0),
            }
        }
        SendOp::RdmaWrite | SendOp::RdmaRead => {
            let (access, dir) = match wr.op {
                SendOp::RdmaWrite => (Access::Write, Dir::ToRemote),
                _ => (Access::Read, Dir::FromRemote),
            };
            let Some(remote) = peer.resolve(wr.remote.handle, wr.remote.offset, total, access) else {
                return Exec::Done(WcStatus::RemoteAccess, 0);
            };
            debug_assert!(*done <= total, "accounting: copied past the end of a work request");
            let n = (total - *done).min(u64::from(*budget));
            if n > 0 {
                // SAFETY: local entries resolved inside our registered
                // regions, `total` bytes in all; `remote` has `total` bytes
                // inside the peer's region; `*done + n <= total`.
                unsafe { copy_range(local, remote, *done, n, dir) };
                *done += n;
                *budget -= n as u32;
            }
            if *done < total {
                Exec::Partial
            } else {
                Exec::Done(WcStatus::Success, total32)
            }
        }
    }
}

/// Which way [`copy_range`] copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Local scatter/gather list to remote memory (RDMA Write).
    ToRemote,
    /// Remote memory to the local scatter/gather list (RDMA Read).
    FromRemote,
}

/// Copy bytes `[from, from + n)` of a work request's data between its local
/// scatter/gather list `local` (the data in list order) and contiguous
/// remote memory at `remote` (data byte `k` at `remote + k`).
///
/// # Safety
/// `local[i]` are valid for `len` bytes of reads and writes, `remote` for
/// their sum, and `from + n` is at most that sum. As in [`gather`], the two
/// sides are different mappings.
unsafe fn copy_range(local: &[(*mut u8, usize)], remote: *mut u8, from: u64, n: u64, dir: Dir) {
    let (mut at, end) = (from as usize, (from + n) as usize);
    let mut lo = 0usize;
    for &(p, len) in local {
        let hi = lo + len;
        if at < hi {
            if at >= end {
                break;
            }
            let upto = end.min(hi);
            // SAFETY: `[at, upto)` lies inside this entry (`lo <= at <
            // upto <= hi`) and inside the remote range (`upto <= end <=` the
            // data's length), per the contract.
            unsafe {
                let (l, r) = (p.add(at - lo), remote.add(at));
                match dir {
                    Dir::ToRemote => std::ptr::copy_nonoverlapping(l, r, upto - at),
                    Dir::FromRemote => std::ptr::copy_nonoverlapping(r, l, upto - at),
                }
            }
            at = upto;
        }
        lo = hi;
    }
    debug_assert!(at >= end, "accounting: copied less than asked");
}
