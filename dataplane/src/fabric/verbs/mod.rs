//! `verbs`: the [`Fabric`] over rdma-core — RDMA-CM for connections, ibverbs
//! for the data path — on any RDMA device (InfiniBand, RoCE, iWARP, and the
//! software devices `rdma_rxe` and `siw`).
//!
//! rdma-core is reached through `rdma-mummy-sys`, which loads `libibverbs.so.1`
//! and `librdmacm.so.1` at run time: a binary built with this module starts on
//! a host without rdma-core, and [`VerbsFabric::new`] then fails with the
//! "no RDMA device" error instead of the loader refusing the program.
//!
//! # Model
//!
//! - **One device, one protection domain** per fabric, chosen at creation
//!   (first device, or [`VerbsConfig::device`]). Every listen and connect
//!   address must route through that device.
//! - **Memory regions** are registered once ([`Fabric::register_region`]) with
//!   `IBV_ACCESS_LOCAL_WRITE` only (plus `MW_BIND` when exposable): an MR's
//!   rkey opens nothing to any peer (RFC 8166 s8.1). They are looked up on the
//!   data path by region id in a plain array.
//! - **Exposure** ([`Fabric::expose`]): a type-2 Memory Window bound over the
//!   chunk buffer on the Call's own QP, for remote Read or remote Write, with
//!   an `IBV_WR_BIND_MW` posted before the Call's Send; [`Fabric::hide`] posts
//!   `IBV_WR_LOCAL_INV` (or the peer's Send with Invalidate did it). Windows
//!   are kept per QP and rebound with a bumped rkey; they are deallocated with
//!   their QP. Segments carry virtual addresses
//!   (RFC 8166 s3.4.3 leaves the meaning of the offset to the transport).
//!   The provider's binds and invalidations complete unreported (an error
//!   one with [`INTERNAL_WR_ID`]); QPs get [`INTERNAL_SQ_FACTOR`] times the
//!   consumer's send depth for them.
//! - **Completion queues**: a [`CqId`] is two hardware CQs of the same depth,
//!   one for send-queue and one for receive-queue completions, because an
//!   error completion's opcode is undefined in `ibv_wc` and the provider must
//!   know which queue a failed `wr_id` came from. [`Fabric::poll_cq`] polls
//!   both with `ibv_poll_cq` in batches of [`WC_BATCH`] (alternating which
//!   comes first) after handing out provider-made completions (receives flushed
//!   before their QP existed).
//! - **Work requests**: `wr_id` is the [`WrId`] value. [`Fabric::post_send`]
//!   stages a request on its connection; [`Fabric::flush`] (the engines call
//!   it at the end of every turn), or failing that the fabric's next poll,
//!   arming or error on that QP, posts a connection's staged
//!   requests as one linked chain: one `ibv_post_send`, which is one
//!   system call on rxe and siw, for a reply's RDMA Writes and its Send
//!   (doorbell batching). A requester's memory-window binds
//!   ([`Fabric::expose`]) and invalidations ([`Fabric::hide`]) are staged
//!   the same way, in order with the Sends that advertise the windows, as
//!   the Linux client chains its registrations with its Send: a chunked
//!   Call costs one doorbell with its Send, not three. Every request is posted *signaled* (a request
//!   posted unsignaled that succeeded leaves no completion, and once the QP
//!   fails the device completes only those that had not: the FIFO below
//!   could no longer tell which completion is whose); a success completion
//!   of a request the consumer posted unsignaled is dropped. The per-QP
//!   record of outstanding sends (a FIFO: RC completes a send queue in
//!   order) gives error completions their opcode and tells when a dead QP
//!   is empty. Sends of at most the QP's
//!   `max_inline_data` bytes go `IBV_SEND_INLINE`; their bytes are the ones
//!   at `post_send` (copied into the staged request, [`STAGE_INLINE`] at
//!   most; a larger inline Send is posted at once).
//! - **Connection manager**: one event channel per fabric with its descriptor
//!   non-blocking, so [`Fabric::poll_cm`] never blocks; every event is copied
//!   and acknowledged at once. Active side: `rdma_create_id` →
//!   `rdma_resolve_addr` → (ADDR_RESOLVED) create the QP → `rdma_resolve_route`
//!   → (ROUTE_RESOLVED) `rdma_connect` with the private data → ESTABLISHED.
//!   Receives posted before the QP exists are kept and posted when it is
//!   created. Passive side: `rdma_bind_addr` + `rdma_listen`; a CONNECT_REQUEST
//!   becomes [`CmEvent::ConnectRequest`]; `accept` creates the QP on the
//!   request's id and calls `rdma_accept`, `reject` calls `rdma_reject` —
//!   both with private data (RFC 8797 s5.1). Private data received over
//!   IB/RoCE is reported as the CM delivers it (e.g. zero-padded to 56 bytes
//!   in a REQ); RFC 8797 decoding tolerates the padding.
//! - **Send with Invalidate** is posted as `IBV_WR_SEND_WITH_INV`; a receive
//!   it completed reports the rkey in [`Completion::invalidated_rkey`]
//!   (`IBV_WC_WITH_INV`; on rxe also the flag bit rxe really sets, see
//!   `invalidate_flags`). Devices invalidate only Memory Windows and
//!   fast-registered MRs, not the persistent MRs of [`Fabric::register_region`]
//!   (rxe fails the receive with a remote invalid request): remote invalidation
//!   needs a window from [`Fabric::expose`].
//! - **RNR and retries** come from [`QpConfig`] (`rnr_retry`, `retry_count`,
//!   at most 7) through the CM connection parameters (`rdma_conn_param`), and
//!   the IB CM applies them as it does for every RDMA-CM consumer: the RNR
//!   retry count a side passes (in its REQ or REP) is the one its **peer's**
//!   QP uses — how often the peer re-sends while *this* side has no receive
//!   posted — and the active side's `retry_count` sets both QPs' transport
//!   retries. (`verbs_raw` step 7: a server accepting with `rnr_retry: 1`
//!   makes the client's Send fail with RnrRetryExceeded.) `max_rdma_reads`
//!   sets the initiator depth, clamped to the device and, on accept, to what
//!   the peer offers.
//!
//! # Errors and teardown
//!
//! An error completion other than Flushed, a CM DISCONNECTED, a local
//! [`Fabric::disconnect`] or a device removal moves the connection to the
//! error state: the QP is put in `IBV_QPS_ERR` with `ibv_modify_qp` (so every
//! outstanding work request completes with [`WcStatus::Flushed`]),
//! `rdma_disconnect` tells the peer, and one terminal event is queued —
//! [`CmEvent::Disconnected`] once established, [`CmEvent::Unreachable`] /
//! [`CmEvent::Rejected`] before. The connection's QP and id are destroyed only
//! after the terminal event was polled and its send queue (and, without an
//! SRQ, its receive queue) has completed everything, so no completion is lost
//! and a stale [`ConnId`] (16-bit generation) never names a new connection.
//! SRQ receives are not flushed by a QP error (IB semantics); they stay with
//! the SRQ until it is destroyed with the fabric.
//!
//! # Threading and safety
//!
//! A `VerbsFabric` is `Send` and belongs to one core (the trait's rule). All
//! rdma-core objects are reached through raw pointers owned by the fabric and
//! released in [`Drop`] (QPs and ids, then SRQs, CQs, windows, MRs, the PD,
//! the event channel, the device list). Every `unsafe` block says why its
//! pointers are valid.
//!
//! # Files
//!
//! This file holds the configuration, the fabric's state and the [`Fabric`]
//! impl, whose methods call the code of their concern:
//!
//! | file | what |
//! |---|---|
//! | `device.rs` | opening the device (context, PD, event channel, limits); [`Drop`] |
//! | `mr.rs` | memory regions, addresses and SGEs, memory windows |
//! | `cm.rs` | connection management over RDMA-CM and its events |
//! | `qp.rs` | queue pairs: creation, posting, the error state, reaping |
//! | `cq.rs` | completion queues and SRQs: creation and polling |
//! | `addr.rs` | parsing `IP:PORT` addresses |
//! | `status.rs` | work completion status and opcode translation |

