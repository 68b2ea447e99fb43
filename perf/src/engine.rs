//! Pools, connections and the load loop over [`dataplane::requester`].
//!
//! - [`Pools`]: one pool for every requester of a run, one per-core cache
//!   slot per requester (each connection is a requester with its own fabric
//!   instance, as two processes would have).
//! - [`connect`]: a requester connected and negotiated.
//! - [`Session`]: one Call at a time (setup: LOOKUP, CREATE, prefill; the
//!   read-back check after a write run).
//! - [`run_worker`]: the closed- or open-loop load of one worker thread over
//!   its connections, recording latency into a [`Recorder`].
//!
//! Everything here runs on the thread that created it: a requester and its
//! fabric belong to one thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dataplane::requester::{
    CallId, CallOutcome, LinkState, ReplyView, Requester, RequesterConfig, SubmitBlock, SubmitError,
};
use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::Fabric;
use mempool::pool::{ClassId, Mempool, PoolPlan};
use mempool::region::RegionConfig;
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::nfs3::{NFSPROC3_NULL, NFSPROC3_READ, NFSPROC3_WRITE, NFS_PROGRAM, NFS_V3};
use proto::plan::ReplyNeeds;
use proto::ulb::{DdpItem, Nfs3Binding, UpperLayerBinding};
use proto::EncodeError;

use crate::nfs::{self, Cred, ReplyError};
use crate::nfs4;
use crate::schedule::{Offsets, OpenLoop};
use crate::stats::{new_hist, record, LatencyHist};
use crate::{pattern, PerfError};

/// Receive and send buffer size (the inline thresholds this requester offers
/// in its RFC 8797 private data / CONNPROP).
pub const INLINE_BYTES: usize = 4096;
/// Room for RPC and NFS headers around the data in a data buffer.
pub const HEADER_ROOM_BYTES: usize = 8192;
/// Chunk size used to fill a file before reads (at least the I/O size).
pub const FILL_CHUNK_BYTES: u32 = 64 * 1024;
/// Calls a [`Session`] may have outstanding.
pub const SESSION_DEPTH: u32 = 4;
/// Polls given to a requester's shutdown.
const SHUTDOWN_POLLS: usize = 200_000;

/// Makes one fabric instance per connection.
pub trait FabricMaker: Sync {
    type F: Fabric + Send;
    fn make(&self) -> Result<Self::F, PerfError>;
    /// Provider name for the result (`shm`, `verbs`).
    fn name(&self) -> &'static str;
}

/// The shared-memory provider.
#[derive(Debug, Clone, Default)]
pub struct ShmMaker(pub ShmConfig);

impl FabricMaker for ShmMaker {
    type F = ShmFabric;
    fn make(&self) -> Result<ShmFabric, PerfError> {
        Ok(ShmFabric::new(self.0.clone())?)
    }
    fn name(&self) -> &'static str {
        "shm"
    }
}

/// The rdma-core provider.
#[cfg(feature = "verbs")]
#[derive(Debug, Clone, Default)]
pub struct VerbsMaker(pub dataplane::verbs::VerbsConfig);

#[cfg(feature = "verbs")]
impl FabricMaker for VerbsMaker {
    type F = dataplane::verbs::VerbsFabric;
    fn make(&self) -> Result<Self::F, PerfError> {
        Ok(dataplane::verbs::VerbsFabric::new(self.0.clone())?)
    }
    fn name(&self) -> &'static str {
        "verbs"
    }
}

/// The buffer pool of a run.
#[derive(Debug)]
pub struct Pools {
    pub pool: Mempool,
    pub recv: ClassId,
    pub send: ClassId,
    pub data: ClassId,
    /// Bytes of one data buffer.
    pub data_bytes: usize,
}

impl Pools {
    /// A pool for requesters with the given queue depths (one cache slot
    /// each, in order), data buffers of `data_bytes`. Start-up; any thread.
    pub fn new(depths: &[u32], data_bytes: usize) -> Result<Pools, PerfError> {
        let mut plan = PoolPlan::new(depths.len().max(1));
        let recv = plan.add_class("perf-recv", INLINE_BYTES, 8)?;
        let send = plan.add_class("perf-send", INLINE_BYTES, 8)?;
        let data = plan.add_class("perf-data", data_bytes, 4)?;
        let (mut r, mut s, mut d) = (0u64, 0u64, 0u64);
        for &qd in depths {
            let c = qd as u64 + 2;
            // Receives posted plus those held by finished calls; a header per
            // call; call buffer plus a Write or Reply chunk per call.
            r += 2 * c;
            s += c + 1;
            d += 3 * c;
        }
        plan.reserve("perf-requester-recv", recv, r)
            .reserve("perf-requester-send", send, s)
            .reserve("perf-requester-data", data, d);
        let cfg = RegionConfig {
            lock: false,
            ..RegionConfig::default()
        };
        let pool = Mempool::new(&plan, &cfg)?;
        Ok(Pools {
            pool,
            recv,
            send,
            data,
            data_bytes,
        })
    }

    /// Data buffer size for I/O of `io_size` bytes.
    pub fn data_bytes_for(io_size: u32) -> usize {
        (io_size.max(FILL_CHUNK_BYTES) as usize + HEADER_ROOM_BYTES).next_multiple_of(4096)
    }

    /// A requester configuration on these pools.
    pub fn requester_cfg(&self, vers: u32, qd: u32, ddp: bool) -> Result<RequesterConfig, PerfError> {
        let versions = VersionRange::only(vers).map_err(|e| PerfError::Option(format!("version {vers}: {e}")))?;
        Ok(RequesterConfig {
            versions,
            credits: qd,
            send_depth: 2 * qd + 8,
            limits: Limits::DEFAULT,
            recv_class: self.recv,
            send_class: self.send,
            data_class: self.data,
            ddp,
            pad_read_chunks: false,
            backward_credits: 0,
        })
    }
}

/// A monotonic clock in nanoseconds from a shared base.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: Instant,
}

