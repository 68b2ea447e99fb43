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
//!   `IBV_ACCESS_LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE` (plus `MW_BIND` when
//!   [`VerbsConfig::mw_bind`]), and looked up on the data path by region id in
//!   a plain array. [`Fabric::remote_addr`] is the virtual address
//!   (`base + offset`): segments carry virtual addresses and the MR's rkey
//!   (RFC 8166 s3.4.3 leaves the meaning of the offset to the transport).
//! - **Completion queues**: a [`CqId`] is two hardware CQs of the same depth,
//!   one for send-queue and one for receive-queue completions, because an
//!   error completion's opcode is undefined in `ibv_wc` and the provider must
//!   know which queue a failed `wr_id` came from. [`Fabric::poll_cq`] polls
//!   both with `ibv_poll_cq` in batches of [`WC_BATCH`] (alternating which
//!   comes first) after handing out provider-made completions (receives flushed
//!   before their QP existed).
//! - **Work requests**: `wr_id` is the [`WrId`] value. Every send-queue work
//!   request is posted *signaled*; a success completion of a request the
//!   consumer posted unsignaled is dropped. This keeps an exact per-QP record
//!   of outstanding sends (a FIFO: RC completes a send queue in order), which
//!   gives error completions their opcode and tells when a dead QP is empty.
//!   Sends of at most the QP's `max_inline_data` bytes go `IBV_SEND_INLINE`.
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
//!   needs a window from [`VerbsFabric::bind_window`].
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

pub mod addr;
pub mod status;

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::io;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

use rdma_mummy_sys as sys;