pub mod addr;
mod cm;
mod cq;
mod device;
mod mr;
mod qp;
pub mod status;
mod wake;

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::io;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

use rdma_mummy_sys as sys;

use crate::fabric::{
    Access, Caps, CmEvent, Completion, ConnId, ConnReqId, CqId, Fabric, FabricError, ListenerId, LocalBuf, MrKeys,
    PrivateData, QpConfig, RecvWr, RegionAccess, RemoteBuf, SendOp, SendWr, SrqId, WcOpcode, WcStatus, WrId,
    MAX_PRIVATE_DATA, MAX_SGE,
};
use crate::queue::GenSlab as Slab;

/// The message [`VerbsFabric::new`] fails with when the host has no RDMA
/// device (or no rdma-core libraries).
pub const NO_DEVICE: &str = "no RDMA device: load rdma_rxe or siw, see tests/verbs/run.sh";

/// Work completions read per `ibv_poll_cq` call.
pub const WC_BATCH: usize = 32;

/// Largest CQ / SRQ / queue depth accepted (the device may allow less).
pub const MAX_QUEUE_DEPTH: u32 = 1 << 20;

/// IB CM reject reason "consumer defined" (IBA 12.6.7.2, table 112): the
/// peer's consumer called reject, as opposed to the CM refusing (no listener).
const IB_CM_REJ_CONSUMER_DEFINED: c_int = 28;