impl Clock {
    pub fn new(base: Instant) -> Self {
        Clock { base }
    }
    /// A clock whose base is now, on the same cheap clock as [`Clock::now_ns`].
    pub fn start() -> Self {
        Clock::new(reactor::clock::now())
    }
    /// Nanoseconds since the base, from the reactor's cheap clock
    /// (`reactor::clock::now`): where the OS clock has no vDSO read (the
    /// `hpet` of the emulated guests in `tests/kernel/`) an `Instant::now()`
    /// is a system call reading an emulated device, and a worker waiting for
    /// its reply reads the clock on every poll turn (about 20 per Call at
    /// queue depth 1 there), taking time from the fabric and the server it
    /// measures. Any thread.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        reactor::clock::now().saturating_duration_since(self.base).as_nanos() as u64
    }
    /// The instant `ns` after the base.
    pub fn at(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }
}

/// A requester connected to `addr` and negotiated at version `vers`, using
/// cache slot `slot` of `pools`. Polls until ready or `timeout`.
#[allow(clippy::too_many_arguments)]
pub fn connect<'p, M: FabricMaker>(
    maker: &M,
    pools: &'p Pools,
    slot: usize,
    addr: &str,
    vers: u32,
    qd: u32,
    ddp: bool,
    timeout: Duration,
) -> Result<Requester<'p, M::F>, PerfError> {
    connect_with(maker, pools, slot, addr, vers, qd, ddp, timeout, 0)
}

/// [`connect`] offering `backward_credits` for backward-direction Calls
/// (RFC 8167; an NFSv4.1 backchannel, [`crate::deleg`]).
#[allow(clippy::too_many_arguments)]
pub fn connect_with<'p, M: FabricMaker>(
    maker: &M,
    pools: &'p Pools,
    slot: usize,
    addr: &str,
    vers: u32,
    qd: u32,
    ddp: bool,
    timeout: Duration,
    backward_credits: u32,
) -> Result<Requester<'p, M::F>, PerfError> {
    let mut cfg = pools.requester_cfg(vers, qd, ddp)?;
    cfg.backward_credits = backward_credits;
    let fabric = maker.make()?;
    let mut req = Requester::new(cfg, fabric, &pools.pool, pools.pool.regions(), slot)?;
    req.connect(addr)?;
    let t0 = Instant::now();
    loop {
        req.poll();
        match req.link() {
            LinkState::Ready => break,
            LinkState::Failed => {
                req.shutdown(SHUTDOWN_POLLS);
                return Err(PerfError::Connect(format!(
                    "{} connection to {addr} failed (refused, unreachable, or version {vers} not offered)",
                    maker.name()
                )));
            }
            _ if t0.elapsed() > timeout => {
                let state = req.link();
                req.shutdown(SHUTDOWN_POLLS);
                return Err(PerfError::Connect(format!(
                    "{addr}: no connection after {timeout:?} (state {state:?})"
                )));
            }
            _ => {}
        }
    }
    if req.version() != vers {
        let got = req.version();
        req.shutdown(SHUTDOWN_POLLS);
        return Err(PerfError::Connect(format!(
            "{addr}: negotiated version {got}, wanted {vers}"
        )));
    }
    Ok(req)
}

/// What the load does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Procedure 0 of `prog`/`vers`.
    Null {
        prog: u32,
        vers: u32,
    },
    Read,
    Write,
    /// Reads with probability `read_pct` percent, otherwise writes.
    Mixed {
        read_pct: u32,
    },
}

impl OpKind {
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Null { .. } => "null",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Mixed { .. } => "mixed",
        }
    }
    pub fn reads(&self) -> bool {
        matches!(self, OpKind::Read | OpKind::Mixed { .. })
    }
    pub fn writes(&self) -> bool {
        matches!(self, OpKind::Write | OpKind::Mixed { .. })
    }
}

/// The file the NFS load works on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfsFile {
    pub fh: Vec<u8>,
    /// Bytes of the file the load uses (offsets are below it).
    pub size: u64,
}

/// Everything a worker needs to build and check Calls. Shared read-only.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: OpKind,
    pub cred: Cred,
    pub io_size: u32,
    pub file: Option<NfsFile>,
    pub seq: bool,
    pub verify: bool,
    pub salt: u64,
    /// `stable_how` of WRITEs.
    pub stable: u32,
    /// After this many bytes written on a connection, its next Call is a
    /// COMMIT of the file (0: never).
    pub commit_every: u64,
    pub binding: Nfs3Binding,
    /// NFSv4.1 instead of NFSv3 (`--nfs 4.1`).
    pub v4: Option<V4Load>,
}

/// The NFSv4.1 sessions of a load: one per connection (by the connection's
/// index in the run), each with `slots` slots, and the open stateid of the
/// file.
#[derive(Clone, Debug)]
pub struct V4Load {
    pub sessions: Vec<[u8; proto::nfs4::NFS4_SESSIONID_SIZE]>,
    pub slots: Vec<u32>,
    pub stateid: proto::nfs4::Stateid,
}

/// A connection's NFSv4.1 session: sequence ids per slot and the free
/// slots.
#[derive(Debug)]
pub(crate) struct V4Conn {
    session: [u8; proto::nfs4::NFS4_SESSIONID_SIZE],
    seq: Vec<u32>,
    pub(crate) free: Vec<u32>,
}

/// The kind and offset of a connection's next Call (`commit_due`: a
/// COMMIT goes first).
pub(crate) fn next_call(wl: &Workload, offsets: &mut Offsets, commit_due: bool) -> (u8, u64) {
    match wl.kind {
        _ if commit_due => (K_COMMIT, 0),
        OpKind::Null { .. } => (K_NULL, 0),
        OpKind::Read => (K_READ, offsets.next_offset()),
        OpKind::Write => (K_WRITE, offsets.next_offset()),
        OpKind::Mixed { read_pct } => {
            let k = if offsets.coin(read_pct) { K_READ } else { K_WRITE };
            (k, offsets.next_offset())
        }
    }
}

/// The NFSv4.1 session slot of a connection's next Call: `Some(None)`
/// without a session (NFSv3), `None` while every slot is in use.
pub(crate) fn next_slot(v4: &mut Option<V4Conn>) -> Option<Option<nfs4::Slot>> {
    match v4 {
        Some(v) => v.take().map(Some),
        None => Some(None),
    }
}

