//! The fabric trait: the verbs-shaped contract between the transport engine and a
//! provider (`verbs` over rdma-core, `shm` between two processes, `sim` in-process
//! and deterministic).
//!
//! The model is the RDMA verbs one, cut down to what RPC-over-RDMA needs:
//!
//! - a protection domain with **memory regions registered once** at start-up: every
//!   [`mempool::region::Region`] is registered with [`Fabric::register_region`] before any
//!   connection exists and stays registered for the life of the process
//!   (persistent steering tags). Local buffers are named by `(region, offset)`
//!   ([`LocalBuf`]); the provider turns that into its own address and local key with
//!   an array index, never a lookup structure.
//! - completion queues polled in fixed batches ([`Fabric::poll_cq`]);
//! - reliable-connected queue pairs, each bound to one CQ for sends and receives,
//!   optionally receiving from a shared receive queue ([`QpConfig::srq`]);
//! - work requests SEND, SEND_WITH_INV, RDMA_WRITE, RDMA_READ ([`SendWr`]) and RECV
//!   ([`RecvWr`]); completions carry a status ([`WcStatus`]);
//! - a connection manager (listen, accept, reject, connect, disconnect) that carries
//!   private data (RFC 8797) and is **polled** ([`Fabric::poll_cm`]): no call blocks.
//!
//! `wr_id`s are [`WrId`]: an index and a tag, never a pointer (SPDK nvmf/rdma.c).
//!
//! # Threading
//!
//! A `Fabric` value belongs to one core: every method takes `&mut self` and is
//! called only from the reactor core that owns it. Providers that share state
//! between cores (e.g. one RDMA-CM event channel) keep it behind their own
//! synchronisation on the control path only; the data path (post, poll) touches
//! core-local state alone.

pub mod shm;
pub mod sim;
#[cfg(feature = "verbs")]
pub mod verbs;

use proto::header::Segment;
use std::fmt;
use std::sync::Arc;

/// A locally registered buffer: `len` bytes at `offset` inside region `region`
/// (a [`mempool::region::Region`] id registered with this fabric).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct LocalBuf {
    pub region: u16,
    pub offset: u64,
    pub len: u32,
}

/// A remote buffer as the peer advertised it: an RPC-over-RDMA segment
/// (handle = steering tag / rkey, offset = the peer's address for it).
pub type RemoteBuf = Segment;

/// What a region is registered for (RFC 8166 s8.1: a Responder exposes none
/// of its memory; a Requester exposes the chunk buffers of its Calls in
/// flight, and only those, to the one connection that carries them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionAccess {
    /// Local use only: sends, receives and the local side of RDMA Reads and
    /// Writes. No peer can reach it, whatever key it presents.
    Local,
    /// Local use, and parts of it may be exposed to one connection's peer
    /// with [`Fabric::expose`] (a requester's chunk buffers).
    Exposable,
}

/// The remote access a window ([`Fabric::expose`]) grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The peer may RDMA-Read it (a Read chunk).
    Read,
    /// The peer may RDMA-Write it (a Write or Reply chunk).
    Write,
    /// Both (a buffer the peer reads and writes; tests, tools).
    ReadWrite,
}

impl Access {
    /// Whether a window opened for `self` allows an operation needing `op`
    /// ([`Access::Read`] for an RDMA Read, [`Access::Write`] for a Write).
    pub const fn allows(self, op: Access) -> bool {
        matches!(
            (self, op),
            (Access::ReadWrite, _) | (Access::Read, Access::Read) | (Access::Write, Access::Write)
        )
    }
}

/// The handle of a window that is not exposed: a [`Fabric::expose`] never
/// returns it.
pub const NO_WINDOW: u32 = 0;

/// Keys a provider assigned to a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MrKeys {
    /// Local key used in this endpoint's scatter/gather entries.
    pub lkey: u32,
    /// Remote key (steering tag) a peer uses to Read or Write this region.
    pub rkey: u32,
}

/// A work request id: a 56-bit index and an 8-bit tag saying what the index
/// refers to (a request slot, a receive slot, ...). Never a pointer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WrId(pub u64);

impl WrId {
    pub const INDEX_BITS: u32 = 56;
    pub const INDEX_MAX: u64 = (1 << Self::INDEX_BITS) - 1;