/// Kinds stored in a CM id's `context` (with a 32-bit id below them).
const CTX_CONN: u32 = 1;
const CTX_LISTENER: u32 = 2;
const CTX_REQUEST: u32 = 3;

/// Configuration of a [`VerbsFabric`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Device name (e.g. "rxe0", "mlx5_0"); `None` = the first device.
    pub device: Option<String>,
    /// Most connections at once (live ones plus those not yet reaped).
    pub max_conns: u16,
    /// Incoming connection requests waiting for accept or reject at once;
    /// more are rejected by the provider.
    pub max_pending_requests: u16,
    /// Timeout of `rdma_resolve_addr` and of `rdma_resolve_route`.
    pub resolve_timeout_ms: u32,
    /// `rdma_listen` backlog.
    pub listen_backlog: u32,
    /// Inline bytes asked for every QP whose [`QpConfig::max_inline`] is 0
    /// (a QP that cannot have them is created without inline data).
    pub max_inline: u32,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: None,
            max_conns: 256,
            max_pending_requests: 64,
            resolve_timeout_ms: 2000,
            listen_backlog: 64,
            max_inline: 64,
        }
    }
}

/// What the device says about itself (clamps for queue sizes).
#[derive(Clone, Copy, Debug, Default)]
struct DevLimits {
    max_qp_wr: u32,
    max_sge: u32,
    max_cqe: u32,
    max_srq_wr: u32,
    /// Incoming RDMA Reads a QP may have outstanding (responder resources).
    max_qp_rd_atom: u8,
    /// RDMA Reads a QP may issue at once (initiator depth).
    max_qp_init_rd_atom: u8,
    max_msg_size: u32,
    vendor_id: u32,
}

#[derive(Debug)]
struct Mr {
    mr: *mut sys::ibv_mr,
    base: u64,
    len: u64,
    lkey: u32,
    /// Registered [`RegionAccess::Exposable`] (with `MW_BIND`).
    exposable: bool,
    /// Keeps the memory mapped while it is registered.
    _region: Arc<mempool::region::Region>,
}

#[derive(Debug)]
struct Cq {
    send: *mut sys::ibv_cq,
    recv: *mut sys::ibv_cq,
    /// Completions made by the provider (receives flushed before their QP
    /// existed); bounded by the receives such QPs may hold.
    soft: VecDeque<Completion>,
    /// Poll the receive CQ first on odd turns.
    turn: bool,
}