use crate::fabric::{
    Caps, CmEvent, Completion, ConnId, ConnReqId, CqId, Fabric, FabricError, ListenerId, LocalBuf, MrKeys, PrivateData,
    QpConfig, RecvWr, SendOp, SendWr, SrqId, WcOpcode, WcStatus, WrId, MAX_PRIVATE_DATA, MAX_SGE,
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
    /// Register regions with `IBV_ACCESS_MW_BIND` too, so that
    /// [`VerbsFabric::bind_window`] can bind Memory Windows over them.
    pub mw_bind: bool,
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
            mw_bind: false,
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

/// `ibv_device_attr::vendor_id` of Soft-RoCE (`RXE_VENDOR_ID` in the kernel).
const RXE_VENDOR_ID: u32 = 0xff_ffff;

/// The `wc_flags` bit(s) that say a receive completed a Send with Invalidate.
/// rxe (kernel 6.1, rdma-core 44) writes the *kernel's* `IB_WC_WITH_INVALIDATE`
/// (bit 2) into the user CQ instead of `IBV_WC_WITH_INV` (bit 3); bit 2 is
/// `IBV_WC_IP_CSUM_OK` for user space, which rxe never sets, so on rxe either
/// bit is taken to mean an invalidation.
fn invalidate_flags(vendor_id: u32) -> u32 {
    let inv = sys::ibv_wc_flags::IBV_WC_WITH_INV.0;
    if vendor_id == RXE_VENDOR_ID {
        inv | 1 << 2
    } else {
        inv
    }
}

#[derive(Debug)]
struct Mr {
    mr: *mut sys::ibv_mr,
    base: u64,
    len: u64,
    lkey: u32,
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

/// A posted send-queue work request, in posting order.
#[derive(Clone, Copy, Debug)]
struct SqEntry {
    signaled: bool,
    opcode: WcOpcode,
}

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
    /// Receives on the QP's own receive queue not completed yet.
    rq_out: u32,
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

fn tag_ctx(kind: u32, raw: u32) -> *mut c_void {
    (((kind as u64) << 32) | raw as u64) as usize as *mut c_void
}

fn untag_ctx(p: *mut c_void) -> (u32, u32) {
    let v = p as usize as u64;
    ((v >> 32) as u32, v as u32)
}

fn errno(op: &'static str) -> FabricError {
    FabricError::io(op, io::Error::last_os_error())
}

fn rc_err(op: &'static str, rc: c_int) -> FabricError {
    FabricError::io(op, io::Error::from_raw_os_error(rc))
}

fn wc_zero() -> sys::ibv_wc {
    // SAFETY: ibv_wc is plain old data (integers and a union of integers).
    unsafe { std::mem::zeroed() }
}

/// The verbs fabric. See the module documentation.
pub struct VerbsFabric {
    cfg: VerbsConfig,
    dev_list: *mut *mut sys::ibv_context,
    ctx: *mut sys::ibv_context,
    dev_name: String,
    limits: DevLimits,
    /// See [`invalidate_flags`].
    inv_flags: u32,
    pd: *mut sys::ibv_pd,
    channel: *mut sys::rdma_event_channel,
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

impl VerbsFabric {
    /// Open the device, allocate the protection domain and the CM event
    /// channel. Start-up; any thread (then owned by one core). Fails with
    /// [`NO_DEVICE`] (as `FabricError::Other`) when there is no RDMA device.
    pub fn new(cfg: VerbsConfig) -> Result<VerbsFabric, FabricError> {
        if cfg.max_conns == 0 || cfg.max_pending_requests == 0 {
            return Err(FabricError::Other(
                "max_conns and max_pending_requests must be positive".into(),
            ));
        }
        let mut n: c_int = 0;
        // SAFETY: rdma_get_devices writes `n` and returns NULL or a
        // NULL-terminated array of `n` open contexts, owned by librdmacm until
        // rdma_free_devices (called in Drop or below).
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        if list.is_null() {
            return Err(FabricError::Other(NO_DEVICE.into()));
        }
        let mut me = VerbsFabric {
            dev_list: list,
            ctx: ptr::null_mut(),
            dev_name: String::new(),
            limits: DevLimits::default(),
            inv_flags: 0,
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            mrs: Vec::new(),
            mws: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            listeners: Vec::new(),
            requests: Slab::with_capacity(cfg.max_pending_requests),
            conns: Slab::with_capacity(cfg.max_conns),
            by_qp: HashMap::with_capacity(cfg.max_conns as usize),
            events: VecDeque::with_capacity(2 * cfg.max_conns as usize + cfg.max_pending_requests as usize),
            wcs: Box::new([wc_zero(); WC_BATCH]),
            cfg,
        };
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: `list` has `n` valid entries (see above).
            let ctx = unsafe { *list.add(i) };
            if ctx.is_null() {
                break;
            }
            // SAFETY: `ctx` is an open context; its device pointer is valid for
            // its life, and the name is a NUL-terminated string owned by it.
            let name = unsafe {
                let p = sys::ibv_get_device_name((*ctx).device);
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            let wanted = match me.cfg.device.as_deref() {
                None => true,
                Some(d) => d == name,
            };
            if wanted && me.ctx.is_null() {
                me.ctx = ctx;
                me.dev_name = name.clone();
            }
            names.push(name);
        }
        if me.ctx.is_null() {
            return Err(FabricError::Other(match &me.cfg.device {
                Some(d) if !names.is_empty() => format!("no RDMA device {d:?} (have {})", names.join(", ")),
                _ => NO_DEVICE.into(),
            }));
        }
        me.limits = me.query_limits()?;
        me.inv_flags = invalidate_flags(me.limits.vendor_id);
        // SAFETY: `me.ctx` is an open context.
        me.pd = unsafe { sys::ibv_alloc_pd(me.ctx) };
        if me.pd.is_null() {
            return Err(errno("ibv_alloc_pd"));
        }
        // SAFETY: no arguments; returns NULL or a channel we own.
        me.channel = unsafe { sys::rdma_create_event_channel() };
        if me.channel.is_null() {
            return Err(errno("rdma_create_event_channel"));
        }
        // SAFETY: `channel` is valid; `fd` is its open descriptor. O_NONBLOCK
        // makes rdma_get_cm_event return EAGAIN instead of blocking.
        let fd = unsafe { (*me.channel).fd };
        // SAFETY: fcntl on a descriptor we own, with integer arguments only.
        let rc = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 {
                fl
            } else {
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
            }
        };
        if rc < 0 {
            return Err(errno("fcntl(O_NONBLOCK) on the CM event channel"));
        }
        Ok(me)
    }

    fn query_limits(&self) -> Result<DevLimits, FabricError> {
        // SAFETY: ibv_device_attr / ibv_port_attr are plain old data; zero is a
        // valid initial value that the queries overwrite.
        let mut a: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `self.ctx` is an open context; `a` is a valid out pointer.
        let rc = unsafe { sys::ibv_query_device(self.ctx, &mut a) };
        if rc != 0 {
            return Err(rc_err("ibv_query_device", rc));
        }
        // SAFETY: as above.
        let mut p: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `self.ctx` is open, port 1 exists on every device (RDMA-CM
        // picks the port per connection; this is only for the message size).
        let prc = unsafe { sys::ibv_query_port(self.ctx, 1, &mut p) };
        let pos = |v: c_int| v.max(0) as u32;
        Ok(DevLimits {
            max_qp_wr: pos(a.max_qp_wr),
            max_sge: pos(a.max_sge),
            max_cqe: pos(a.max_cqe),
            max_srq_wr: pos(a.max_srq_wr),
            max_qp_rd_atom: a.max_qp_rd_atom.clamp(0, 255) as u8,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.clamp(0, 255) as u8,
            max_msg_size: if prc == 0 && p.max_msg_sz > 0 {
                p.max_msg_sz
            } else {
                1 << 30
            },
            vendor_id: a.vendor_id,
        })
    }

    /// Name of the device in use (e.g. "rxe0"). Any time.
    pub fn device_name(&self) -> &str {
        &self.dev_name
    }

    /// Connections currently held (live or waiting to be reaped). Any time.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// The QP number of a connection (for diagnostics), once its QP exists.
    pub fn qp_num(&self, conn: ConnId) -> Option<u32> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        (!c.qp.is_null()).then_some(c.qp_num)
    }

    /// Inline bytes the connection's QP was created with.
    pub fn max_inline(&self, conn: ConnId) -> Option<u32> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        (!c.qp.is_null()).then_some(c.max_inline)
    }

    /// Bind a fresh type-2 Memory Window over `buf` (remote Read and Write)
    /// with a work request on `conn`'s send queue; returns the window's rkey,
    /// usable by the peer once the bind completes (as a [`WcOpcode::Send`]
    /// completion with `wr_id`). A peer's Send with Invalidate of that rkey
    /// invalidates the window — unlike the persistent MRs' rkeys, which
    /// devices refuse to invalidate remotely. Needs [`VerbsConfig::mw_bind`].
    /// Called from the owning core.
    pub fn bind_window(&mut self, conn: ConnId, wr_id: WrId, buf: LocalBuf) -> Result<u32, FabricError> {
        if !self.cfg.mw_bind {
            return Err(FabricError::Unsupported("memory windows without VerbsConfig::mw_bind"));
        }
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let (mr, addr) = self.resolve(&buf)?;
        let c = self.conns.get(ci).ok_or(FabricError::NotConnected(conn))?;
        if c.state != State::Established {
            return Err(FabricError::NotConnected(conn));
        }
        if c.sq.len() >= c.cfg.send_depth as usize {
            return Err(FabricError::QueueFull { what: "send queue" });
        }
        // SAFETY: `self.pd` is a valid PD; returns NULL or a window we own.
        let mw = unsafe { sys::ibv_alloc_mw(self.pd, sys::ibv_mw_type::IBV_MW_TYPE_2) };
        if mw.is_null() {
            return Err(errno("ibv_alloc_mw"));
        }
        self.mws.push(mw);
        // SAFETY: `mw` was just allocated and is valid.
        let old = unsafe { (*mw).rkey };
        let rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        // SAFETY: ibv_send_wr is plain old data (integers, pointers, unions of
        // those); zero is valid and the fields used are set below.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id.0;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_BIND_MW;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
            mw,
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr,
                addr,
                length: buf.len as u64,
                mw_access_flags: sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
                    | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
            },
        };
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: `c.qp` is a live QP (state Established); `wr` and the MR / MW
        // it names are valid for the call; the provider copies the request.
        let rc = unsafe { sys::ibv_post_send(c.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_send(BIND_MW)", rc));
        }
        if let Some(c) = self.conns.get_mut(ci) {
            c.sq.push_back(SqEntry {
                signaled: true,
                opcode: WcOpcode::Send,
            });
        }
        Ok(rkey)
    }

    /// Address and MR of a local buffer, checked against its registration.
    fn resolve(&self, b: &LocalBuf) -> Result<(*mut sys::ibv_mr, u64), FabricError> {
        let m = self
            .mrs
            .get(b.region as usize)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotRegistered { region: b.region })?;
        let end = b.offset.checked_add(b.len as u64);
        if end.is_none() || end > Some(m.len) {
            return Err(FabricError::BadAddress(format!("{b:?} is outside its region")));
        }
        Ok((m.mr, m.base + b.offset))
    }

    fn sge(&self, b: &LocalBuf) -> Result<sys::ibv_sge, FabricError> {
        self.resolve(b)?;
        let m = self.mrs[b.region as usize]
            .as_ref()
            .ok_or(FabricError::NotRegistered { region: b.region })?;
        Ok(sys::ibv_sge {
            addr: m.base + b.offset,
            length: b.len,
            lkey: m.lkey,
        })
    }

    fn check_qp(&self, qp: &QpConfig) -> Result<(usize, Option<usize>), FabricError> {
        let (cq, srq) = qp.check_ids(self.cqs.len(), self.srqs.len())?;
        let max = self.limits.max_qp_wr.min(MAX_QUEUE_DEPTH);
        if qp.send_depth == 0 || qp.send_depth > max {
            return Err(FabricError::Other(format!("send_depth must be in 1..={max}")));
        }
        if srq.is_none() && (qp.recv_depth == 0 || qp.recv_depth > max) {
            return Err(FabricError::Other(format!("recv_depth must be in 1..={max}")));
        }
        Ok((cq, srq))
    }

    /// Create the RC QP of connection slot `ci` on its CM id.
    fn create_qp(&mut self, ci: usize) -> Result<(), FabricError> {
        let Some(c) = self.conns.get(ci) else {
            return Err(FabricError::Other("connection vanished".into()));
        };
        let cq = &self.cqs[c.cq];
        let want_inline = if c.cfg.max_inline > 0 {
            c.cfg.max_inline
        } else {
            self.cfg.max_inline
        };
        let mut attr_out = None;
        for inline in [want_inline, 0] {
            // SAFETY: ibv_qp_init_attr is plain old data; zero is valid.
            let mut attr: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            attr.send_cq = cq.send;
            attr.recv_cq = cq.recv;
            attr.srq = c.srq.map_or(ptr::null_mut(), |s| self.srqs[s].srq);
            attr.cap.max_send_wr = c.cfg.send_depth;
            attr.cap.max_recv_wr = if c.srq.is_some() { 0 } else { c.cfg.recv_depth };
            attr.cap.max_send_sge = (MAX_SGE as u32).min(self.limits.max_sge.max(1));
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = inline;
            attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
            attr.sq_sig_all = 0;
            // SAFETY: `c.id` is a live CM id bound to our device (checked by
            // the caller), `self.pd` our PD, `attr` a valid init structure
            // naming our CQs / SRQ; rdma_create_qp stores the QP in `id->qp`.
            let rc = unsafe { sys::rdma_create_qp(c.id, self.pd, &mut attr) };
            if rc == 0 {
                attr_out = Some(attr);
                break;
            }
            if inline == 0 {
                break;
            }
        }
        let Some(attr) = attr_out else {
            return Err(errno("rdma_create_qp"));
        };
        // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
        let (qp, qp_num) = unsafe {
            let qp = (*c.id).qp;
            (qp, (*qp).qp_num)
        };
        let Some(c) = self.conns.get_mut(ci) else {
            return Err(FabricError::Other("connection vanished".into()));
        };
        c.qp = qp;
        c.qp_num = qp_num;
        c.max_inline = attr.cap.max_inline_data;
        self.by_qp.insert(qp_num, ci);
        Ok(())
    }

    /// Post receives kept while the QP did not exist.
    fn post_early_recvs(&mut self, ci: usize) {
        let Some(c) = self.conns.get_mut(ci) else { return };
        let early = std::mem::take(&mut c.early_recvs);
        let mut failed = Vec::new();
        for wr in early {
            if self.post_recv_raw(ci, &wr).is_err() {
                failed.push(wr);
            }
        }
        // What could not be posted completes as flushed (the connection fails).
        if !failed.is_empty() {
            let id = ConnId(self.conns.id_of(ci));
            if let Some(c) = self.conns.get_mut(ci) {
                c.early_recvs = failed;
            }
            self.fail(ci, CmEvent::Disconnected { conn: id });
        }
    }

    fn post_recv_raw(&mut self, ci: usize, wr: &RecvWr) -> Result<(), FabricError> {
        let mut sge = self.sge(&wr.buf)?;
        let c = self
            .conns
            .get_mut(ci)
            .ok_or(FabricError::Other("connection vanished".into()))?;
        let mut rwr = sys::ibv_recv_wr {
            wr_id: wr.wr_id.0,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: `c.qp` is a live QP of ours; `rwr` and `sge` are valid for
        // the call (the provider copies them).
        let rc = unsafe { sys::ibv_post_recv(c.qp, &mut rwr, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_recv", rc));
        }
        c.rq_out += 1;
        Ok(())
    }

    /// Move a connection to the error state (once): QP to ERR so everything
    /// posted flushes, tell the peer, flush early receives, queue `terminal`
    /// (rewritten to the right kind for the connection's state).
    fn fail(&mut self, ci: usize, terminal: CmEvent) {
        let id = ConnId(self.conns.id_of(ci));
        let Some(c) = self.conns.get_mut(ci) else { return };
        if c.terminal_queued {
            return;
        }
        let was = c.state;
        c.state = State::Error;
        c.terminal_queued = true;
        if !c.qp.is_null() {
            // SAFETY: ibv_qp_attr is plain old data; zero is valid.
            let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
            // SAFETY: `c.qp` is a live QP; only the state is modified.
            unsafe { sys::ibv_modify_qp(c.qp, &mut a, sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int) };
        }
        if matches!(was, State::Established | State::Accepting | State::Connecting) {
            // SAFETY: `c.id` is a live CM id; on one not connected yet this
            // fails harmlessly (the result is not needed).
            unsafe { sys::rdma_disconnect(c.id) };
        }
        let cq = c.cq;
        for wr in c.early_recvs.drain(..) {
            self.cqs[cq].soft.push_back(Completion {
                wr_id: wr.wr_id,
                status: WcStatus::Flushed,
                opcode: WcOpcode::Recv,
                conn: id,
                byte_len: 0,
                invalidated_rkey: None,
            });
        }
        let ev = match (was, terminal) {
            (State::Established, _) => CmEvent::Disconnected { conn: id },
            (_, CmEvent::Rejected { private_data, .. }) => CmEvent::Rejected { conn: id, private_data },
            (State::Connecting, _) => CmEvent::Unreachable { conn: id },
            (_, CmEvent::Disconnected { .. }) => CmEvent::Disconnected { conn: id },
            _ => CmEvent::Unreachable { conn: id },
        };
        self.events.push_back(ev);
    }

    /// Destroy a dead connection's QP and id once its terminal event was
    /// polled and all its work completed.
    fn try_reap(&mut self, ci: usize) {
        let Some(c) = self.conns.get(ci) else { return };
        if !(c.state == State::Error && c.terminal_delivered && c.drained()) {
            return;
        }
        let Some(c) = self.conns.remove(ci) else { return };
        if !c.qp.is_null() {
            self.by_qp.remove(&c.qp_num);
        }
        destroy_conn_id(c.id, !c.qp.is_null());
    }

    /// Read one CM event, if any, and act on it. Returns false when the
    /// channel is empty.
    fn pump_cm(&mut self) -> bool {
        let mut ev: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: `self.channel` is our channel (non-blocking); on success `ev`
        // points to an event owned by librdmacm until rdma_ack_cm_event.
        let rc = unsafe { sys::rdma_get_cm_event(self.channel, &mut ev) };
        if rc != 0 || ev.is_null() {
            return false;
        }
        // SAFETY: `ev` is a valid event (above); its ids are live CM ids; for
        // connection events the private data pointer, when non-NULL, has
        // `private_data_len` bytes valid until the ack. Everything needed is
        // copied before the ack.
        let raw = unsafe {
            let e = &*ev;
            let ctx_id = if e.event == sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST && !e.listen_id.is_null()
            {
                e.listen_id
            } else {
                e.id
            };
            use sys::rdma_cm_event_type as t;
            // Only connection events carry `param.conn` (librdmacm fills it
            // for them); for the others nothing in it is read.
            let has_conn = matches!(
                e.event,
                t::RDMA_CM_EVENT_CONNECT_REQUEST | t::RDMA_CM_EVENT_ESTABLISHED | t::RDMA_CM_EVENT_REJECTED
            );
            let conn = if has_conn {
                e.param.conn
            } else {
                sys::rdma_conn_param {
                    private_data: ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                }
            };
            let pd = if conn.private_data.is_null() || conn.private_data_len == 0 {
                PrivateData::EMPTY
            } else {
                let n = (conn.private_data_len as usize).min(MAX_PRIVATE_DATA);
                PrivateData::new(std::slice::from_raw_parts(conn.private_data as *const u8, n))
            };
            let raw = CmRaw {
                event: e.event,
                status: e.status,
                id: e.id,
                ctx: untag_ctx((*ctx_id).context),
                private_data: pd,
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
            };
            sys::rdma_ack_cm_event(ev);
            raw
        };
        self.on_cm(raw);
        true
    }

    fn on_cm(&mut self, e: CmRaw) {
        use sys::rdma_cm_event_type as t;
        match (e.event, e.ctx.0) {
            (t::RDMA_CM_EVENT_CONNECT_REQUEST, CTX_LISTENER) => {
                let listener = ListenerId(e.ctx.1);
                let req = Request {
                    id: e.id,
                    responder_resources: e.responder_resources,
                    initiator_depth: e.initiator_depth,
                };
                match self.requests.insert(req) {
                    Some(raw) => {
                        // SAFETY: `e.id` is the new, live CM id of this request.
                        unsafe { (*e.id).context = tag_ctx(CTX_REQUEST, raw) };
                        self.events.push_back(CmEvent::ConnectRequest {
                            listener,
                            req: ConnReqId(raw),
                            private_data: e.private_data,
                        });
                    }
                    None => {
                        // Too many waiting: refuse and forget it.
                        // SAFETY: `e.id` is a live CM id with an acked event.
                        unsafe {
                            sys::rdma_reject(e.id, ptr::null(), 0);
                            sys::rdma_destroy_id(e.id);
                        }
                    }
                }
            }
            (_, CTX_CONN) => {
                let Some(ci) = self.conns.index(e.ctx.1) else { return };
                self.on_conn_event(ci, e);
            }
            (t::RDMA_CM_EVENT_DEVICE_REMOVAL, _) => {
                let all: Vec<usize> = self.conns.used().collect();
                for ci in all {
                    let id = ConnId(self.conns.id_of(ci));
                    self.fail(ci, CmEvent::Disconnected { conn: id });
                }
            }
            // Events of pending requests (the requester gave up) and of
            // listeners: the consumer learns on accept, nothing to report.
            _ => {}
        }
    }

    fn on_conn_event(&mut self, ci: usize, e: CmRaw) {
        use sys::rdma_cm_event_type as t;
        let id = ConnId(self.conns.id_of(ci));
        let Some(c) = self.conns.get_mut(ci) else { return };
        if c.terminal_queued {
            // Already dead (e.g. the DISCONNECTED after our own disconnect).
            return;
        }
        match e.event {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => {
                // SAFETY: `c.id` is live; after address resolution `verbs` is
                // the context of the device the address routes through.
                let verbs = unsafe { (*c.id).verbs };
                if verbs != self.ctx {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                    return;
                }
                if self.create_qp(ci).is_err() {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                    return;
                }
                self.post_early_recvs(ci);
                let Some(c) = self.conns.get(ci) else { return };
                if c.terminal_queued {
                    return;
                }
                // SAFETY: `c.id` is live with its address resolved.
                let rc = unsafe { sys::rdma_resolve_route(c.id, self.cfg.resolve_timeout_ms as c_int) };
                if rc != 0 {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                }
            }
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => {
                let pd = c.connect_pd;
                let mut p = sys::rdma_conn_param {
                    private_data: pd.as_bytes().as_ptr() as *const c_void,
                    private_data_len: pd.as_bytes().len() as u8,
                    // Reads the peer may have outstanding against us.
                    responder_resources: self.limits.max_qp_rd_atom,
                    initiator_depth: c.cfg.max_rdma_reads.min(self.limits.max_qp_init_rd_atom),
                    flow_control: 1,
                    retry_count: c.cfg.retry_count.min(7),
                    rnr_retry_count: c.cfg.rnr_retry.min(7),
                    srq: 0,
                    qp_num: 0,
                };
                // SAFETY: `c.id` is live with its route resolved and its QP
                // created; `p` and the private data it points to (a copy on
                // this stack frame) are valid for the call, which copies them.
                let rc = unsafe { sys::rdma_connect(c.id, &mut p) };
                if rc != 0 {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                }
            }
            t::RDMA_CM_EVENT_ESTABLISHED => {
                c.state = State::Established;
                let private_data = if c.active { e.private_data } else { PrivateData::EMPTY };
                self.events.push_back(CmEvent::Established { conn: id, private_data });
            }
            t::RDMA_CM_EVENT_REJECTED if c.active && e.status == IB_CM_REJ_CONSUMER_DEFINED => {
                self.fail(
                    ci,
                    CmEvent::Rejected {
                        conn: id,
                        private_data: e.private_data,
                    },
                );
            }
            t::RDMA_CM_EVENT_ADDR_ERROR
            | t::RDMA_CM_EVENT_ROUTE_ERROR
            | t::RDMA_CM_EVENT_CONNECT_ERROR
            | t::RDMA_CM_EVENT_UNREACHABLE
            | t::RDMA_CM_EVENT_REJECTED => self.fail(ci, CmEvent::Unreachable { conn: id }),
            t::RDMA_CM_EVENT_DISCONNECTED | t::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                self.fail(ci, CmEvent::Disconnected { conn: id })
            }
            _ => {}
        }
    }

    /// Turn one hardware completion into a fabric completion; `None` when it
    /// is the success of an unsignaled send.
    fn translate(&mut self, wc: &sys::ibv_wc, send_side: bool, reap: &mut Vec<usize>) -> Option<Completion> {
        let st = status::wc_status(wc.status);
        let ci = self.by_qp.get(&wc.qp_num).copied();
        let conn = ci.map_or(ConnId(u32::MAX), |i| ConnId(self.conns.id_of(i)));
        let mut opcode = if send_side { WcOpcode::Send } else { WcOpcode::Recv };
        let mut report = true;
        if let Some(i) = ci {
            if let Some(c) = self.conns.get_mut(i) {
                if send_side {
                    if let Some(e) = c.sq.pop_front() {
                        opcode = e.opcode;
                        report = e.signaled || !st.is_success();
                    }
                } else if c.srq.is_none() {
                    c.rq_out = c.rq_out.saturating_sub(1);
                }
                let dead = c.state == State::Error;
                if !st.is_success() && !dead {
                    // Any error (a flush too: the QP went to error on its own)
                    // ends the connection.
                    self.fail(i, CmEvent::Disconnected { conn });
                }
                if self
                    .conns
                    .get(i)
                    .is_some_and(|c| c.state == State::Error && c.terminal_delivered)
                {
                    reap.push(i);
                }
            }
        }
        if st.is_success() {
            if let Some(o) = status::wc_opcode(wc.opcode) {
                opcode = o;
            }
        }
        let with_inv = !send_side && wc.wc_flags & self.inv_flags != 0;
        // SAFETY: both members of the union are u32 (any bit pattern is
        // valid); it holds the invalidated rkey when WITH_INV is set.
        let inv_rkey = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
        report.then_some(Completion {
            wr_id: WrId(wc.wr_id),
            status: st,
            opcode,
            conn,
            byte_len: wc.byte_len,
            invalidated_rkey: (st.is_success() && with_inv).then_some(inv_rkey),
        })
    }

    /// Poll one hardware CQ into `out`; returns how many were written.
    fn poll_hw(&mut self, qi: usize, send_side: bool, out: &mut [Completion], reap: &mut Vec<usize>) -> usize {
        let mut n = 0;
        while n < out.len() {
            let want = (out.len() - n).min(WC_BATCH);
            let cq = if send_side {
                self.cqs[qi].send
            } else {
                self.cqs[qi].recv
            };
            // SAFETY: `cq` is a live CQ of ours; `self.wcs` has room for
            // WC_BATCH >= `want` entries.
            let got = unsafe { sys::ibv_poll_cq(cq, want as c_int, self.wcs.as_mut_ptr()) };
            if got <= 0 {
                break;
            }
            for k in 0..got as usize {
                let wc = self.wcs[k];
                if let Some(c) = self.translate(&wc, send_side, reap) {
                    out[n] = c;
                    n += 1;
                }
            }
            if (got as usize) < want {
                break;
            }
        }
        n
    }
}