impl V4Conn {
    /// The session of load connection `c` (its index in the run).
    pub(crate) fn of(v: &V4Load, c: u32) -> V4Conn {
        let i = c as usize;
        let n = v.slots.get(i).copied().unwrap_or(1).max(1);
        V4Conn {
            session: v.sessions.get(i).copied().unwrap_or_default(),
            seq: vec![0; n as usize],
            free: (0..n).rev().collect(),
        }
    }

    /// The next slot to send on, with its next sequence id.
    pub(crate) fn take(&mut self) -> Option<nfs4::Slot> {
        let slot = self.free.pop()?;
        self.seq[slot as usize] = self.seq[slot as usize].wrapping_add(1);
        Some(nfs4::Slot {
            session: self.session,
            slot,
            seq: self.seq[slot as usize],
            highest: self.seq.len() as u32 - 1,
        })
    }
}

impl Workload {
    /// Reply needs of NFSv3 procedure `proc_`; NULL of another program gets
    /// room for a reply header and nothing else.
    fn needs(&self, proc_: u32) -> ReplyNeeds {
        if self.v4.is_some() {
            // COMPOUND replies: READ data in a Write chunk; the rest inline.
            let small = nfs4::LOAD_REPLY_MAX_BYTES;
            return match proc_ {
                NFSPROC3_READ => ReplyNeeds::new(&[self.io_size], small),
                _ => ReplyNeeds::new(&[], small),
            }
            .unwrap_or_default();
        }
        match self.kind {
            OpKind::Null { prog, vers } if proc_ == NFSPROC3_NULL && (prog != NFS_PROGRAM || vers != NFS_V3) => {
                ReplyNeeds::new(&[], proto::rpc::REPLY_HEADER_MAX_BYTES as u32).unwrap_or_default()
            }
            _ => ReplyNeeds::from_ulb(&self.binding, NFS_V3, proc_),
        }
    }
}

pub(crate) const K_NULL: u8 = 0;
pub(crate) const K_READ: u8 = 1;
pub(crate) const K_WRITE: u8 = 2;
pub(crate) const K_COMMIT: u8 = 3;

/// What a Call in flight is.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OpMeta {
    pub(crate) t0_ns: u64,
    pub(crate) offset: u64,
    pub(crate) kind: u8,
    /// Submitted and not finished.
    pub(crate) live: bool,
    /// The NFSv4.1 session slot it went on.
    pub(crate) slot: u32,
}

/// Build and submit one Call of `kind` at `offset`. `Ok(None)`: the requester
/// had no room (try later).
fn submit_op<F: Fabric>(
    req: &mut Requester<'_, F>,
    wl: &Workload,
    needs: &[ReplyNeeds; 4],
    kind: u8,
    offset: u64,
    slot: Option<&nfs4::Slot>,
) -> Result<Option<CallId>, PerfError> {
    let Some(mut cb) = req.call_buf() else { return Ok(None) };
    let buf = cb.bytes_mut();
    let enc = |e: EncodeError| PerfError::Option(format!("the Call does not fit a data buffer: {e}"));
    let fh = wl.file.as_ref().map_or(&[][..], |f| &f.fh[..]);
    let len = match (kind, wl.kind, slot, &wl.v4) {
        (K_NULL, _, Some(s), Some(_)) => Some(nfs4::encode_null(buf, 0, &wl.cred, s).map_err(enc)?),
        (K_READ, _, Some(s), Some(v)) => {
            Some(nfs4::encode_read(buf, 0, &wl.cred, s, fh, &v.stateid, offset, wl.io_size).map_err(enc)?)
        }
        (K_WRITE, _, Some(s), Some(v)) => {
            let at = nfs4::encode_write_head(buf, 0, &wl.cred, s, fh, &v.stateid, offset, wl.io_size, wl.stable)
                .map_err(enc)?;
            if wl.verify {
                pattern::fill(&mut buf[at..at + wl.io_size as usize], offset, wl.salt);
            }
            Some(nfs::write_call_len(at, wl.io_size))
        }
        _ => None,
    };
    let len = match len {
        Some(n) => n,
        None => match (kind, wl.kind) {
            (K_NULL, OpKind::Null { prog, vers }) => nfs::encode_null(buf, 0, prog, vers, &wl.cred).map_err(enc)?,
            (K_READ, _) => nfs::encode_read(buf, 0, &wl.cred, fh, offset, wl.io_size).map_err(enc)?,
            (K_COMMIT, _) => nfs::encode_commit(buf, 0, &wl.cred, fh).map_err(enc)?,
            _ => {
                let at = nfs::encode_write_head(buf, 0, &wl.cred, fh, offset, wl.io_size, wl.stable).map_err(enc)?;
                if wl.verify {
                    pattern::fill(&mut buf[at..at + wl.io_size as usize], offset, wl.salt);
                }
                nfs::write_call_len(at, wl.io_size)
            }
        },
    };
    let mut items = [DdpItem::default(); 1];
    let k = if kind == K_WRITE && wl.v4.is_some() {
        proto::nfs4::ulb::call_items(&cb.bytes_mut()[..len], &mut items)
    } else if kind == K_WRITE {
        wl.binding
            .call_items(&cb.bytes_mut()[..len], &mut items)
            .map_err(|e| PerfError::Other(format!("WRITE Call not understood by the binding: {e}")))?
    } else {
        0
    };
    match req.submit(cb, len, &items[..k], &needs[kind as usize]) {
        Ok(id) => Ok(Some(id)),
        Err((SubmitError::Busy | SubmitError::NoBuffers, cb)) => {
            req.discard(cb);
            Ok(None)
        }
        Err((e, cb)) => {
            req.discard(cb);
            Err(PerfError::Other(format!("submit: {e}")))
        }
    }
}

/// Check a finished Call's reply. Returns an error description for a failed
/// operation.
fn check_reply(v: &ReplyView<'_>, xid: u32, wl: &Workload, m: &OpMeta) -> Result<(), ReplyError> {
    check_reply_bytes(v.reduced, v.write_chunk(0), xid, wl, m)
}