#[derive(Debug)]
struct Srq {
    srq: *mut sys::ibv_srq,
}

#[derive(Debug)]
struct Listener {
    id: *mut sys::rdma_cm_id,
}

#[derive(Debug)]
struct Request {
    id: *mut sys::rdma_cm_id,
    /// From the REQ, in our perspective: reads the peer will issue to us, and
    /// reads it accepts from us.
    responder_resources: u8,
    initiator_depth: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Active side: address or route being resolved, or connect sent.
    Connecting,
    /// Passive side: accepted, waiting for ESTABLISHED.
    Accepting,
    Established,
    /// Dead: terminal event queued, work flushing.
    Error,
}

/// A posted (or staged) send-queue work request, in posting order.
#[derive(Clone, Copy, Debug)]
struct SqEntry {
    /// The consumer asked for a completion ([`SendWr::signaled`]).
    signaled: bool,
    opcode: WcOpcode,
    /// Posted by the provider itself (a window bind or invalidation), not
    /// counted against the consumer's `send_depth`.
    internal: bool,
    /// The consumer's `wr_id`, for the Flushed completion of a request
    /// that was staged and never posted.
    wr_id: u64,
}

/// A send work request staged for the connection's next chain post
/// (doorbell batching, `qp.rs`): the request as it will be posted, its
/// `next` and `sg_list` set when the chain is linked.
struct Staged {
    wr: sys::ibv_send_wr,
    sges: [sys::ibv_sge; MAX_SGE],
    /// An inline Send's bytes, copied at `post_send` as the device would
    /// have (the caller may reuse the source at once); `inline_len` of them.
    inline: [u8; STAGE_INLINE],
    inline_len: u16,
    /// The provider's own request (a window bind or invalidation), staged
    /// in order with the consumer's so that it rides the same doorbell.
    internal: bool,
}

impl Staged {
    /// A staged bind of window `mw`.
    fn binds(&self, mw: *mut sys::ibv_mw) -> bool {
        // SAFETY: the union holds `bind_mw` for a BIND_MW request.
        self.internal
            && self.wr.opcode == sys::ibv_wr_opcode::IBV_WR_BIND_MW
            && unsafe { self.wr.bind_mw_tso_union.bind_mw.mw } == mw
    }
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("wr_id", &self.wr.wr_id)
            .field("opcode", &self.wr.opcode)
            .finish_non_exhaustive()
    }
}

/// The `wr_id` of the provider's own work requests; an error completion
/// of one reaches the consumer with it (tag 0xff, which no engine uses).
pub const INTERNAL_WR_ID: WrId = WrId::new(0xff, WrId::INDEX_MAX);

/// Most send work requests staged on one connection before they are posted
/// as a chain without waiting for [`Fabric::flush`].
pub const STAGE_MAX: usize = 32;

/// Bytes of an inline Send a staged request holds (a larger inline Send is
/// posted at once).
pub const STAGE_INLINE: usize = 128;

/// Send-queue room a QP has for the provider's own work requests (window
/// binds and invalidations), per consumer send-queue entry.
pub(super) const INTERNAL_SQ_FACTOR: u32 = 3;