    #[inline]
    pub const fn new(tag: u8, index: u64) -> Self {
        debug_assert!(index <= Self::INDEX_MAX);
        WrId(((tag as u64) << Self::INDEX_BITS) | (index & Self::INDEX_MAX))
    }
    #[inline]
    pub const fn tag(self) -> u8 {
        (self.0 >> Self::INDEX_BITS) as u8
    }
    #[inline]
    pub const fn index(self) -> u64 {
        self.0 & Self::INDEX_MAX
    }
}

impl fmt::Debug for WrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WrId(tag={}, index={})", self.tag(), self.index())
    }
}

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
    };
}
id_type!(
    /// A connection (an RC queue pair) of this fabric instance.
    ConnId
);
id_type!(
    /// A listening endpoint.
    ListenerId
);
id_type!(
    /// A pending incoming connection request, answered by accept or reject.
    ConnReqId
);
id_type!(
    /// A completion queue.
    CqId
);
id_type!(
    /// A shared receive queue.
    SrqId
);

/// What a send-queue work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// RDMA Send: `local` is delivered into the peer's next posted receive.
    Send,
    /// RDMA Send with Invalidate: as Send, and the peer invalidates `rkey`.
    SendWithInv { rkey: u32 },
    /// RDMA Write of `local` into `remote`.
    RdmaWrite,
    /// RDMA Read of `remote` into `local`.
    RdmaRead,
}

/// Maximum scatter/gather entries in one send work request.
pub const MAX_SGE: usize = 4;

/// A send-queue work request. A Send may gather up to [`MAX_SGE`] local buffers
/// (e.g. a transport header and an inline payload in different buffers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: WrId,
    pub op: SendOp,
    pub sge: [LocalBuf; MAX_SGE],
    pub num_sge: u8,
    /// Target of an RDMA Write or source of an RDMA Read; ignored for sends.
    pub remote: RemoteBuf,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
}

impl SendWr {
    /// A work request with one local buffer.
    pub fn new(wr_id: WrId, op: SendOp, local: LocalBuf, remote: RemoteBuf) -> Self {
        let mut sge = [LocalBuf::default(); MAX_SGE];
        sge[0] = local;
        SendWr {
            wr_id,
            op,
            sge,
            num_sge: 1,
            remote,
            signaled: true,
        }
    }
    /// The local scatter/gather list.
    pub fn sges(&self) -> &[LocalBuf] {
        &self.sge[..(self.num_sge as usize).min(MAX_SGE)]
    }
    /// Total local length.
    pub fn len(&self) -> u64 {
        self.sges().iter().map(|s| s.len as u64).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive work request: one buffer a peer's Send may land in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: WrId,
    pub buf: LocalBuf,
}

/// Completion status, after `ibv_wc_status` (the subset RPC-over-RDMA acts on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success,
    /// Local length error: a received message was larger than the receive buffer.
    LocalLength,
    /// Local protection error: a local buffer was not registered or out of range.
    LocalProtection,
    /// The work request was flushed because the QP went to the error state.
    Flushed,
    /// Remote access error: bad rkey, out-of-range or disallowed access at the peer.
    RemoteAccess,
    /// Remote invalid request (e.g. the peer's QP could not execute it).
    RemoteInvalidRequest,
    /// Receiver-not-ready retries exhausted: the peer had no receive posted.
    RnrRetryExceeded,
    /// Transport retries exhausted: the peer is unreachable.
    RetryExceeded,
    /// Any other failure.
    General,
}

impl WcStatus {
    pub const fn is_success(self) -> bool {
        matches!(self, WcStatus::Success)
    }
}

/// What a completion completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    Recv,
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: WrId,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub conn: ConnId,
    /// Bytes received (Recv) or transferred.
    pub byte_len: u32,
    /// For a Recv completed by a Send with Invalidate: the rkey the peer invalidated.
    pub invalidated_rkey: Option<u32>,
}

impl Completion {
    /// A placeholder for completion arrays handed to [`Fabric::poll_cq`].
    pub const EMPTY: Completion = Completion {
        wr_id: WrId(0),
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        conn: ConnId(0),
        byte_len: 0,
        invalidated_rkey: None,
    };
}