/// Check a finished Call's reply given as the (reduced) reply and the data
/// of its first Write chunk, if any (TCP: the whole reply, no chunk).
pub(crate) fn check_reply_bytes(
    reduced: &[u8],
    chunk: Option<&[u8]>,
    xid: u32,
    wl: &Workload,
    m: &OpMeta,
) -> Result<(), ReplyError> {
    if wl.v4.is_some() {
        return match m.kind {
            K_NULL => nfs4::parse_null(reduced, Some(xid)),
            K_READ => {
                let data = nfs4::parse_read(reduced, chunk, Some(xid), wl.io_size)?;
                if data.len() != wl.io_size as usize {
                    return Err(ReplyError::Bad("short READ"));
                }
                if wl.verify && pattern::check(data, m.offset, wl.salt).is_some() {
                    return Err(ReplyError::Bad("READ data differs from the pattern"));
                }
                Ok(())
            }
            _ => match nfs4::parse_write(reduced, Some(xid))? {
                n if n == wl.io_size => Ok(()),
                _ => Err(ReplyError::Bad("short WRITE")),
            },
        };
    }
    match m.kind {
        K_NULL => nfs::parse_null(reduced, Some(xid)),
        K_COMMIT => nfs::parse_commit(reduced, Some(xid)),
        K_READ => {
            let ok = nfs::parse_read(reduced, chunk, Some(xid), wl.io_size)?;
            if ok.count != wl.io_size {
                return Err(ReplyError::Bad("short READ"));
            }
            if wl.verify && pattern::check(ok.data, m.offset, wl.salt).is_some() {
                return Err(ReplyError::Bad("READ data differs from the pattern"));
            }
            Ok(())
        }
        _ => {
            let ok = nfs::parse_write(reduced, Some(xid))?;
            if ok.count != wl.io_size {
                return Err(ReplyError::Bad("short WRITE"));
            }
            Ok(())
        }
    }
}

/// Latency and counts of the measured time.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Measured window `[start_ns, end_ns]` on the run's clock.
    pub start_ns: u64,
    pub end_ns: u64,
    pub hist: LatencyHist,
    /// One histogram per second of the measured window.
    pub intervals: Vec<LatencyHist>,
    pub ops: u64,
    pub errors: u64,
    /// Completion time of the last recorded operation.
    pub last_ns: u64,
}

impl Recorder {
    pub fn new(start_ns: u64, end_ns: u64) -> Self {
        Recorder {
            start_ns,
            end_ns,
            hist: new_hist(),
            intervals: Vec::new(),
            ops: 0,
            errors: 0,
            last_ns: start_ns,
        }
    }

    /// Whether an operation intended at `t0_ns` and finished at `t_ns`
    /// belongs to the measured window.
    #[inline]
    pub fn measured(&self, t0_ns: u64, t_ns: u64) -> bool {
        t0_ns >= self.start_ns && t_ns <= self.end_ns
    }

    /// An operation finished: recorded when it is in the window.
    #[inline]
    pub fn complete(&mut self, t0_ns: u64, t_ns: u64, ok: bool) {
        if !self.measured(t0_ns, t_ns) {
            return;
        }
        if !ok {
            self.errors += 1;
            return;
        }
        let lat = t_ns.saturating_sub(t0_ns);
        record(&mut self.hist, lat);
        let k = ((t_ns - self.start_ns) / 1_000_000_000) as usize;
        while self.intervals.len() <= k {
            self.intervals.push(new_hist());
        }
        record(&mut self.intervals[k], lat);
        self.ops += 1;
        self.last_ns = self.last_ns.max(t_ns);
    }

    /// Merge another worker's recorder into this one.
    pub fn merge(&mut self, o: &Recorder) {
        let _ = self.hist.add(&o.hist);
        for (k, h) in o.intervals.iter().enumerate() {
            while self.intervals.len() <= k {
                self.intervals.push(new_hist());
            }
            let _ = self.intervals[k].add(h);
        }
        self.ops += o.ops;
        self.errors += o.errors;
        self.last_ns = self.last_ns.max(o.last_ns);
    }
}

/// Live counters of one worker, read by the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub ops: AtomicU64,
    pub errors: AtomicU64,
}

/// One connection of a worker.
struct ConnLoad<'p, F: Fabric> {
    req: Requester<'p, F>,
    meta: Vec<OpMeta>,
    outstanding: u32,
    sched: Option<OpenLoop>,
    offsets: Offsets,
    /// Measured submissions left (count mode).
    quota: Option<u64>,
    dead: bool,
    /// Bytes of WRITEs submitted since the last COMMIT.
    since_commit: u64,
    /// Its NFSv4.1 session (`--nfs 4.1`).
    v4: Option<V4Conn>,
    /// After the last refill: Calls short of the queue depth, and why
    /// ([`HeldBack`]).
    short: u32,
    short_why: HeldBack,
}

/// Why a closed-loop connection had fewer Calls outstanding than its queue
/// depth; as a number, the index into [`WorkerOut::held_back_ns`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldBack {
    /// The responder's credit grant (RFC 8166 s3.3.1).
    Credits = 0,
    /// Every Call slot in use (answered Calls not yet released).
    Slots = 1,
    /// Anything else: no buffer, the link not ready, a quota, an open loop's
    /// schedule.
    Other = 2,
}

/// What a worker hands back.
#[derive(Debug)]
pub struct WorkerOut {
    pub rec: Recorder,
    /// `--verify` with writes: bitmap of the blocks this worker wrote.
    pub written: Vec<u64>,
    pub stats: Vec<dataplane::requester::RequesterStats>,
    /// A connection of this worker failed (the target went away).
    pub lost: bool,
    /// How often the worker blocked for a completion (`--idle-wait`).
    pub idle_waits: u64,
    /// How many of those blocks a descriptor ended (not the time limit).
    pub idle_wakes: u64,
    /// Within the measured time, the Call-nanoseconds a connection was
    /// short of its queue depth, by reason ([`HeldBack`]): with `qd` x
    /// connections x the measured time, the share of the offered load that
    /// was held back on this side.
    pub held_back_ns: [u64; 3],
}

/// Idle poll turns in a row before a worker with `idle_sleep_us` sleeps.
pub const IDLE_TURNS_BEFORE_SLEEP: u32 = 16;