#[derive(Debug)]
struct Conn {
    id: *mut sys::rdma_cm_id,
    qp: *mut sys::ibv_qp,
    qp_num: u32,
    cq: usize,
    srq: Option<usize>,
    cfg: QpConfig,
    /// Inline bytes the QP was created with.
    max_inline: u32,
    state: State,
    active: bool,
    /// Private data for `rdma_connect` (active side, until ROUTE_RESOLVED).
    connect_pd: PrivateData,
    /// Receives posted before the QP existed (active side).
    early_recvs: Vec<RecvWr>,
    sq: VecDeque<SqEntry>,
    /// Entries of `sq` that are the provider's own.
    sq_internal: u32,
    /// Memory Windows bound on this QP ([`Fabric::expose`]): (rkey, window).
    windows: Vec<(u32, *mut sys::ibv_mw)>,
    /// Windows of this QP free to bind again (after an invalidation posted
    /// on this QP, so a new bind is ordered after it), with their last rkey.
    free_mws: Vec<(*mut sys::ibv_mw, u32)>,
    /// Receives on the QP's own receive queue not completed yet.
    rq_out: u32,
    /// Send work requests accepted by `post_send` and not yet handed to
    /// the device (the tail of `sq`): posted as one chain, one doorbell,
    /// by [`Fabric::flush`] or before the fabric next polls, arms, posts a
    /// window operation on this QP or fails the connection.
    staged: Vec<Staged>,
    /// Listed in `VerbsFabric::dirty`.
    dirty: bool,
    terminal_queued: bool,
    terminal_delivered: bool,
}

impl Conn {
    fn drained(&self) -> bool {
        self.sq.is_empty() && self.early_recvs.is_empty() && (self.srq.is_some() || self.rq_out == 0)
    }
}

/// One CM event, copied out of rdma-core before it is acknowledged.
#[derive(Clone, Copy, Debug)]
struct CmRaw {
    event: sys::rdma_cm_event_type::Type,
    status: c_int,
    id: *mut sys::rdma_cm_id,
    /// Kind and id stored in the context of the event's id (for a connect
    /// request: of the listener's id).
    ctx: (u32, u32),
    private_data: PrivateData,
    responder_resources: u8,
    initiator_depth: u8,
}

fn errno(op: &'static str) -> FabricError {
    FabricError::io(op, io::Error::last_os_error())
}

fn rc_err(op: &'static str, rc: c_int) -> FabricError {
    FabricError::io(op, io::Error::from_raw_os_error(rc))
}

/// The verbs fabric. See the module documentation.
pub struct VerbsFabric {
    cfg: VerbsConfig,
    dev_list: *mut *mut sys::ibv_context,
    ctx: *mut sys::ibv_context,
    dev_name: String,
    limits: DevLimits,
    /// See `device::invalidate_flags`.
    inv_flags: u32,
    pd: *mut sys::ibv_pd,
    channel: *mut sys::rdma_event_channel,
    /// The completion channel every CQ reports to (interrupt mode, `wake`).
    comp: *mut sys::ibv_comp_channel,
    /// Indexed by region id.
    mrs: Vec<Option<Mr>>,
    mws: Vec<*mut sys::ibv_mw>,
    cqs: Vec<Cq>,
    srqs: Vec<Srq>,
    listeners: Vec<Listener>,
    requests: Slab<Request>,
    conns: Slab<Conn>,
    /// QP number → connection slot index, for completions.
    by_qp: HashMap<u32, usize>,
    events: VecDeque<CmEvent>,
    wcs: Box<[sys::ibv_wc; WC_BATCH]>,
    /// The first error completion (not a flush) of the connection that
    /// failed last, for diagnostics ([`VerbsFabric::last_wc_error`]).
    last_wc_error: Option<WcError>,
    /// Connection slots with staged send work requests.
    dirty: Vec<usize>,
    /// CQs whose notification was requested and whose event has not been
    /// read yet. A CQ in it is armed still, and is not requested again
    /// (`wake.rs`).
    armed: Vec<ArmedCq>,
    /// Counters of this fabric's own system calls (diagnostics, tests).
    counts: VerbsCounts,
}

/// A hardware CQ whose completion notification was requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ArmedCq {
    /// Index in `cqs`.
    cq: usize,
    /// The send-queue CQ (else the receive CQ).
    send: bool,
    /// A poll of it returned completions since the request: only then can
    /// its event have fired (the device signals the first completion added
    /// after the request; one added but not polled yet keeps the core's
    /// wait from blocking, and is polled before the next arming).
    polled: bool,
}

/// The verbs fabric's own system-call counters (see
/// [`crate::fabric::wake::DriverCalls`]).
pub use crate::fabric::wake::DriverCalls as VerbsCounts;