/// Maximum private data carried in a CM exchange. IB CM REQ carries 92 bytes of
/// which RDMA-CM keeps 56 for the consumer; RFC 8797 data is 8 bytes.
pub const MAX_PRIVATE_DATA: usize = 56;

/// Private data bytes carried by a CM event (fixed capacity, no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    len: u8,
    bytes: [u8; MAX_PRIVATE_DATA],
}

impl PrivateData {
    pub const EMPTY: PrivateData = PrivateData {
        len: 0,
        bytes: [0; MAX_PRIVATE_DATA],
    };
    /// Copy at most [`MAX_PRIVATE_DATA`] bytes (the CM truncates longer data too).
    pub fn new(b: &[u8]) -> Self {
        let n = b.len().min(MAX_PRIVATE_DATA);
        let mut bytes = [0; MAX_PRIVATE_DATA];
        bytes[..n].copy_from_slice(&b[..n]);
        PrivateData { len: n as u8, bytes }
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// A connection-manager event, polled with [`Fabric::poll_cm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A peer asks to connect to `listener`; answer with accept or reject.
    ConnectRequest {
        listener: ListenerId,
        req: ConnReqId,
        private_data: PrivateData,
    },
    /// A connection (from connect or accept) is usable; `private_data` is what the
    /// peer sent in its accept (for the active side) or empty.
    Established { conn: ConnId, private_data: PrivateData },
    /// The peer rejected our connect.
    Rejected { conn: ConnId, private_data: PrivateData },
    /// The connection could not be set up (address or route failure, timeout).
    Unreachable { conn: ConnId },
    /// The connection is gone (either side disconnected, or a fatal error). Its
    /// outstanding work requests complete with [`WcStatus::Flushed`] before or
    /// after this event; the consumer must poll them to recover its buffers.
    Disconnected { conn: ConnId },
}

/// Queue-pair configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// CQ that receives both send and receive completions of this QP.
    pub cq: CqId,
    /// Receive from this SRQ instead of a per-QP receive queue.
    pub srq: Option<SrqId>,
    /// Send-queue depth (outstanding send work requests).
    pub send_depth: u32,
    /// Per-QP receive-queue depth (ignored with an SRQ).
    pub recv_depth: u32,
    /// Outstanding RDMA Reads this side may initiate (IB "initiator depth").
    pub max_rdma_reads: u8,
    /// Bytes a Send may carry inline in the work request (0 = none).
    pub max_inline: u32,
    /// Receiver-not-ready retries (7 = infinite on IB).
    pub rnr_retry: u8,
    /// Transport retries.
    pub retry_count: u8,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            cq: CqId(0),
            srq: None,
            send_depth: 256,
            recv_depth: 256,
            max_rdma_reads: 16,
            max_inline: 0,
            rnr_retry: 7,
            retry_count: 7,
        }
    }
}

impl QpConfig {
    /// Check that the CQ and SRQ this configuration names exist among `cqs`
    /// CQs and `srqs` SRQs; returns their indices. Providers call it in
    /// connect and accept.
    pub fn check_ids(&self, cqs: usize, srqs: usize) -> Result<(usize, Option<usize>), FabricError> {
        let cq = self.cq.0 as usize;
        if cq >= cqs {
            return Err(FabricError::UnknownId {
                what: "cq",
                id: self.cq.0,
            });
        }
        let srq = match self.srq {
            Some(s) if s.0 as usize >= srqs => return Err(FabricError::UnknownId { what: "srq", id: s.0 }),
            Some(s) => Some(s.0 as usize),
            None => None,
        };
        Ok((cq, srq))
    }
}

/// What a provider can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub send_with_invalidate: bool,
    pub srq: bool,
    pub max_inline: u32,
    pub max_sge: u32,
    pub max_msg_size: u32,
}