/// The longest one interrupt-mode wait blocks: a worker re-checks its
/// window, the drain deadline and the abort flag at least this often.
pub const IDLE_WAIT_MAX: Duration = Duration::from_millis(10);

/// Interrupt mode for a worker (`--idle-wait`): after
/// [`IDLE_TURNS_BEFORE_SLEEP`] idle poll turns it arms every connection's
/// wake-up ([`Fabric::arm_wakeup`]: verbs requests a CQ notification on its
/// completion channel; shm tells the peer to ring its doorbell), polls once
/// more, and then blocks in `poll(2)` on the fabrics' descriptors until a
/// completion or CM event arrives, like the kernel's NFS client, whose
/// completions are interrupts. A client that sleeps a fixed time per idle
/// turn instead sees each reply only at the end of a sleep: in an emulated
/// guest a 20 µs sleep lasts 200-300 µs, which quantises every qd-1 latency
/// it measures into multiples of that. A connection whose fabric cannot arm
/// makes the worker sleep `idle_sleep_us` (at least 1 µs) for that turn
/// instead. Worker thread.
struct IdleWait {
    /// Every connection's wake-up descriptors, fixed once connected.
    fds: Vec<libc::pollfd>,
    armed: bool,
    /// Blocks in `poll(2)` so far.
    waits: u64,
    /// Blocks that a ready descriptor ended.
    wakes: u64,
}