fn post_err(op: &'static str, rc: c_int) -> FabricError {
    if rc == libc::ENOMEM {
        FabricError::QueueFull { what: "work queue" }
    } else {
        rc_err(op, rc)
    }
}

/// Destroy a connection's QP (when it has one) and its CM id.
fn destroy_conn_id(id: *mut sys::rdma_cm_id, has_qp: bool) {
    // SAFETY: `id` is a live CM id owned by the caller, which forgets it; its
    // QP (if any) was created with rdma_create_qp on it; every event of it was
    // acknowledged (pump_cm acks at once), so rdma_destroy_id does not wait.
    unsafe {
        if has_qp {
            sys::rdma_destroy_qp(id);
        }
        sys::rdma_destroy_id(id);
    }
}

impl Drop for VerbsFabric {
    fn drop(&mut self) {
        // SAFETY: every pointer below was created by this fabric, is destroyed
        // exactly once, and dependents go first (QPs and ids before SRQs and
        // CQs, windows before MRs, MRs before the PD, ids before the channel).
        unsafe {
            for i in self.conns.used().collect::<Vec<_>>() {
                if let Some(c) = self.conns.remove(i) {
                    destroy_conn_id(c.id, !c.qp.is_null());
                }
            }
            for i in self.requests.used().collect::<Vec<_>>() {
                if let Some(r) = self.requests.remove(i) {
                    sys::rdma_reject(r.id, ptr::null(), 0);
                    sys::rdma_destroy_id(r.id);
                }
            }
            for l in self.listeners.drain(..) {
                sys::rdma_destroy_id(l.id);
            }
            for s in self.srqs.drain(..) {
                sys::ibv_destroy_srq(s.srq);
            }
            for q in self.cqs.drain(..) {
                sys::ibv_destroy_cq(q.send);
                sys::ibv_destroy_cq(q.recv);
            }
            for mw in self.mws.drain(..) {
                sys::ibv_dealloc_mw(mw);
            }
            for m in self.mrs.drain(..).flatten() {
                sys::ibv_dereg_mr(m.mr);
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            if !self.channel.is_null() {
                sys::rdma_destroy_event_channel(self.channel);
            }
            if !self.dev_list.is_null() {
                sys::rdma_free_devices(self.dev_list);
            }
        }
    }
}

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