/// An error work completion as the device reported it, for diagnostics:
/// the fabric's [`Completion`] keeps only the status the engine acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WcError {
    pub qp_num: u32,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// The provider's own error code (`ibv_wc::vendor_err`).
    pub vendor_err: u32,
    /// Whether the work request was the provider's own (a window bind or
    /// invalidation) rather than the consumer's.
    pub internal: bool,
    /// Opcode of the work request as posted (the completion's is undefined
    /// on error).
    pub opcode: Option<WcOpcode>,
}

/// The transport retry settings of a connection's QP as the device holds
/// them (`ibv_query_qp`), for diagnostics: what the CM made of
/// [`QpConfig`]'s counts and the path (IBTA: the local ACK timeout is
/// 4.096 us x 2^`ack_timeout`, 0 = never; a `retry_cnt` or `rnr_retry` of 7
/// = retry forever for RNR, and on rxe for transport retries too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTransport {
    /// The local ACK timeout exponent (`ibv_qp_attr::timeout`).
    pub ack_timeout: u8,
    /// Transport retries before an error completion.
    pub retry_cnt: u8,
    /// Retries after an RNR NAK from the peer.
    pub rnr_retry: u8,
    /// The RNR NAK timer this QP gives its peer (IBTA table code).
    pub min_rnr_timer: u8,
}

impl QpTransport {
    /// The local ACK timeout in microseconds, `None` when it never fires.
    pub fn ack_timeout_us(&self) -> Option<u64> {
        (self.ack_timeout != 0).then(|| (4096u64 << self.ack_timeout.min(31)) / 1000)
    }
}

impl std::fmt::Display for WcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "qp {}: {:?} (ibv_wc_status {}, vendor_err {:#x}) on {} work request {:?}",
            self.qp_num,
            status::wc_status(self.status),
            self.status,
            self.vendor_err,
            if self.internal { "a window" } else { "a consumer" },
            self.opcode
        )
    }
}

impl std::fmt::Debug for VerbsFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFabric")
            .field("device", &self.dev_name)
            .field("limits", &self.limits)
            .field("regions", &self.mrs.iter().flatten().count())
            .field("cqs", &self.cqs.len())
            .field("srqs", &self.srqs.len())
            .field("listeners", &self.listeners.len())
            .field("conns", &self.conn_count())
            .finish_non_exhaustive()
    }
}

// SAFETY: the fabric exclusively owns every rdma-core object it points to;
// libibverbs and librdmacm allow their objects to be used from any thread
// (one at a time here: the fabric is moved, never shared, and `&mut self`
// serialises every call).
unsafe impl Send for VerbsFabric {}

impl Fabric for VerbsFabric {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn caps(&self) -> Caps {
        Caps {
            send_with_invalidate: true,
            srq: self.limits.max_srq_wr > 0,
            max_inline: self.cfg.max_inline,
            max_sge: (MAX_SGE as u32).min(self.limits.max_sge),
            max_msg_size: self.limits.max_msg_size,
        }
    }

    /// `ibv_reg_mr` over the whole region with local write access only
    /// (its rkey opens nothing: RFC 8166 s8.1), plus `MW_BIND` when
    /// exposable. Once per region id.
    fn register_region(
        &mut self,
        region: &Arc<mempool::region::Region>,
        access: RegionAccess,
    ) -> Result<MrKeys, FabricError> {
        self.do_register_region(region, access)
    }

    /// A type-2 Memory Window bound over `buf` on `conn`'s QP (only that
    /// QP's peer can use it) for remote Read or Write, posted before the
    /// Call's Send; windows are kept per QP and rebound, so the steady state
    /// makes no system call beyond the post.
    fn expose(&mut self, conn: ConnId, buf: LocalBuf, access: Access) -> Result<RemoteBuf, FabricError> {
        self.do_expose(conn, buf, access)
    }