impl IdleWait {
    fn new<F: Fabric>(conns: &mut [ConnLoad<'_, F>]) -> Self {
        let mut fds = Vec::new();
        for c in conns.iter_mut() {
            for fd in c.req.fabric().wake_fds() {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        IdleWait {
            fds,
            armed: false,
            waits: 0,
            wakes: 0,
        }
    }

    /// One idle turn past the threshold: arm (this turn) or block (the turn
    /// after an arming whose re-check found nothing).
    fn idle<F: Fabric>(&mut self, conns: &mut [ConnLoad<'_, F>], max: Duration, fallback_us: u32) {
        if !self.armed {
            let mut all = !self.fds.is_empty();
            for c in conns.iter_mut().filter(|c| !c.dead) {
                all &= c.req.fabric().arm_wakeup();
            }
            self.armed = true;
            if !all {
                self.disarm(conns);
                std::thread::sleep(Duration::from_micros(u64::from(fallback_us.max(1))));
            }
            return;
        }
        let ms = max.as_millis().clamp(1, i32::MAX as u128) as i32;
        self.waits += 1;
        // SAFETY: `fds` is a live, exclusively borrowed array of `len`
        // initialised `pollfd`s for the duration of the call.
        let ready = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        self.wakes += u64::from(ready > 0);
        self.disarm(conns);
    }

    fn disarm<F: Fabric>(&mut self, conns: &mut [ConnLoad<'_, F>]) {
        if std::mem::take(&mut self.armed) {
            for c in conns.iter_mut() {
                c.req.fabric().disarm_wakeup();
            }
        }
    }
}

/// Parameters of one worker's load.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    /// Global connection indices of this worker (also their pool slots).
    pub conns: Vec<u32>,
    pub total_conns: u32,
    pub qd: u32,
    /// Open loop: calls per second per connection.
    pub rate: Option<f64>,
    pub seed: u64,
    /// Sleep this long per idle poll turn after [`IDLE_TURNS_BEFORE_SLEEP`]
    /// idle turns in a row (0: never sleep).
    pub idle_sleep_us: u32,
    /// Yield the CPU (`sched_yield`) per idle poll turn after
    /// [`IDLE_TURNS_BEFORE_SLEEP`] idle turns in a row, instead of sleeping.
    pub idle_yield: bool,
    /// Block until a completion arrives after [`IDLE_TURNS_BEFORE_SLEEP`]
    /// idle turns in a row (interrupt mode: [`IdleWait`]), instead of
    /// sleeping or yielding. Takes precedence over both.
    pub idle_wait: bool,
    /// Count mode: measured operations of each of `conns`.
    pub quotas: Option<Vec<u64>>,
}

/// Run the load of one worker on already connected requesters `reqs` (one
/// per `plan.conns`). Returns when the window is over and the Calls in flight
/// are drained (or the drain time passed), or when `abort` is set. A
/// connection that fails sets `abort`: the target is gone or broken, so
/// every worker stops at once instead of running out the clock. Worker
/// thread.
#[allow(clippy::too_many_arguments)]
pub fn run_worker<'p, F: Fabric>(
    reqs: Vec<Requester<'p, F>>,
    plan: &WorkerPlan,
    wl: &Workload,
    clock: Clock,
    start_ns: u64,
    end_ns: u64,
    drain: Duration,
    progress: &Progress,
    abort: &AtomicBool,
) -> Result<WorkerOut, PerfError> {
    let needs = [
        match wl.kind {
            OpKind::Null { .. } => wl.needs(NFSPROC3_NULL),
            _ => ReplyNeeds::default(),
        },
        wl.needs(NFSPROC3_READ),
        wl.needs(NFSPROC3_WRITE),
        wl.needs(proto::nfs3::NFSPROC3_COMMIT),
    ];
    let file_size = wl.file.as_ref().map_or(0, |f| f.size);
    let slots = (plan.qd.max(1) as usize).next_power_of_two();
    let mut conns: Vec<ConnLoad<'p, F>> = reqs
        .into_iter()
        .zip(&plan.conns)
        .enumerate()
        .map(|(i, (req, &c))| ConnLoad {
            req,
            meta: vec![OpMeta::default(); slots],
            outstanding: 0,
            sched: plan.rate.map(|r| OpenLoop::new(clock.now_ns(), r)),
            offsets: Offsets::new(file_size, wl.io_size as u64, wl.seq, c, plan.total_conns, plan.seed),
            quota: plan.quotas.as_ref().map(|q| q.get(i).copied().unwrap_or(0)),
            dead: false,
            since_commit: 0,
            v4: wl.v4.as_ref().map(|v| V4Conn::of(v, c)),
            short: 0,
            short_why: HeldBack::Other,
        })
        .collect();
    let blocks = (file_size / wl.io_size.max(1) as u64).max(1);
    let mut written = if wl.verify && wl.kind.writes() {
        vec![0u64; blocks.div_ceil(64) as usize]
    } else {
        Vec::new()
    };
    let mut rec = Recorder::new(start_ns, end_ns);
    let mut drain_deadline: Option<u64> = None;
    let mut idle_turns = 0u32;
    let mut waiter = plan.idle_wait.then(|| IdleWait::new(&mut conns));
    let mut held_back_ns = [0u64; 3];
    let mut prev_ns = clock.now_ns();
    loop {
        let now = clock.now_ns();
        // The time since the last turn, within the measured window, in
        // which each connection was short of its queue depth.
        let dt = now.min(end_ns).saturating_sub(prev_ns.max(start_ns));
        prev_ns = now;
        if dt > 0 {
            for c in conns.iter().filter(|c| !c.dead && c.short > 0) {
                held_back_ns[c.short_why as usize] += u64::from(c.short) * dt;
            }
        }
        let mut completed = 0u32;
        let count_done = conns.iter().all(|c| c.dead || c.quota == Some(0));
        let stopping = now >= end_ns || (plan.quotas.is_some() && count_done) || abort.load(Ordering::Relaxed);
        if stopping && drain_deadline.is_none() {
            drain_deadline = Some(now + drain.as_nanos() as u64);
        }
        let mut busy = 0u32;
        for c in conns.iter_mut().filter(|c| !c.dead) {
            c.req.poll();
            while let Some(done) = c.req.poll_completion() {
                let t = clock.now_ns();
                let m = c.meta[done.id.0 as usize];
                c.meta[done.id.0 as usize].live = false;
                if let Some(v) = c.v4.as_mut() {
                    v.free.push(m.slot);
                }
                let ok = done.outcome == CallOutcome::Reply
                    && c.req
                        .reply(done.id)
                        .is_some_and(|v| check_reply(&v, done.xid, wl, &m).is_ok());
                c.req.release(done.id);
                c.outstanding = c.outstanding.saturating_sub(1);
                if ok && m.kind == K_WRITE && !written.is_empty() {
                    let b = (m.offset / wl.io_size as u64) as usize;
                    written[b / 64] |= 1 << (b % 64);
                }
                rec.complete(m.t0_ns, t, ok);
                completed += 1;
            }
            progress.ops.store(rec.ops, Ordering::Relaxed);
            progress.errors.store(rec.errors, Ordering::Relaxed);
            if c.req.link() == LinkState::Failed {
                c.dead = true;
                abort.store(true, Ordering::Relaxed);
                continue;
            }
            if !stopping {
                refill(c, plan.qd, wl, &needs, &clock, start_ns)?;
                c.short = plan.qd.saturating_sub(c.outstanding);
                c.short_why = match c.req.submit_block() {
                    Some(SubmitBlock::Credits) => HeldBack::Credits,
                    Some(SubmitBlock::Slots) => HeldBack::Slots,
                    _ => HeldBack::Other,
                };
            }
            busy += c.outstanding;
        }
        if stopping && (busy == 0 || drain_deadline.is_some_and(|d| clock.now_ns() >= d)) {
            break;
        }
        if completed > 0 {
            idle_turns = 0;
            if let Some(w) = waiter.as_mut() {
                w.disarm(&mut conns);
            }
        } else if plan.idle_wait || plan.idle_yield || plan.idle_sleep_us > 0 {
            idle_turns = idle_turns.saturating_add(1);
            if idle_turns > IDLE_TURNS_BEFORE_SLEEP {
                if let Some(w) = waiter.as_mut() {
                    // Armed in the previous turn, whose polls were the
                    // re-check: block. Not armed yet: arm, and let the next
                    // turn re-check before blocking.
                    let until = drain_deadline.unwrap_or(end_ns);
                    let left = Duration::from_nanos(until.saturating_sub(clock.now_ns()));
                    w.idle(&mut conns, left.min(IDLE_WAIT_MAX), plan.idle_sleep_us);
                } else if plan.idle_yield {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(u64::from(plan.idle_sleep_us)));
                }
            }
        }
    }
    if let Some(w) = waiter.as_mut() {
        w.disarm(&mut conns);
    }
    // Calls of the measured window still unanswered after the drain time are
    // failures (a Call that never completes has no latency to record).
    let now = clock.now_ns();
    for c in conns.iter().filter(|c| !c.dead) {
        for m in c.meta.iter().filter(|m| m.live) {
            if rec.measured(m.t0_ns, now.min(end_ns)) {
                rec.errors += 1;
            }
        }
    }
    let stats = conns.iter().map(|c| c.req.stats()).collect();
    for c in conns.iter_mut() {
        c.req.shutdown(SHUTDOWN_POLLS);
    }
    // A lost connection is an error of the run even when it happened outside
    // the measured window (its Calls in flight there were not counted).
    let lost = conns.iter().any(|c| c.dead);
    if lost {
        rec.errors += 1;
    }
    Ok(WorkerOut {
        rec,
        written,
        stats,
        lost,
        held_back_ns,
        idle_waits: waiter.as_ref().map_or(0, |w| w.waits),
        idle_wakes: waiter.as_ref().map_or(0, |w| w.wakes),
    })
}

/// Submit Calls on `c` while it has room (closed loop) or while Calls are due
/// (open loop).
fn refill<F: Fabric>(
    c: &mut ConnLoad<'_, F>,
    qd: u32,
    wl: &Workload,
    needs: &[ReplyNeeds; 4],
    clock: &Clock,
    start_ns: u64,
) -> Result<(), PerfError> {
    while c.outstanding < qd && c.req.can_submit() {
        let now = clock.now_ns();
        let t0 = match &c.sched {
            Some(s) => match s.next_due(now) {
                Some(t) => t,
                None => break,
            },
            None => now,
        };
        let measured = t0 >= start_ns;
        if measured && c.quota == Some(0) {
            break;
        }
        let commit_due = wl.commit_every > 0 && c.since_commit >= wl.commit_every;
        let (kind, offset) = next_call(wl, &mut c.offsets, commit_due);
        let Some(slot) = next_slot(&mut c.v4) else { break };
        let Some(id) = submit_op(&mut c.req, wl, needs, kind, offset, slot.as_ref())? else {
            if let (Some(v), Some(s)) = (c.v4.as_mut(), slot) {
                // Not sent: the slot's sequence id was not used.
                v.seq[s.slot as usize] = v.seq[s.slot as usize].wrapping_sub(1);
                v.free.push(s.slot);
            }
            break;
        };
        if let Some(s) = c.sched.as_mut() {
            s.advance();
        }
        match kind {
            K_WRITE => c.since_commit += u64::from(wl.io_size),
            K_COMMIT => c.since_commit = 0,
            _ => {}
        }
        if measured {
            if let Some(q) = c.quota.as_mut() {
                *q -= 1;
            }
        }
        c.meta[id.0 as usize] = OpMeta {
            t0_ns: t0,
            offset,
            kind,
            live: true,
            slot: slot.map_or(0, |s| s.slot),
        };
        c.outstanding += 1;
    }
    Ok(())
}

/// One Call at a time over a requester (setup and checks). Main thread.
pub struct Session<'p, F: Fabric> {
    pub req: Requester<'p, F>,
    pub timeout: Duration,
}

impl<F: Fabric> std::fmt::Debug for Session<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("req", &self.req).finish()
    }
}