/// Errors from fabric operations (control path and posting).
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown {what} {id}")]
    UnknownId { what: &'static str, id: u32 },
    #[error("region {region} is not registered with this fabric")]
    NotRegistered { region: u16 },
    #[error("{what} is full")]
    QueueFull { what: &'static str },
    #[error("connection {0:?} is not connected")]
    NotConnected(ConnId),
    #[error("invalid address {0:?}")]
    BadAddress(String),
    #[error("{0} is not supported by this provider")]
    Unsupported(&'static str),
    #[error("{0}")]
    Other(String),
}

impl FabricError {
    pub fn io(op: &'static str, source: std::io::Error) -> Self {
        FabricError::Io { op, source }
    }
}

/// The verbs-shaped provider interface. See the module docs for the model.
///
/// Every method is called only from the core that owns this value.
pub trait Fabric {
    /// Provider name ("verbs", "shm", "sim").
    fn name(&self) -> &'static str;

    fn caps(&self) -> Caps;

    /// Register a memory region for local use; with
    /// [`RegionAccess::Exposable`] parts of it may later be exposed with
    /// [`Fabric::expose`]. A registration alone grants no remote access: an
    /// RDMA Read or Write naming the region's own key fails at the
    /// initiator with [`WcStatus::RemoteAccess`]. Called once per region at
    /// start-up; keys live until the fabric is dropped. The provider may keep
    /// a clone of the `Arc` to reach the region's memory (shm and sim copy
    /// through it).
    fn register_region(
        &mut self,
        region: &Arc<mempool::region::Region>,
        access: RegionAccess,
    ) -> Result<MrKeys, FabricError>;

    /// Expose `buf` (inside a region registered [`RegionAccess::Exposable`])
    /// to the peer of `conn`, and to no other connection, for `access`,
    /// until [`Fabric::hide`] (or the peer's Send with Invalidate of the
    /// handle, or the connection's end). Returns the segment to advertise
    /// (RFC 8166 s3.4.3): a handle valid on `conn` only, `buf.len`, and the
    /// address of `buf`. The peer's Reads and Writes must fall inside it.
    /// Data path: no system call on shm and sim; on verbs a Memory Window
    /// bind posted on `conn`'s send queue, before the Call's Send. Owning core.
    fn expose(&mut self, conn: ConnId, buf: LocalBuf, access: Access) -> Result<RemoteBuf, FabricError>;

    /// End the exposure of `handle` (from [`Fabric::expose`] on `conn`): the
    /// peer's later Reads and Writes with it fail with RemoteAccess.
    /// Idempotent; a handle the peer already invalidated, or one of a
    /// connection that is gone, is released quietly. Owning core.
    fn hide(&mut self, conn: ConnId, handle: u32);

    /// The address a peer must use in a segment's offset to reach `offset` bytes
    /// into local region `region` (a virtual address for verbs, a region-relative
    /// offset for shm and sim). Together with the region's rkey this turns a local
    /// buffer into a [`RemoteBuf`] with no lookup.
    fn remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError>;

    fn create_cq(&mut self, depth: u32) -> Result<CqId, FabricError>;

    fn create_srq(&mut self, depth: u32) -> Result<SrqId, FabricError>;

    /// Start listening at `addr` (provider-specific syntax, e.g. "10.0.2.15:20049"
    /// for verbs, a socket path for shm, a name for sim).
    fn listen(&mut self, addr: &str) -> Result<ListenerId, FabricError>;

    /// Begin connecting to `addr`; completion is a [`CmEvent::Established`],
    /// [`CmEvent::Rejected`] or [`CmEvent::Unreachable`] for the returned id.
    fn connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError>;

    /// Accept a pending request; the connection is usable after its
    /// [`CmEvent::Established`]. Receives may be posted before that.
    fn accept(&mut self, req: ConnReqId, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError>;

    fn reject(&mut self, req: ConnReqId, private_data: &[u8]) -> Result<(), FabricError>;

    /// Disconnect; outstanding work requests are flushed.
    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError>;

    /// Poll one connection-manager event, if any. Never blocks.
    fn poll_cm(&mut self) -> Option<CmEvent>;

    /// Direct data placement: where this process may store, with plain
    /// stores, the `len` bytes an RDMA Write to `seg` (rkey `seg.handle`,
    /// address `seg.offset`) would write on the peer, after the key and bounds
    /// checks that Write would make. For providers that map the peer's
    /// registered memory into this process (shm); `None` (the default: verbs,
    /// sim) when the provider cannot, when `conn` is not established, or when
    /// the checks fail: the caller then copies into a local buffer and posts
    /// the RDMA Write, which reports any error the usual way.
    ///
    /// The memory stays mapped at least until this core's next call into the
    /// fabric (only those tear a connection down). What is stored there is
    /// published to the peer by the connection's next Send, as the bytes of an
    /// RDMA Write posted before that Send are (RFC 8166 s3.4.6 places a Write
    /// chunk's data before the Reply that reports it). Owning core.
    fn remote_window(&mut self, _conn: ConnId, _seg: &RemoteBuf, _len: u32) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    /// The peer's IP address of an accepted or connected connection, for
    /// access control (NFS export client lists). `None` when the provider
    /// cannot tell; the loopback providers report the loopback address.
    fn peer_addr(&self, _conn: ConnId) -> Option<std::net::IpAddr> {
        None
    }

    fn post_send(&mut self, conn: ConnId, wr: &SendWr) -> Result<(), FabricError>;

    /// Post a receive on a connection's own receive queue (QPs without an SRQ).
    fn post_recv(&mut self, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError>;

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError>;

    /// Poll up to `out.len()` completions into `out`; returns how many. Never blocks.
    fn poll_cq(&mut self, cq: CqId, out: &mut [Completion]) -> usize;

    /// Doorbell batching: hand the device now what [`Fabric::post_send`]
    /// accepted. A provider may stage posted send work requests and post
    /// each connection's as one chain (verbs: one `ibv_post_send`, a system
    /// call on software devices, for a reply's RDMA Writes and Send); it
    /// does so here, and by itself before it next polls a CQ, arms its
    /// wake-ups, posts other work on that connection or fails it, so a
    /// caller that never flushes only posts later. The engines call it at
    /// the end of every turn. Ordering, completions and errors are as if
    /// each request had been posted at its `post_send` (a refused chain
    /// completes its requests Flushed and ends the connection). Default:
    /// nothing to do (shm and sim execute or queue at `post_send`).
    fn flush(&mut self) {}

    /// Interrupt mode (issue 24 item 1, see [`wake`]): the descriptors that
    /// become readable, once [`Fabric::arm_wakeup`] said yes, when a
    /// completion or CM event arrives. Fixed once the fabric listens.
    fn wake_fds(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }

    /// Interrupt mode: ask for a readable [`Fabric::wake_fds`] descriptor on
    /// the next completion or CM event, clearing what made them readable
    /// before. `false` (the default) when the provider cannot (now). The
    /// caller polls every CQ and `poll_cm` once more before it blocks.
    fn arm_wakeup(&mut self) -> bool {
        false
    }

    /// Interrupt mode, as [`Fabric::arm_wakeup`], for a caller that waits
    /// for no completion of its own sends, RDMA Writes or RDMA Reads (they
    /// would only free slots and buffers): only receives, CM events and
    /// peers' doorbells need make a descriptor readable, so a reply's Send
    /// completing after the caller blocked does not wake it (it is reaped
    /// at the next wake-up). The default arms everything.
    fn arm_wakeup_receives(&mut self) -> bool {
        self.arm_wakeup()
    }

    /// Interrupt mode: the caller woke up; undo what arming told peers.
    fn disarm_wakeup(&mut self) {}

    /// How often this provider entered its device driver (posts, CQ
    /// notification requests, completion-channel reads), for diagnostics:
    /// each is a system call on software RDMA devices. `None` (the default)
    /// for providers without a driver (shm, sim).
    fn driver_calls(&self) -> Option<wake::DriverCalls> {
        None
    }

    /// Posted work that this provider executes over several polls is under
    /// way (shm copies a large RDMA Read or Write a slice per poll): the
    /// caller's loop should count the turn busy and poll again, not spin
    /// down or sleep. The default: never (a NIC progresses its work without
    /// being polled).
    fn progressing(&self) -> bool {
        false
    }
}

pub mod wake;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_id_packs_tag_and_index() {
        let w = WrId::new(3, 123_456_789);
        assert_eq!((w.tag(), w.index()), (3, 123_456_789));
        let w = WrId::new(255, WrId::INDEX_MAX);
        assert_eq!((w.tag(), w.index()), (255, WrId::INDEX_MAX));
    }

    #[test]
    fn private_data_is_bounded() {
        let p = PrivateData::new(&[7u8; 100]);
        assert_eq!(p.as_bytes().len(), MAX_PRIVATE_DATA);
        assert_eq!(PrivateData::new(b"abc").as_bytes(), b"abc");
    }
}