    /// Posts a Local Invalidate of the window on `conn`'s QP, unless the
    /// peer invalidated it already (Send with Invalidate).
    fn hide(&mut self, conn: ConnId, handle: u32) {
        self.do_hide(conn, handle)
    }

    /// The virtual address `base + offset` (after checking `offset` is within
    /// the region).
    fn remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError> {
        self.do_remote_addr(region, offset)
    }

    /// Two hardware CQs (sends, receives) of `depth` entries each.
    fn create_cq(&mut self, depth: u32) -> Result<CqId, FabricError> {
        self.do_create_cq(depth)
    }

    fn create_srq(&mut self, depth: u32) -> Result<SrqId, FabricError> {
        self.do_create_srq(depth)
    }

    /// `addr`: "IP:PORT" (see [`addr::parse`]); "0.0.0.0:PORT" listens on
    /// every device, but only requests arriving through this fabric's device
    /// can be accepted.
    fn listen(&mut self, addr: &str) -> Result<ListenerId, FabricError> {
        self.do_listen(addr)
    }

    /// Starts address resolution; route resolution and `rdma_connect` follow
    /// from [`Fabric::poll_cm`]. Receives may be posted at once (they are
    /// posted to the QP when it is created).
    fn connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        self.do_connect(addr, qp, private_data)
    }

    /// Creates the QP on the request's id and answers with `rdma_accept`.
    /// On failure the request is rejected and forgotten.
    fn accept(&mut self, req: ConnReqId, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        self.do_accept(req, qp, private_data)
    }

    fn reject(&mut self, req: ConnReqId, private_data: &[u8]) -> Result<(), FabricError> {
        self.do_reject(req, private_data)
    }

    /// Moves the QP to the error state (outstanding work requests complete
    /// Flushed in later `poll_cq` calls), sends a DREQ and queues
    /// `Disconnected` at once. Idempotent: a connection already in error, or
    /// already reaped, is `Ok`.
    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        self.do_disconnect(conn)
    }

    fn peer_addr(&self, conn: ConnId) -> Option<std::net::IpAddr> {
        self.do_peer_addr(conn)
    }

    fn poll_cm(&mut self) -> Option<CmEvent> {
        self.do_poll_cm()
    }

    fn post_send(&mut self, conn: ConnId, wr: &SendWr) -> Result<(), FabricError> {
        self.do_post_send(conn, wr)
    }

    /// Receives may be posted from `connect`/`accept` on (before
    /// `Established`); on a connection in error they are refused.
    fn post_recv(&mut self, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError> {
        self.do_post_recv(conn, wr)
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError> {
        self.do_post_srq_recv(srq, wr)
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut [Completion]) -> usize {
        self.do_poll_cq(cq, out)
    }

    /// Posts every connection's staged send work requests, one chain (one
    /// `ibv_post_send`, one doorbell) per connection.
    fn flush(&mut self) {
        self.flush_all()
    }

    fn wake_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.do_wake_fds()
    }

    fn arm_wakeup(&mut self) -> bool {
        self.do_arm_wakeup(true)
    }

    fn arm_wakeup_receives(&mut self) -> bool {
        self.do_arm_wakeup(false)
    }

    fn driver_calls(&self) -> Option<VerbsCounts> {
        Some(self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_ids_carry_a_generation() {
        let mut s: Slab<u32> = Slab::with_capacity(2);
        let a = s.insert(10).unwrap();
        let b = s.insert(11).unwrap();
        assert!(s.insert(12).is_none(), "bounded");
        let ia = s.index(a).unwrap();
        assert_eq!(s.remove(ia), Some(10));
        assert_eq!(s.index(a), None, "stale id after removal");
        let c = s.insert(13).unwrap();
        assert_eq!(c & 0xffff, a & 0xffff, "slot reused");
        assert_ne!(c, a, "with a new generation");
        assert_eq!(s.get(s.index(c).unwrap()), Some(&13));
        assert_eq!(s.get(s.index(b).unwrap()), Some(&11));
    }
}