impl<'p, F: Fabric> Session<'p, F> {
    /// Encode a Call with `encode` (XID 0: the requester sets it), send it with
    /// the NFSv3 binding's DDP items and `needs`, wait for the reply and hand
    /// it to `parse` with the Call's XID.
    pub fn call<T>(
        &mut self,
        binding: &Nfs3Binding,
        needs: &ReplyNeeds,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&ReplyView<'_>, u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError> {
        let mut cb = self
            .req
            .call_buf()
            .ok_or_else(|| PerfError::Other("no call buffer".into()))?;
        let len = match encode(cb.bytes_mut()) {
            Ok(n) => n,
            Err(e) => {
                self.req.discard(cb);
                return Err(PerfError::Other(format!("encoding a Call: {e}")));
            }
        };
        let mut items = [DdpItem::default(); 1];
        // NFSv4 COMPOUNDs (WRITE data) first, else the NFSv3 binding.
        let k = match proto::nfs4::ulb::call_items(&cb.bytes_mut()[..len], &mut items) {
            0 => binding.call_items(&cb.bytes_mut()[..len], &mut items).unwrap_or(0),
            k => k,
        };
        let t0 = Instant::now();
        let id = loop {
            match self.req.submit(cb, len, &items[..k], needs) {
                Ok(id) => break id,
                Err((SubmitError::Busy | SubmitError::NoBuffers, back)) if t0.elapsed() < self.timeout => {
                    cb = back;
                    self.req.poll();
                }
                Err((e, back)) => {
                    self.req.discard(back);
                    return Err(PerfError::Other(format!("submit: {e}")));
                }
            }
        };
        loop {
            self.req.poll();
            if let Some(done) = self.req.poll_completion() {
                if done.id != id {
                    self.req.release(done.id);
                    continue;
                }
                let out = match done.outcome {
                    CallOutcome::Reply => match self.req.reply(done.id) {
                        Some(v) => parse(&v, done.xid).map_err(|e| match e {
                            ReplyError::Nfs(status) => PerfError::Nfs { what: "call", status },
                            e => PerfError::Rpc {
                                what: "reply",
                                detail: e.to_string(),
                            },
                        }),
                        None => Err(PerfError::Other("reply not readable".into())),
                    },
                    o => Err(PerfError::Other(format!("call ended with {o:?}"))),
                };
                self.req.release(done.id);
                return out;
            }
            if t0.elapsed() > self.timeout {
                return Err(PerfError::Other(format!("no reply within {:?}", self.timeout)));
            }
        }
    }

    /// Disconnect and return the buffers.
    pub fn close(mut self) {
        self.req.shutdown(SHUTDOWN_POLLS);
    }
}

/// One NFSv3 Call at a time over any transport (setup and checks): a
/// [`Session`] over a fabric, or [`crate::tcpload::TcpSession`].
pub trait NfsCaller {
    /// Encode a Call of procedure `proc_` with `encode` (XID 0: the caller
    /// sets it), send it, wait for its reply and hand `parse` the reply (the
    /// reduced reply and the first Write chunk's data over RPC-over-RDMA, the
    /// whole reply and `None` over TCP) and the Call's XID. `binding` bounds
    /// the sizes.
    fn nfs_call<T>(
        &mut self,
        binding: &Nfs3Binding,
        proc_: u32,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&[u8], Option<&[u8]>, u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError>;
}

impl<F: Fabric> NfsCaller for Session<'_, F> {
    fn nfs_call<T>(
        &mut self,
        binding: &Nfs3Binding,
        proc_: u32,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&[u8], Option<&[u8]>, u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError> {
        let needs = ReplyNeeds::from_ulb(binding, NFS_V3, proc_);
        self.call(binding, &needs, encode, |v, xid| {
            parse(v.reduced, v.write_chunk(0), xid)
        })
    }
}

/// Fill `[0, size)` of `fh` with the pattern of `salt` by WRITEs of `chunk`
/// bytes (FILE_SYNC). Main thread.
pub fn fill_file<C: NfsCaller>(s: &mut C, wl: &Workload, fh: &[u8], size: u64, chunk: u32) -> Result<(), PerfError> {
    let binding = Nfs3Binding::new(chunk.max(wl.io_size));
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(chunk as u64) as u32;
        let want = n;
        s.nfs_call(
            &binding,
            NFSPROC3_WRITE,
            |buf| {
                let at = nfs::encode_write_head(buf, 0, &wl.cred, fh, off, n, proto::nfs3::FILE_SYNC)?;
                pattern::fill(&mut buf[at..at + n as usize], off, wl.salt);
                Ok(nfs::write_call_len(at, n))
            },
            |reply, _, xid| {
                let ok = nfs::parse_write(reply, Some(xid))?;
                if ok.count != want {
                    return Err(ReplyError::Bad("short WRITE while filling the file"));
                }
                Ok(())
            },
        )?;
        off += n as u64;
    }
    Ok(())
}