    /// `ibv_reg_mr` over the whole region (local write, remote read and
    /// write). Once per region id.
    fn register_region(&mut self, region: &Arc<mempool::region::Region>) -> Result<MrKeys, FabricError> {
        let id = region.id() as usize;
        if self.mrs.get(id).is_some_and(Option::is_some) {
            return Err(FabricError::Other(format!("region {id} is already registered")));
        }
        use sys::ibv_access_flags as a;
        let mut access = a::IBV_ACCESS_LOCAL_WRITE.0 | a::IBV_ACCESS_REMOTE_READ.0 | a::IBV_ACCESS_REMOTE_WRITE.0;
        if self.cfg.mw_bind {
            access |= a::IBV_ACCESS_MW_BIND.0;
        }
        // SAFETY: `self.pd` is our PD; the region's memory is mapped for
        // `len` bytes and stays mapped while we hold the Arc (kept in `Mr`).
        let mr = unsafe { sys::ibv_reg_mr(self.pd, region.as_ptr() as *mut c_void, region.len(), access as c_int) };
        if mr.is_null() {
            return Err(errno("ibv_reg_mr"));
        }
        // SAFETY: `mr` is the MR just registered.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        if self.mrs.len() <= id {
            self.mrs.resize_with(id + 1, || None);
        }
        self.mrs[id] = Some(Mr {
            mr,
            base: region.as_ptr() as u64,
            len: region.len() as u64,
            lkey,
            _region: Arc::clone(region),
        });
        Ok(MrKeys { lkey, rkey })
    }

    /// The virtual address `base + offset` (after checking `offset` is within
    /// the region).
    fn remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError> {
        let m = self
            .mrs
            .get(region as usize)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotRegistered { region })?;
        if offset > m.len {
            return Err(FabricError::BadAddress(format!(
                "offset {offset} beyond region {region}"
            )));
        }
        Ok(m.base + offset)
    }

    /// Two hardware CQs (sends, receives) of `depth` entries each.
    fn create_cq(&mut self, depth: u32) -> Result<CqId, FabricError> {
        let max = self.limits.max_cqe.min(MAX_QUEUE_DEPTH);
        if depth == 0 || depth > max {
            return Err(FabricError::Other(format!("CQ depth must be in 1..={max}")));
        }
        // SAFETY: `self.ctx` is open; no completion channel, vector 0.
        let send = unsafe { sys::ibv_create_cq(self.ctx, depth as c_int, ptr::null_mut(), ptr::null_mut(), 0) };
        if send.is_null() {
            return Err(errno("ibv_create_cq"));
        }
        // SAFETY: as above.
        let recv = unsafe { sys::ibv_create_cq(self.ctx, depth as c_int, ptr::null_mut(), ptr::null_mut(), 0) };
        if recv.is_null() {
            let e = errno("ibv_create_cq");
            // SAFETY: `send` was just created and has no QP.
            unsafe { sys::ibv_destroy_cq(send) };
            return Err(e);
        }
        self.cqs.push(Cq {
            send,
            recv,
            soft: VecDeque::new(),
            turn: false,
        });
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    fn create_srq(&mut self, depth: u32) -> Result<SrqId, FabricError> {
        let max = self.limits.max_srq_wr.min(MAX_QUEUE_DEPTH);
        if depth == 0 || depth > max {
            return Err(FabricError::Other(format!("SRQ depth must be in 1..={max}")));
        }
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr: depth,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: `self.pd` is our PD; `attr` is a valid init structure.
        let srq = unsafe { sys::ibv_create_srq(self.pd, &mut attr) };
        if srq.is_null() {
            return Err(errno("ibv_create_srq"));
        }
        self.srqs.push(Srq { srq });
        Ok(SrqId(self.srqs.len() as u32 - 1))
    }

    /// `addr`: "IP:PORT" (see [`addr::parse`]); "0.0.0.0:PORT" listens on
    /// every device, but only requests arriving through this fabric's device
    /// can be accepted.
    fn listen(&mut self, addr: &str) -> Result<ListenerId, FabricError> {
        let sa = addr::parse(addr).ok_or_else(|| FabricError::BadAddress(addr.to_string()))?;
        let mut s = addr::SockAddr::new(sa);
        let lid = self.listeners.len() as u32;
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: `self.channel` is ours; `id` is an out pointer.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel,
                &mut id,
                tag_ctx(CTX_LISTENER, lid),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(errno("rdma_create_id"));
        }
        // SAFETY: `id` is the live id just created; `s` a valid sockaddr.
        let res = unsafe {
            if sys::rdma_bind_addr(id, s.as_mut_ptr()) != 0 {
                Err(errno("rdma_bind_addr"))
            } else if !(*id).verbs.is_null() && (*id).verbs != self.ctx {
                Err(FabricError::BadAddress(format!(
                    "{addr} is not on device {}",
                    self.dev_name
                )))
            } else if sys::rdma_listen(id, self.cfg.listen_backlog.min(i32::MAX as u32) as c_int) != 0 {
                Err(errno("rdma_listen"))
            } else {
                Ok(())
            }
        };
        if let Err(e) = res {
            // SAFETY: `id` is live and has no QP and no unacked event.
            unsafe { sys::rdma_destroy_id(id) };
            return Err(e);
        }
        self.listeners.push(Listener { id });
        Ok(ListenerId(lid))
    }

    /// Starts address resolution; route resolution and `rdma_connect` follow
    /// from [`Fabric::poll_cm`]. Receives may be posted at once (they are
    /// posted to the QP when it is created).
    fn connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        let sa = addr::parse(addr).ok_or_else(|| FabricError::BadAddress(addr.to_string()))?;
        let (cq, srq) = self.check_qp(qp)?;
        let conn = Conn {
            id: ptr::null_mut(),
            qp: ptr::null_mut(),
            qp_num: 0,
            cq,
            srq,
            cfg: *qp,
            max_inline: 0,
            state: State::Connecting,
            active: true,
            connect_pd: PrivateData::new(private_data),
            early_recvs: Vec::new(),
            sq: VecDeque::with_capacity(qp.send_depth as usize),
            rq_out: 0,
            terminal_queued: false,
            terminal_delivered: false,
        };
        let raw = self
            .conns
            .insert(conn)
            .ok_or(FabricError::QueueFull { what: "connections" })?;
        let ci = (raw & 0xffff) as usize;
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: `self.channel` is ours; `id` is an out pointer.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel,
                &mut id,
                tag_ctx(CTX_CONN, raw),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            let e = errno("rdma_create_id");
            self.conns.remove(ci);
            return Err(e);
        }
        if let Some(c) = self.conns.get_mut(ci) {
            c.id = id;
        }
        let mut s = addr::SockAddr::new(sa);
        // SAFETY: `id` is live; `s` a valid sockaddr; no source address.
        let rc = unsafe {
            sys::rdma_resolve_addr(
                id,
                ptr::null_mut(),
                s.as_mut_ptr(),
                self.cfg.resolve_timeout_ms as c_int,
            )
        };
        if rc != 0 {
            self.fail(ci, CmEvent::Unreachable { conn: ConnId(raw) });
        }
        Ok(ConnId(raw))
    }

    /// Creates the QP on the request's id and answers with `rdma_accept`.
    /// On failure the request is rejected and forgotten.
    fn accept(&mut self, req: ConnReqId, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        let ri = self.requests.index(req.0).ok_or(FabricError::UnknownId {
            what: "connection request",
            id: req.0,
        })?;
        let (cq, srq) = self.check_qp(qp)?;
        let r = self.requests.remove(ri).ok_or(FabricError::UnknownId {
            what: "connection request",
            id: req.0,
        })?;
        let refuse = |id: *mut sys::rdma_cm_id| {
            // SAFETY: `id` is the request's live id, owned here; no QP.
            unsafe {
                sys::rdma_reject(id, ptr::null(), 0);
                sys::rdma_destroy_id(id);
            }
        };
        // SAFETY: `r.id` is live; `verbs` is the device the request came in on.
        if unsafe { (*r.id).verbs } != self.ctx {
            refuse(r.id);
            return Err(FabricError::Other(format!(
                "connection request arrived on another device than {}",
                self.dev_name
            )));
        }
        let conn = Conn {
            id: r.id,
            qp: ptr::null_mut(),
            qp_num: 0,
            cq,
            srq,
            cfg: *qp,
            max_inline: 0,
            state: State::Accepting,
            active: false,
            connect_pd: PrivateData::EMPTY,
            early_recvs: Vec::new(),
            sq: VecDeque::with_capacity(qp.send_depth as usize),
            rq_out: 0,
            terminal_queued: false,
            terminal_delivered: false,
        };
        let Some(raw) = self.conns.insert(conn) else {
            refuse(r.id);
            return Err(FabricError::QueueFull { what: "connections" });
        };
        let ci = (raw & 0xffff) as usize;
        // SAFETY: `r.id` is live; from now on its events belong to the conn.
        unsafe { (*r.id).context = tag_ctx(CTX_CONN, raw) };
        if let Err(e) = self.create_qp(ci) {
            self.conns.remove(ci);
            refuse(r.id);
            return Err(e);
        }
        let pd = PrivateData::new(private_data);
        let mut p = sys::rdma_conn_param {
            private_data: pd.as_bytes().as_ptr() as *const c_void,
            private_data_len: pd.as_bytes().len() as u8,
            responder_resources: r.responder_resources.min(self.limits.max_qp_rd_atom),
            initiator_depth: qp
                .max_rdma_reads
                .min(r.initiator_depth)
                .min(self.limits.max_qp_init_rd_atom),
            flow_control: 1,
            retry_count: qp.retry_count.min(7),
            rnr_retry_count: qp.rnr_retry.min(7),
            srq: srq.is_some() as u8,
            qp_num: 0,
        };
        // SAFETY: `r.id` is live with its QP created; `p` and the private
        // data (on this stack frame) are valid for the call, which copies them.
        let rc = unsafe { sys::rdma_accept(r.id, &mut p) };
        if rc != 0 {
            let e = errno("rdma_accept");
            if let Some(c) = self.conns.remove(ci) {
                self.by_qp.remove(&c.qp_num);
                // SAFETY: the QP was created on this id; nothing is posted yet.
                unsafe {
                    sys::rdma_reject(c.id, ptr::null(), 0);
                }
                destroy_conn_id(c.id, true);
            }
            return Err(e);
        }
        Ok(ConnId(raw))
    }

    fn reject(&mut self, req: ConnReqId, private_data: &[u8]) -> Result<(), FabricError> {
        let ri = self.requests.index(req.0).ok_or(FabricError::UnknownId {
            what: "connection request",
            id: req.0,
        })?;
        let Some(r) = self.requests.remove(ri) else {
            return Ok(());
        };
        let pd = PrivateData::new(private_data);
        // SAFETY: `r.id` is the live request id, owned here; the private data
        // is valid for the call (copied by librdmacm).
        let rc = unsafe {
            let rc = sys::rdma_reject(r.id, pd.as_bytes().as_ptr() as *const c_void, pd.as_bytes().len() as u8);
            let e = (rc != 0).then(|| errno("rdma_reject"));
            sys::rdma_destroy_id(r.id);
            e
        };
        rc.map_or(Ok(()), Err)
    }

    /// Moves the QP to the error state (outstanding work requests complete
    /// Flushed in later `poll_cq` calls), sends a DREQ and queues
    /// `Disconnected` at once. Idempotent: a connection already in error, or
    /// already reaped, is `Ok`.
    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        if (conn.0 & 0xffff) as usize >= self.conns.capacity() {
            return Err(FabricError::UnknownId {
                what: "connection",
                id: conn.0,
            });
        }
        if let Some(ci) = self.conns.index(conn.0) {
            self.fail(ci, CmEvent::Disconnected { conn });
        }
        Ok(())
    }

    fn peer_addr(&self, conn: ConnId) -> Option<std::net::IpAddr> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        if c.id.is_null() {
            return None;
        }
        // SAFETY: `c.id` is the connection's live cm_id (destroyed only when
        // the connection leaves the table); the route's destination address
        // is a sockaddr of the family it says, which `peer_sockaddr` checks.
        unsafe { addr::peer_ip(&*c.id) }
    }

    fn poll_cm(&mut self) -> Option<CmEvent> {
        while self.events.is_empty() {
            if !self.pump_cm() {
                return None;
            }
        }
        let ev = self.events.pop_front()?;
        if let CmEvent::Disconnected { conn } | CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn } = ev {
            if let Some(ci) = self.conns.index(conn.0) {
                if let Some(c) = self.conns.get_mut(ci) {
                    c.terminal_delivered = true;
                }
                self.try_reap(ci);
            }
        }
        Some(ev)
    }

    fn post_send(&mut self, conn: ConnId, wr: &SendWr) -> Result<(), FabricError> {
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        if wr.num_sge as usize > MAX_SGE {
            return Err(FabricError::Other(format!("num_sge {} > {MAX_SGE}", wr.num_sge)));
        }
        let mut sges = [sys::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE];
        let mut n = 0;
        let mut total: u64 = 0;
        for b in wr.sges() {
            let s = self.sge(b)?;
            // A zero-length SGE means 2^31 bytes on some devices: leave it out.
            if s.length > 0 {
                sges[n] = s;
                n += 1;
                total += s.length as u64;
            }
        }
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        // After rdma_accept the QP is ready to send: the first Call may arrive
        // (and be answered) before the passive side sees ESTABLISHED.
        if !matches!(c.state, State::Established | State::Accepting) {
            return Err(FabricError::NotConnected(conn));
        }
        if c.sq.len() >= c.cfg.send_depth as usize {
            return Err(FabricError::QueueFull { what: "send queue" });
        }
        use sys::ibv_wr_opcode as o;
        let (opcode, wc_op) = match wr.op {
            SendOp::Send => (o::IBV_WR_SEND, WcOpcode::Send),
            SendOp::SendWithInv { .. } => (o::IBV_WR_SEND_WITH_INV, WcOpcode::Send),
            SendOp::RdmaWrite => (o::IBV_WR_RDMA_WRITE, WcOpcode::RdmaWrite),
            SendOp::RdmaRead => (o::IBV_WR_RDMA_READ, WcOpcode::RdmaRead),
        };
        // SAFETY: ibv_send_wr is plain old data; zero is valid and every field
        // the opcode uses is set below.
        let mut w: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id.0;
        w.sg_list = sges.as_mut_ptr();
        w.num_sge = n as c_int;
        w.opcode = opcode;
        let mut flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        let is_send = matches!(wr.op, SendOp::Send | SendOp::SendWithInv { .. });
        if is_send && total > 0 && total <= c.max_inline as u64 {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        w.send_flags = flags;
        match wr.op {
            SendOp::SendWithInv { rkey } => w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey,
            SendOp::RdmaWrite | SendOp::RdmaRead => {
                w.wr.rdma = sys::rdma_t {
                    remote_addr: wr.remote.offset,
                    rkey: wr.remote.handle,
                }
            }
            SendOp::Send => {}
        }
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: `c.qp` is a live QP (Established); `w` and `sges` are valid
        // for the call (the provider copies them, and inline data).
        let rc = unsafe { sys::ibv_post_send(c.qp, &mut w, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_send", rc));
        }
        c.sq.push_back(SqEntry {
            signaled: wr.signaled,
            opcode: wc_op,
        });
        Ok(())
    }

    /// Receives may be posted from `connect`/`accept` on (before
    /// `Established`); on a connection in error they are refused.
    fn post_recv(&mut self, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError> {
        self.resolve(&wr.buf)?;
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        if c.srq.is_some() {
            return Err(FabricError::Other("this connection receives from an SRQ".into()));
        }
        if c.state == State::Error {
            return Err(FabricError::NotConnected(conn));
        }
        if c.rq_out as usize + c.early_recvs.len() >= c.cfg.recv_depth as usize {
            return Err(FabricError::QueueFull { what: "receive queue" });
        }
        if c.qp.is_null() {
            c.early_recvs.push(*wr);
            return Ok(());
        }
        self.post_recv_raw(ci, wr)
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError> {
        let s = self
            .srqs
            .get(srq.0 as usize)
            .ok_or(FabricError::UnknownId { what: "srq", id: srq.0 })?
            .srq;
        let mut sge = self.sge(&wr.buf)?;
        let mut rwr = sys::ibv_recv_wr {
            wr_id: wr.wr_id.0,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: `s` is a live SRQ of ours; `rwr` and `sge` are valid for the
        // call (copied by the provider).
        let rc = unsafe { sys::ibv_post_srq_recv(s, &mut rwr, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_srq_recv", rc));
        }
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut [Completion]) -> usize {
        let qi = cq.0 as usize;
        if qi >= self.cqs.len() || out.is_empty() {
            return 0;
        }
        let mut n = 0;
        while n < out.len() {
            let Some(c) = self.cqs[qi].soft.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        let mut reap = Vec::new();
        let recv_first = self.cqs[qi].turn;
        self.cqs[qi].turn = !recv_first;
        for send_side in [!recv_first, recv_first] {
            if n < out.len() {
                n += self.poll_hw(qi, send_side, &mut out[n..], &mut reap);
            }
        }
        for ci in reap {
            self.try_reap(ci);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_tags_round_trip() {
        for (k, v) in [
            (CTX_CONN, 0u32),
            (CTX_LISTENER, 7),
            (CTX_REQUEST, u32::MAX),
            (CTX_CONN, 0x0003_0001),
        ] {
            assert_eq!(untag_ctx(tag_ctx(k, v)), (k, v));
        }
        // A NULL context (an id we did not tag) is no kind of ours.
        let (k, _) = untag_ctx(ptr::null_mut());
        assert!(![CTX_CONN, CTX_LISTENER, CTX_REQUEST].contains(&k));
    }

    #[test]
    fn invalidation_flag_quirk_is_limited_to_rxe() {
        let inv = sys::ibv_wc_flags::IBV_WC_WITH_INV.0;
        assert_eq!(inv, 1 << 3);
        assert_eq!(invalidate_flags(0x02c9), inv, "Mellanox: the documented flag only");
        assert_eq!(invalidate_flags(RXE_VENDOR_ID), inv | 4, "rxe: the kernel's bit too");
        // What rxe was seen to report for a Send with Invalidate: GRH | bit 2.
        assert_ne!(0x5 & invalidate_flags(RXE_VENDOR_ID), 0);
        assert_eq!(0x5 & invalidate_flags(0x02c9), 0);
    }

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

    /// This runs wherever the tests run: on a host without RDMA (CI, this
    /// machine) creation must fail with the documented message, not panic; on
    /// a host with a device it must succeed and name it.
    #[test]
    fn creation_reports_no_device_or_names_one() {
        match VerbsFabric::new(VerbsConfig::default()) {
            Err(FabricError::Other(m)) => assert_eq!(m, NO_DEVICE),
            Err(e) => panic!("unexpected error: {e}"),
            Ok(f) => assert!(!f.device_name().is_empty()),
        }
    }

    #[test]
    fn unknown_device_is_an_error() {
        let cfg = VerbsConfig {
            device: Some("no-such-device-0".into()),
            ..VerbsConfig::default()
        };
        match VerbsFabric::new(cfg) {
            Err(FabricError::Other(m)) => assert!(m == NO_DEVICE || m.contains("no-such-device-0"), "{m}"),
            Err(e) => panic!("unexpected error: {e}"),
            Ok(_) => panic!("a device that does not exist was opened"),
        }
    }

    #[test]
    fn bad_config_is_refused_before_touching_rdma_core() {
        let cfg = VerbsConfig {
            max_conns: 0,
            ..VerbsConfig::default()
        };
        assert!(matches!(VerbsFabric::new(cfg), Err(FabricError::Other(m)) if m.contains("max_conns")));
    }
}