/// Read back the blocks marked in `written` (bitmap of `io_size` blocks) and
/// check their pattern. Returns the number of blocks checked. Main thread.
pub fn verify_blocks<C: NfsCaller>(s: &mut C, wl: &Workload, written: &[u64]) -> Result<u64, PerfError> {
    let file = wl
        .file
        .as_ref()
        .ok_or_else(|| PerfError::Other("no file to verify".into()))?;
    let mut n = 0;
    for (w, &bits) in written.iter().enumerate() {
        for b in 0..64 {
            if bits & (1 << b) == 0 {
                continue;
            }
            let off = (w as u64 * 64 + b) * wl.io_size as u64;
            s.nfs_call(
                &wl.binding,
                NFSPROC3_READ,
                |buf| nfs::encode_read(buf, 0, &wl.cred, &file.fh, off, wl.io_size),
                |reply, chunk, xid| {
                    let ok = nfs::parse_read(reply, chunk, Some(xid), wl.io_size)?;
                    match pattern::check(ok.data, off, wl.salt) {
                        _ if ok.count != wl.io_size => Err(ReplyError::Bad("short READ in the read-back check")),
                        Some(_) => Err(ReplyError::Bad("data read back differs from what was written")),
                        None => Ok(()),
                    }
                },
            )?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_window_and_intervals() {
        let mut r = Recorder::new(1_000, 3_000_000_000);
        r.complete(999, 2_000, true); // warm-up: intended before the start
        r.complete(1_000, 3_000_000_001, true); // finished after the end
        r.complete(2_000, 7_000, true);
        r.complete(1_500_000_000, 1_500_005_000, true);
        r.complete(2_000, 9_000, false);
        r.complete(500, 9_000, false); // warm-up error: not counted
        assert_eq!((r.ops, r.errors), (2, 1));
        assert_eq!(r.hist.len(), 2);
        assert_eq!(r.intervals.len(), 2);
        assert_eq!((r.intervals[0].len(), r.intervals[1].len()), (1, 1));
        assert_eq!(r.last_ns, 1_500_005_000);
        let mut total = Recorder::new(1_000, 3_000_000_000);
        total.merge(&r);
        total.merge(&r);
        assert_eq!((total.ops, total.errors, total.hist.len()), (4, 2, 4));
        assert_eq!(total.intervals[1].len(), 2);
    }

    #[test]
    fn data_buffers_fit_io_and_headers() {
        assert!(Pools::data_bytes_for(4096) >= 64 * 1024 + HEADER_ROOM_BYTES);
        assert!(Pools::data_bytes_for(1 << 20) >= (1 << 20) + HEADER_ROOM_BYTES);
        assert_eq!(Pools::data_bytes_for(1 << 20) % 4096, 0);
    }

    #[test]
    fn needs_of_each_kind() {
        let wl = Workload {
            kind: OpKind::Null {
                prog: 0x2000_0000,
                vers: 1,
            },
            cred: Cred::none(),
            io_size: 4096,
            file: None,
            seq: false,
            verify: false,
            salt: 0,
            stable: 0,
            commit_every: 0,
            binding: Nfs3Binding::new(4096),
            v4: None,
        };
        let n = wl.needs(NFSPROC3_NULL);
        assert!(n.write_chunks.is_empty());
        assert_eq!(n.max_reply_size, proto::rpc::REPLY_HEADER_MAX_BYTES as u32);
        let w = Workload {
            kind: OpKind::Read,
            ..wl
        };
        assert_eq!(w.needs(NFSPROC3_READ).write_chunks.as_slice(), &[4096]);
        assert!(w.needs(NFSPROC3_WRITE).write_chunks.is_empty());
        assert!(w.needs(NFSPROC3_NULL).write_chunks.is_empty());
    }

    /// `--nfs 4.1`: the load COMPOUNDs' replies fit the version 1 inline
    /// threshold, so no Call offers a Reply chunk (the Linux server writes
    /// every Reply chunk offered; the Linux client offers none on these),
    /// and READ offers its Write chunk alone.
    #[test]
    fn nfs41_load_calls_offer_no_reply_chunk() {
        let cred = Cred::sys("perf", 0, 0).expect("cred");
        let wl = Workload {
            kind: OpKind::Read,
            cred: cred.clone(),
            io_size: 4096,
            file: None,
            seq: false,
            verify: false,
            salt: 0,
            stable: 0,
            commit_every: 0,
            binding: Nfs3Binding::new(4096),
            v4: Some(V4Load {
                sessions: vec![[7; proto::nfs4::NFS4_SESSIONID_SIZE]],
                slots: vec![1],
                stateid: proto::nfs4::Stateid::default(),
            }),
        };
        let slot = nfs4::Slot {
            session: [7; proto::nfs4::NFS4_SESSIONID_SIZE],
            slot: 0,
            seq: 1,
            highest: 0,
        };
        let fh = [9u8; 64];
        let mut buf = vec![0u8; 8192];
        let params = proto::plan::CallParams::new(1);
        for (proc_, len) in [
            (NFSPROC3_NULL, nfs4::encode_null(&mut buf, 1, &cred, &slot).unwrap()),
            (
                NFSPROC3_READ,
                nfs4::encode_read(&mut buf, 1, &cred, &slot, &fh, &Default::default(), 0, 4096).unwrap(),
            ),
        ] {
            let needs = wl.needs(proc_);
            let plan = proto::plan::plan_call(len, &[], &needs, &params).expect("plan");
            assert_eq!(plan.reply_chunk, None, "procedure {proc_}: {needs:?}");
        }
        let at = nfs4::encode_write_head(&mut buf, 1, &cred, &slot, &fh, &Default::default(), 0, 4096, 2).unwrap();
        let len = nfs::write_call_len(at, 4096);
        let mut items = [DdpItem::default(); 1];
        let k = proto::nfs4::ulb::call_items(&buf[..len], &mut items);
        let plan = proto::plan::plan_call(len, &items[..k], &wl.needs(NFSPROC3_WRITE), &params).expect("plan");
        assert_eq!(plan.reply_chunk, None, "WRITE");
        assert_eq!(wl.needs(NFSPROC3_READ).write_chunks.as_slice(), &[4096]);
    }
}
