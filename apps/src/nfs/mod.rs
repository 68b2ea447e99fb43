//! The NFSv3 (RFC 1813) and MOUNT v3 (RFC 1813 section 5) services of the
//! gateway, with exports, access control and the RPC-level dispatch (RFC
//! 5531); NFSv4.1/4.2 COMPOUNDs go on to [`crate::nfs4`].
//!
//! [`NfsShared`] holds what all cores share: the exports resolved against the
//! backends, the write verifier of this process, the READ/WRITE size limit and
//! the MOUNT list. [`NfsService`] is one core's service: it owns that core's
//! [`IoChannel`] of every backend and implements [`Service`], so the RDMA
//! responder engine and the TCP record-marking server run the same code.
//!
//! # Dispatch (RFC 5531 section 9)
//!
//! | call | reply |
//! |---|---|
//! | `rpcvers` other than 2 | MSG_DENIED / RPC_MISMATCH (2, 2) |
//! | `cred` or `verf` body over 400 bytes or truncated | MSG_DENIED / AUTH_ERROR AUTH_BADCRED (AUTH_BADVERF) |
//! | program other than NFS 100003 and MOUNT 100005 | PROG_UNAVAIL |
//! | NFS version other than 3 and 4, MOUNT version outside 1..=3 | PROG_MISMATCH (3, 4), (1, 3) |
//! | MOUNT v1/v2 MNT (a fixed 32-byte handle) | PROC_UNAVAIL (the rest of v1 and v2 is v3's) |
//! | NFS version 4 | NULL here; COMPOUND in [`crate::nfs4`] (sessions, not the reply cache below) |
//! | procedure out of range | PROC_UNAVAIL |
//! | NULL (procedure 0) | SUCCESS, whatever the credential (except RPCSEC_GSS) |
//! | flavor other than AUTH_SYS and AUTH_NONE, or AUTH_SYS body not decoding | AUTH_ERROR AUTH_BADCRED |
//! | AUTH_NONE on an export without `allow_auth_none` | AUTH_ERROR AUTH_TOOWEAK |
//! | arguments that do not decode | GARBAGE_ARGS |
//! | reply does not fit the head buffer | SYSTEM_ERR |
//! | not a Call (`mtype` REPLY), a header too short to hold `proc`, or no room for a reply | refused ([`ServiceError::Reject`]): over RDMA the engine answers with the transport error (ERR_CHUNK, RDMA2_ERR_SYSTEM), over TCP nothing is sent |
//!
//! # Retransmits (RFC 1813 section 4.5)
//!
//! A client that lost a reply (its connection dropped) resends the Call
//! with the same XID. The replies of SETATTR, CREATE, MKDIR, SYMLINK, MKNOD,
//! REMOVE, RMDIR, RENAME and LINK are kept in a bounded duplicate request
//! cache ([`drc`]) keyed by XID, client address, program, version,
//! procedure, length and a checksum of the arguments, so such a retransmit
//! gets the first reply instead of running again; one that arrives while the
//! first is still being served is dropped. Each core's service has its own
//! cache (every connection to a fabric listener reaches the same core); the
//! TCP server's connection threads share one per listener
//! ([`ReplyCacheRef::Shared`]).
//!
//! A client outside an export's networks gets MNT3ERR_ACCES from MOUNT and
//! NFS3ERR_ACCES for every procedure on that export's handles: a refused
//! client always gets the protocol's error.
//!
//! # Data path
//!
//! READ reads straight into the registered data buffer the engine attached
//! (sized by [`Service::reply_data_hint`]) and marks it DDP-eligible (RFC 8267
//! section 4), so the engine RDMA-Writes it into the client's Write chunk;
//! without a data buffer (TCP, or a zero count) the data is read into the
//! reply head. WRITE writes straight from the Read chunk the engine pulled (or
//! from the inline arguments). FILE_SYNC and DATA_SYNC writes are on stable
//! storage before the reply; COMMIT flushes the file. The write verifier is
//! new in every process (and every [`NfsShared`]), so a client resends
//! UNSTABLE data after a restart; [`NfsShared::sync_all`] at a clean shutdown
//! makes every UNSTABLE write durable. A failed flush (COMMIT, or a
//! FILE_SYNC or DATA_SYNC WRITE) replaces the verifier
//! ([`NfsShared::writeback_failed`]), so clients resend UNSTABLE data the
//! failed write-back may have lost.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::{Config, PoolUsage};
use dataplane::service::{BackwardChannel, CallView, DeferToken, ReplyBuilder, Service, ServiceError};
use dataplane::ConnId;
use proto::error::{DecodeError, DecodeErrorKind, EncodeError};
use proto::nfs3::{self as p, MOUNT_PROGRAM, MOUNT_V3, NFSPROC3_COUNT, NFS_PROGRAM, NFS_V3};
use proto::nfs4::NFS_V4;
use proto::rpc::{self, AcceptedReply, AuthStat, CallHeader, OpaqueAuth, RejectedReply, ReplyHeader};
use proto::xdr::Writer;

use crate::backend::{Backend, FsError, FsResult, IoChannel};
use crate::server::stats::{self, ProcStats};

pub mod auth;
pub(crate) mod defer;
pub(crate) mod delegwait;
pub mod drc;
pub mod export;
mod mount;
pub(crate) mod nfs3;
mod offload;
pub use offload::HELPER_THREADS;
pub mod xdr;

use auth::Cred;
use drc::{Lookup, ReplyCache};
use export::Export;

/// Largest READ or WRITE (FSINFO `rtmax` / `wtmax`) when the data buffers
/// allow it: 1 MiB, what the Linux client and server use.
pub const MAX_IO_BYTES: u32 = 1 << 20;
/// Entries kept in the MOUNT list (DUMP); the oldest is forgotten beyond it.
pub const MAX_MOUNT_ENTRIES: usize = 256;
/// Largest Call reassembled from several pieces for decoding (every procedure
/// but WRITE, whose data is used in place): an RPC header, two handles, two
/// names and a path fit with room to spare.
pub const MAX_ASSEMBLED_CALL_BYTES: usize = 16 * 1024;
/// Bytes of the accepted-SUCCESS reply header the services write (AUTH_NONE
/// verifier).
pub const REPLY_HEADER_BYTES: usize = rpc::SUCCESS_REPLY_NONE_BYTES;
/// MOUNT version 1, of which the gateway serves what v3 shares with it.
pub const MOUNT_V1: u32 = 1;
/// Procedures of NFSv4 (NULL and COMPOUND, RFC 8881 s16).
pub const NFSPROC4_COUNT: u32 = 2;
/// Procedures of MOUNT v3 (0..=5).
pub const MOUNTPROC3_COUNT: u32 = 6;

/// One entry of the MOUNT list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The client: its IP address, or its AUTH_SYS machine name when the
    /// transport gives no address.
    pub host: String,
    /// The export path it mounted.
    pub path: String,
}

/// What every core's NFS service shares. Immutable after [`NfsShared::new`]
/// except the MOUNT list (behind a mutex, control path only) and the write
/// verifier (an atomic, replaced after a write-back error).
#[derive(Debug)]
pub struct NfsShared {
    exports: Vec<Export>,
    backends: Vec<(String, Arc<dyn Backend>)>,
    /// The write verifier, replaced when write-back fails
    /// ([`NfsShared::writeback_failed`]).
    write_verf: AtomicU64,
    /// Write-back errors seen (each replaced the verifier).
    writeback_errors: AtomicU64,
    max_io_bytes: u32,
    mounts: Mutex<VecDeque<MountEntry>>,
    /// NFSv4 clients, sessions and opens.
    pub(crate) v4: crate::nfs4::state::V4State,
    /// Runs metadata procedures of blocking backends off the cores
    /// ([`offload`]); started on first use.
    helpers: std::sync::OnceLock<offload::HelperPool>,
    /// Where the helper threads run: off the cores' CPUs (started by a core,
    /// they would otherwise inherit its pinning).
    off_cores: crate::cpus::OffCores,
}

/// A write verifier no other [`NfsShared`] of this or an earlier process had:
/// the wall clock in nanoseconds, the process id and a per-process sequence
/// number, mixed (splitmix64 finalizer).
fn new_write_verifier() -> u64 {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut z = nanos ^ (u64::from(std::process::id()) << 40) ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl NfsShared {
    /// Resolve `cfg.exports` against `backends` (name, backend). The READ and
    /// WRITE limit is [`MAX_IO_BYTES`], lowered to the largest buffer of the
    /// configuration's `data` pools (a READ reply or WRITE chunk must fit
    /// one), rounded down to a multiple of 4 KiB where it is that large.
    ///
    /// Fails when an export names a backend not in `backends`, a client
    /// network does not parse, or two export paths hash to the same id.
    /// Called once at start-up, from any thread.
    pub fn new(cfg: &Config, backends: Vec<(String, Arc<dyn Backend>)>) -> Result<Arc<NfsShared>, String> {
        let mut exports: Vec<Export> = Vec::with_capacity(cfg.exports.len());
        for e in &cfg.exports {
            let b = backends
                .iter()
                .position(|(n, _)| *n == e.backend)
                .ok_or_else(|| format!("export {}: no backend named {:?}", e.path, e.backend))?;
            let root = export::export_dir(&*backends[b].1, &e.dir).map_err(|m| format!("export {}: {m}", e.path))?;
            let ex = Export::new(e, b, root)?;
            if let Some(o) = exports.iter().find(|o| o.id == ex.id) {
                return Err(format!(
                    "exports {} and {}: same path or same export id",
                    o.path, ex.path
                ));
            }
            exports.push(ex);
        }
        let data_max = cfg
            .pools
            .iter()
            .filter(|p| p.usage == PoolUsage::Data)
            .map(|p| p.buffer_size_bytes)
            .max()
            .unwrap_or(MAX_IO_BYTES);
        let mut max_io = data_max.min(MAX_IO_BYTES);
        max_io = if max_io >= 4096 { max_io & !4095 } else { max_io & !3 };
        if max_io == 0 {
            return Err(format!(
                "data pool buffers of {data_max} bytes are too small for READ/WRITE"
            ));
        }
        let off_cores = crate::cpus::OffCores::new(crate::cpus::CoreCpus::of(cfg));
        let mut v4 = crate::nfs4::state::V4State::new(cfg.credits.max_per_connection, max_io);
        if let Some(dir) = &cfg.nfs4.state_dir {
            // Stable NFSv4 client records for the backends whose files
            // outlive the process (crate::nfs4::grace).
            let which: Vec<(&str, bool)> = backends
                .iter()
                .map(|(n, b)| (n.as_str(), matches!(b.kind(), "uring" | "nvme")))
                .collect();
            let rec = crate::nfs4::grace::Records::open(std::path::Path::new(dir), &which)
                .map_err(|e| format!("nfs4.state_dir {dir}: {e}"))?
                .with_off_cores(off_cores.clone());
            v4 = v4.with_records(rec);
        }
        v4.set_delegations(cfg.nfs4.delegations);
        v4.set_regrant_after_recall(std::time::Duration::from_millis(
            cfg.nfs4.regrant_after_recall_ms.into(),
        ));
        Ok(Arc::new(NfsShared {
            exports,
            backends,
            write_verf: AtomicU64::new(new_write_verifier()),
            writeback_errors: AtomicU64::new(0),
            max_io_bytes: max_io,
            mounts: Mutex::new(VecDeque::new()),
            v4,
            helpers: std::sync::OnceLock::new(),
            off_cores,
        }))
    }

    /// The NFSv4 state (clients, sessions, opens).
    pub fn v4(&self) -> &crate::nfs4::state::V4State {
        &self.v4
    }

    /// The exports, in configuration order.
    pub fn exports(&self) -> &[Export] {
        &self.exports
    }

    /// The write verifier (`writeverf3`) WRITE and COMMIT replies carry
    /// now. Any core.
    pub fn write_verifier(&self) -> [u8; 8] {
        // Acquire: pairs with the AcqRel update in `writeback_failed`.
        self.write_verf.load(Ordering::Acquire).to_be_bytes()
    }

    /// Write-back errors seen since start-up.
    pub fn writeback_errors(&self) -> u64 {
        self.writeback_errors.load(Ordering::Relaxed)
    }

    /// A flush (COMMIT, or a FILE_SYNC or DATA_SYNC WRITE) of some backend
    /// failed: data written UNSTABLE and acknowledged under the current
    /// verifier may be lost (the kernel may drop dirty pages whose write-back
    /// failed, and reports it once). Replace the verifier, so the clients'
    /// next COMMIT or WRITE reply differs from what their UNSTABLE WRITEs
    /// got and they send that data again (RFC 1813 sections 3.3.7 and
    /// 3.3.21: the verifier changes whenever uncommitted data may be lost).
    /// Any core; does not block.
    pub fn writeback_failed(&self) {
        self.writeback_errors.fetch_add(1, Ordering::Relaxed);
        // The sequence number in `new_write_verifier` makes each value new;
        // equal to the old one only by a collision, which the xor avoids.
        let _ = self
            .write_verf
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                let v = new_write_verifier();
                Some(if v == old { v ^ 1 } else { v })
            });
    }

    pub(crate) fn helpers(&self) -> &offload::HelperPool {
        self.helpers
            .get_or_init(|| offload::HelperPool::start(self.off_cores.clone()))
    }

    /// Where the target's threads other than the cores run (the helper
    /// pool, TCP connections, the statistics socket): off the cores' CPUs.
    pub fn off_cores(&self) -> &crate::cpus::OffCores {
        &self.off_cores
    }

    /// Start the helper pool now if it is not running yet (a core starts it
    /// on its first offloaded Call); whether any helper runs. Its threads
    /// run off the io cores' CPUs ([`crate::cpus::OffCores`]) whichever
    /// thread starts them. Any thread.
    pub fn start_helpers(&self) -> bool {
        self.helpers().is_running()
    }

    /// FSINFO `rtmax` and `wtmax`.
    pub fn max_io_bytes(&self) -> u32 {
        self.max_io_bytes
    }

    /// The backends, in the order given to [`NfsShared::new`].
    pub fn backends(&self) -> &[(String, Arc<dyn Backend>)] {
        &self.backends
    }

    /// A copy of the MOUNT list (oldest first).
    pub fn mounts(&self) -> Vec<MountEntry> {
        self.lock_mounts().iter().cloned().collect()
    }

    fn lock_mounts(&self) -> std::sync::MutexGuard<'_, VecDeque<MountEntry>> {
        // A panic while holding the lock cannot leave the list inconsistent
        // (each operation is one push, retain or pop), so a poisoned lock is used.
        self.mounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn export_by_id(&self, id: u64) -> Option<usize> {
        self.exports.iter().position(|e| e.id == id)
    }

    /// Flush every backend to stable storage (clean shutdown: no UNSTABLE
    /// write is lost). Tries every backend; returns the first error. Any
    /// thread; blocks while the backends flush.
    pub fn sync_all(&self) -> FsResult<()> {
        let mut first = Ok(());
        for (_, b) in &self.backends {
            if let Err(e) = b.sync_all() {
                self.writeback_failed();
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// Per-core counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NfsStats {
    /// NFSv3 calls answered, by procedure.
    pub nfs: [u64; NFSPROC3_COUNT as usize],
    /// MOUNT v3 calls answered, by procedure.
    pub mount: [u64; MOUNTPROC3_COUNT as usize],
    /// Calls answered with an RPC-level error (PROG_UNAVAIL, PROG_MISMATCH,
    /// PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR, RPC_MISMATCH, AUTH_ERROR).
    pub rpc_errors: u64,
    /// Of those, GARBAGE_ARGS.
    pub garbage_args: u64,
    /// Of those, AUTH_ERROR.
    pub auth_errors: u64,
    /// Calls dropped without a reply (not a Call, or no readable header).
    pub dropped: u64,
    /// READs and WRITEs whose reply waited for their backend I/O while the
    /// core went on (deferred replies), and the most in flight at once.
    pub deferred_reads: u64,
    pub deferred_writes: u64,
    pub deferred_max: u64,
    /// COMMITs whose reply waited for their flush (`IORING_OP_FSYNC`)
    /// while the core went on.
    pub deferred_commits: u64,
    /// FILE_SYNC and DATA_SYNC WRITEs whose flush after the write was
    /// deferred the same way.
    pub deferred_flushes: u64,
    /// Metadata Calls run on the helper pool while the core went on.
    pub offloaded: u64,
    /// READs, WRITEs and COMMITs deferred while the pool opened their file
    /// for the core's channel.
    pub offloaded_opens: u64,
}

/// Why a procedure did not produce its normal results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    /// GARBAGE_ARGS.
    Garbage,
    /// MSG_DENIED / AUTH_ERROR.
    Auth(AuthStat),
    /// An `nfsstat3` error with the procedure's empty failure arm.
    Nfs(u32),
    /// SYSTEM_ERR (e.g. the results do not fit the head buffer).
    System,
    /// The backend's I/O queue is full for a Call the engine may defer:
    /// [`ServiceError::Busy`], so the engine runs it again later instead of
    /// answering NFS3ERR_JUKEBOX.
    Busy,
    /// The Call (one the engine may defer) conflicts with NFSv4 delegations
    /// on this file, recalled now: it is held until they are returned or
    /// revoked ([`delegwait`]), or answered NFS3ERR_JUKEBOX when no more
    /// can be held.
    Recalled(crate::nfs4::state::FileKey, crate::nfs4::deleg::Conflict),
}

impl From<DecodeError> for Fail {
    fn from(_: DecodeError) -> Self {
        Fail::Garbage
    }
}

impl From<EncodeError> for Fail {
    fn from(_: EncodeError) -> Self {
        Fail::System
    }
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Self {
        Fail::Nfs(e.nfsstat3())
    }
}

/// A decoded Call as the procedures see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call<'a> {
    pub proc_: u32,
    pub cred: Cred<'a>,
    pub peer: Option<IpAddr>,
    /// The arguments (contiguous; for WRITE they end where a Read chunk starts).
    pub args: &'a [u8],
    /// The piece after the head, when the Call came in several (WRITE data
    /// in a Read chunk).
    pub tail: Option<&'a [u8]>,
    /// The engine lets this Call's reply be deferred under this token.
    pub token: Option<DeferToken>,
}

/// One core's state besides the shared part: its I/O channels and scratch.
#[derive(Debug)]
pub(crate) struct CoreState {
    pub core: usize,
    /// One per backend, in [`NfsShared::backends`] order.
    pub channels: Vec<Box<dyn IoChannel>>,
    /// READDIR collection space (bounded by the reply's size).
    pub dir: nfs3::DirScratch,
    pub stats: NfsStats,
    /// Calls whose backend I/O or helper job is in flight, replies deferred.
    pub deferred: defer::Deferred,
    /// NFSv4 counters.
    pub v4: crate::nfs4::Nfs4Stats,
    /// NFSv4 COMPOUNDs suspended at a deferred I/O operation.
    pub v4_suspended: crate::nfs4::suspend::Suspended,
    /// Calls on the helper pool.
    pub offload: offload::CoreOffload,
    /// NFSv3 Calls held for a delegation recall.
    pub delegwait: delegwait::DelegWaits,
}

/// One core's NFS and MOUNT service. Owns the core's I/O channels, so it is
/// created and used on that core only.
#[derive(Debug)]
pub struct NfsService {
    shared: Arc<NfsShared>,
    st: CoreState,
    /// Reassembly space for Calls that come in several pieces (not WRITE).
    scratch: Vec<u8>,
    /// No backend of this core completes I/O later, so no READ is deferred
    /// ([`Service::fills_data_in_call`]).
    reads_in_call: bool,
    /// What [`Service::fills_data_in_call`] last answered: the engine asks
    /// it before each step that gives a Call a data buffer, and a data
    /// buffer it then gave may be the requester's own memory, which must
    /// not outlive the step: such a Call is not held for a recall
    /// ([`delegwait`]) but answered NFS3ERR_JUKEBOX.
    data_in_call: std::cell::Cell<bool>,
    /// Replies of non-idempotent Calls, for their retransmits.
    drc: ReplyCacheRef,
    procs: ProcStats,
}

/// The duplicate request cache a service uses ([`drc`]).
#[derive(Debug)]
pub enum ReplyCacheRef {
    /// Its own: one per core (the RDMA engine's connections to a listener
    /// all reach the same core, so a reconnecting client finds it).
    Core(Box<ReplyCache>),
    /// One shared by several services (the TCP server: one service per
    /// connection thread, so a reconnect reaches another service).
    Shared(Arc<Mutex<ReplyCache>>),
}

impl ReplyCacheRef {
    fn with<R>(&mut self, f: impl FnOnce(&mut ReplyCache) -> R) -> R {
        match self {
            ReplyCacheRef::Core(c) => f(c),
            // A panic while holding the lock leaves at most one entry in
            // progress (later retransmits of it are dropped until the clock
            // would evict it, which it never does): the cache stays usable.
            ReplyCacheRef::Shared(m) => f(&mut m.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

impl NfsService {
    /// The service for `core`: opens one [`IoChannel`] per backend and makes
    /// the core's own reply cache of [`drc::DRC_ENTRIES`] entries. Call on
    /// the core that will run it.
    pub fn new(shared: Arc<NfsShared>, core: usize) -> FsResult<NfsService> {
        let drc = ReplyCacheRef::Core(Box::new(ReplyCache::new(drc::DRC_ENTRIES)));
        NfsService::with_reply_cache(shared, core, drc)
    }

    /// [`NfsService::new`] with the given reply cache (shared by the TCP
    /// server's connection threads, or sized for a test).
    pub fn with_reply_cache(shared: Arc<NfsShared>, core: usize, drc: ReplyCacheRef) -> FsResult<NfsService> {
        let mut channels = Vec::with_capacity(shared.backends.len());
        for (_, b) in &shared.backends {
            channels.push(b.open_channel(core)?);
        }
        let reads_in_call = channels.iter().all(|c| !c.completes_later());
        Ok(NfsService {
            shared,
            st: CoreState {
                core,
                channels,
                dir: nfs3::DirScratch::default(),
                stats: NfsStats::default(),
                deferred: defer::Deferred::new(),
                v4: crate::nfs4::Nfs4Stats::default(),
                v4_suspended: Default::default(),
                offload: offload::CoreOffload::default(),
                delegwait: Default::default(),
            },
            scratch: Vec::new(),
            reads_in_call,
            data_in_call: std::cell::Cell::new(reads_in_call),
            drc,
            procs: ProcStats::default(),
        })
    }

    /// This core's counters.
    pub fn stats(&self) -> NfsStats {
        NfsStats {
            deferred_max: self.st.deferred.max_in_flight as u64,
            ..self.st.stats
        }
    }

    /// This core's NFSv4 counters.
    pub fn nfs4_stats(&self) -> crate::nfs4::Nfs4Stats {
        self.st.v4
    }

    /// The shared part.
    pub fn shared(&self) -> &Arc<NfsShared> {
        &self.shared
    }

    /// The core this service was opened for.
    pub fn core(&self) -> usize {
        self.st.core
    }

    /// Counters of the reply cache, its entries in use and its capacity.
    pub fn reply_cache_stats(&self) -> (drc::DrcStats, usize, usize) {
        let f = |c: &ReplyCache| (c.stats(), c.len(), c.capacity());
        match &self.drc {
            ReplyCacheRef::Core(c) => f(c),
            ReplyCacheRef::Shared(m) => f(&m.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

/// Write a whole reply header (no results) into the head.
fn reply_header(reply: &mut ReplyBuilder<'_>, hdr: &ReplyHeader<'_>) -> Result<(), ServiceError> {
    let mut w = Writer::new(reply.head_mut());
    rpc::encode_reply_header(&mut w, hdr).map_err(|_| ServiceError::Reject)?;
    let n = w.len();
    reply.set_head_len(n);
    Ok(())
}

/// The credential of a call, or the AUTH_ERROR to answer.
fn credential<'a>(h: &CallHeader<'a>) -> Result<Cred<'a>, AuthStat> {
    match h.cred.flavor {
        rpc::AUTH_NONE => Ok(Cred::None),
        rpc::AUTH_SYS => match h.auth_sys() {
            Some(Ok(p)) => Ok(Cred::Sys(p)),
            _ => Err(AuthStat::BadCred),
        },
        _ => Err(AuthStat::BadCred),
    }
}

/// The `count` of an NFSv3 READ Call whose header and arguments are all in
/// `head`; `None` for any other Call and for anything malformed.
///
/// Word offsets only, with no header built: the data buffer is sized before
/// the Call is handled, so the Call would otherwise be decoded twice. A Call
/// (RFC 5531 section 9) is xid, mtype (CALL), rpcvers (2), prog, vers, proc,
/// then the credential and the verifier, each `opaque_auth` (flavor, length,
/// body padded to a word, at most 400 bytes); READ3args (RFC 1813 section
/// 3.3.6) is an `nfs_fh3` (length, at most 64, and padded body), a 64-bit
/// offset and the count. Agrees with decoding the header and the arguments
/// in full (property test below); peer bytes can only make it return `None`.
fn read_count(head: &[u8]) -> Option<u32> {
    let word = |i: usize| -> Option<u32> {
        let b = head.get(i..i.checked_add(4)?)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let pad4 = |n: u32| (n as usize + 3) & !3;
    if word(4)? != rpc::CALL
        || word(8)? != rpc::RPC_VERSION
        || word(12)? != NFS_PROGRAM
        || word(16)? != NFS_V3
        || word(20)? != p::NFSPROC3_READ
    {
        return None;
    }
    let cred_len = word(28)?;
    if cred_len > rpc::MAX_AUTH_BYTES {
        return None;
    }
    let verf_at = rpc::CALL_CRED_BODY_OFFSET + pad4(cred_len);
    let verf_len = word(verf_at + 4)?;
    if verf_len > rpc::MAX_AUTH_BYTES {
        return None;
    }
    let fh_at = verf_at + 8 + pad4(verf_len);
    let fh_len = word(fh_at)?;
    if fh_len > p::NFS3_FHSIZE {
        return None;
    }
    // offset (two words), then count.
    word(fh_at + 4 + pad4(fh_len) + 8)
}

impl Service for NfsService {
    /// READ is the only procedure with a data buffer; it is answered within
    /// `handle_call` when no backend of this core completes I/O later.
    /// Not while an NFSv4 client holds a write delegation, so an NFSv3
    /// READ that conflicts with one may be held for its recall.
    fn fills_data_in_call(&self) -> bool {
        let yes = self.reads_in_call && self.shared.v4.write_delegations() == 0;
        self.data_in_call.set(yes);
        yes
    }

    /// READ: the count asked for, at most the READ limit; nothing otherwise.
    fn reply_data_hint(&mut self, call: &CallView<'_>) -> usize {
        let head = call.head();
        read_count(head)
            .or_else(|| crate::nfs4::read_hint(head))
            .map_or(0, |n| n.min(self.shared.max_io_bytes) as usize)
    }

    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        let t0 = self.procs.start();
        let r = self.handle_call_untimed(call, reply);
        self.account(t0, call, reply, &r);
        r
    }

    /// Deferred READs and WRITEs whose backend I/O finished.
    fn poll_deferred(&mut self, ready: &mut [DeferToken]) -> usize {
        let st = &mut self.st;
        st.offload.poll(&mut st.deferred);
        st.delegwait.poll(&self.shared.v4, &mut st.deferred);
        st.deferred.poll_ready(&mut st.channels, ready)
    }

    /// Answer a deferred READ or WRITE: the Call runs again and the
    /// procedure takes the I/O's result instead of submitting it.
    fn resume(
        &mut self,
        token: DeferToken,
        call: &CallView<'_>,
        reply: &mut ReplyBuilder<'_>,
    ) -> Result<(), ServiceError> {
        let r = self.st.deferred.take(token).ok_or(ServiceError::Reject)?;
        // A Call held for a recall runs as new.
        if !r.waited && !self.st.offload.begin_resume(token) {
            self.st.deferred.resumed = Some(r);
        }
        let t0 = self.procs.resumed(token.0);
        let res = self.handle_call_untimed(call, reply);
        self.account(t0, call, reply, &res);
        self.st.deferred.resumed = None;
        self.st.offload.resuming = None;
        self.st.offload.opened_for = None;
        res
    }

    /// One Call in [`stats::LAT_SAMPLE_EVERY`], as the service's own timing.
    fn reply_timing_every(&self) -> u32 {
        stats::LAT_SAMPLE_EVERY
    }

    /// The reactor's cheap clock (no system call per read in a guest whose
    /// clock source is hpet).
    fn reply_clock_now(&self) -> std::time::Instant {
        reactor::clock::now()
    }

    /// The arrival-to-reply time of a Call of row `tag - 1` ([`Self::account`] tags it).
    fn reply_posted(&mut self, tag: u16, ns: u64) {
        if let Some(row) = usize::from(tag).checked_sub(1) {
            self.procs.posted(row, ns);
        }
    }

    fn cancel(&mut self, token: DeferToken) {
        let _ = self.st.deferred.take(token);
        self.st.delegwait.cancel(token);
        let _ = self.procs.resumed(token.0);
        self.st.v4_suspended.cancel(&self.shared.v4, token);
        if let Some(s) = self.st.offload.cancel(token) {
            self.drc.with(|c| c.complete(s, None));
        }
    }

    /// NFSv4 callbacks ready on a connection of this core: one atomic
    /// load ([`crate::nfs4::callback`]). Called on every turn of the core's
    /// loop, so the delegation revocation timer runs here too (one more
    /// atomic load while no recall is outstanding;
    /// [`crate::nfs4::state::V4State::revoke_overdue`]).
    fn has_backward_calls(&self) -> bool {
        self.shared.v4.revoke_overdue();
        self.shared.v4.cb.has_calls(self.st.core)
    }

    /// The next CB_NULL or CB_COMPOUND for a session whose backchannel is
    /// `conn`.
    fn poll_backward_call(&mut self, conn: ConnId, buf: &mut [u8]) -> Option<usize> {
        self.shared.v4.cb.poll((self.st.core, conn), buf)
    }

    fn handle_backward_reply(&mut self, conn: ConnId, msg: &[u8]) {
        self.shared.v4.cb.reply((self.st.core, conn), msg);
    }

    fn backward_channel(&mut self, conn: ConnId, chan: Option<BackwardChannel>) {
        self.shared.v4.cb.transport((self.st.core, conn), chan);
    }
}

impl NfsService {
    /// Per-procedure counters and sampled latency (live statistics).
    pub fn procs(&self) -> &ProcStats {
        &self.procs
    }

    /// Count a Call handled (answered, or deferred) in [`ProcStats`].
    fn account(
        &mut self,
        t0: Option<u64>,
        call: &CallView<'_>,
        reply: &mut ReplyBuilder<'_>,
        r: &Result<(), ServiceError>,
    ) {
        let Some(row) = stats::proc_row(call.head()).filter(|_| r.is_ok()) else {
            return;
        };
        // For `reply_posted`: the row, plus one (0 is untagged).
        reply.set_stat_tag(row as u16 + 1);
        if reply.is_deferred() {
            if let Some(tok) = call.defer_token() {
                self.procs.deferred(tok.0, t0);
            }
            return;
        }
        let n = reply.head_len();
        let err = stats::reply_is_error(row, reply.head_mut().get(..n).unwrap_or(&[]));
        self.procs
            .answered(row, err, call.len() as u64, (n + reply.data_len()) as u64, t0);
    }

    fn handle_call_untimed(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        let NfsService {
            shared,
            st,
            scratch,
            drc,
            data_in_call,
            ..
        } = self;
        let head = call.head();
        let Ok((xid, mtype)) = rpc::peek_msg(head) else {
            st.stats.dropped += 1;
            return Err(ServiceError::Reject);
        };
        if mtype != rpc::CALL {
            st.stats.dropped += 1;
            return Err(ServiceError::Reject);
        }
        let (hdr, at) = match CallHeader::decode(head) {
            Ok(v) => v,
            Err(e) => {
                let why = match e.kind {
                    DecodeErrorKind::BadVersion { .. } => ReplyHeader::rpc_mismatch(xid),
                    _ if e.field.starts_with("cred") => {
                        ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat::BadCred))
                    }
                    _ if e.field.starts_with("verf") => {
                        ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat::BadVerf))
                    }
                    _ => {
                        st.stats.dropped += 1;
                        return Err(ServiceError::Reject);
                    }
                };
                st.stats.rpc_errors += 1;
                if matches!(why.body, rpc::ReplyBody::Denied(RejectedReply::AuthError(_))) {
                    st.stats.auth_errors += 1;
                }
                return reply_header(reply, &why);
            }
        };
        let accepted = |d| ReplyHeader::accepted(xid, OpaqueAuth::NONE, d);
        let nprocs = match hdr.prog {
            NFS_PROGRAM => NFSPROC3_COUNT,
            MOUNT_PROGRAM => MOUNTPROC3_COUNT,
            _ => {
                st.stats.rpc_errors += 1;
                return reply_header(reply, &accepted(AcceptedReply::ProgUnavail));
            }
        };
        // MOUNT v1 and v2 share NULL, DUMP, UMNT, UMNTALL and EXPORT with v3,
        // byte for byte (RFC 1813 appendix I); `showmount` asks v1. Their MNT
        // (a fixed 32-byte handle) is not served. NFS is versions 3 and 4.
        let (low, high) = if hdr.prog == NFS_PROGRAM {
            (NFS_V3, NFS_V4)
        } else {
            (MOUNT_V1, MOUNT_V3)
        };
        if !(low..=high).contains(&hdr.vers) {
            st.stats.rpc_errors += 1;
            return reply_header(reply, &accepted(AcceptedReply::ProgMismatch { low, high }));
        }
        let v4 = hdr.prog == NFS_PROGRAM && hdr.vers == NFS_V4;
        let nprocs = if v4 { NFSPROC4_COUNT } else { nprocs };
        let old_mnt = hdr.prog == MOUNT_PROGRAM && hdr.vers != MOUNT_V3 && hdr.proc_ == p::MOUNTPROC3_MNT;
        if hdr.proc_ >= nprocs || old_mnt {
            st.stats.rpc_errors += 1;
            return reply_header(reply, &accepted(AcceptedReply::ProcUnavail));
        }
        let count = |st: &mut CoreState| {
            if v4 {
                // Counted by the NFSv4 service.
            } else if hdr.prog == NFS_PROGRAM {
                st.stats.nfs[hdr.proc_ as usize] += 1;
            } else {
                st.stats.mount[hdr.proc_ as usize] += 1;
            }
        };
        // NULL takes any credential but RPCSEC_GSS (which we do not speak)
        // and uses none, so its credential is not parsed.
        if hdr.proc_ == 0 && hdr.cred.flavor != rpc::RPCSEC_GSS {
            count(st);
            let n = rpc::encode_success_reply_none(xid, reply.head_mut()).ok_or(ServiceError::Reject)?;
            reply.set_head_len(n);
            return Ok(());
        }
        let cred = match credential(&hdr) {
            Ok(c) => c,
            Err(why) => {
                st.stats.rpc_errors += 1;
                st.stats.auth_errors += 1;
                return reply_header(reply, &ReplyHeader::denied(xid, RejectedReply::AuthError(why)));
            }
        };
        if v4 {
            // COMPOUND (RFC 8881 s16.2): sessions give it exactly-once
            // semantics, so the reply cache below is not used.
            if let Some(f) = st.offload.resumed_for(call.defer_token()) {
                // The helper pool ran it whole: its reply.
                st.v4.compounds += 1;
                let n = rpc::encode_success_reply_none(xid, reply.head_mut()).ok_or(ServiceError::Reject)?;
                return match offload::results(f, reply, n) {
                    Ok(k) => {
                        reply.set_head_len(n + k);
                        Ok(())
                    }
                    Err(_) => {
                        st.stats.rpc_errors += 1;
                        reply_header(reply, &accepted(AcceptedReply::SystemErr))
                    }
                };
            }
            if offload::wanted_v4(shared, st, call, at) {
                let token = call.defer_token().ok_or(ServiceError::Reject)?;
                let cap = reply.head_mut().len();
                let (h, args) = head.split_at(at);
                st.offload.submit(shared, token, h, args, call.peer, cap, None);
                st.deferred.submit_to_pool(token, reply);
                st.stats.offloaded += 1;
                return Ok(());
            }
            return crate::nfs4::call(shared, st, scratch, call, xid, at, cred, reply);
        }
        // The arguments: in the head when the Call is one piece, and for WRITE
        // (whose data piece is used where it lies); otherwise reassembled.
        let mut slices = call.slices();
        let first = slices.next().unwrap_or(&[]);
        let second = slices.next();
        let one_piece = second.is_none();
        let is_write = hdr.prog == NFS_PROGRAM && hdr.proc_ == p::NFSPROC3_WRITE;
        let (args, tail): (&[u8], Option<&[u8]>) = if one_piece || is_write {
            (first.get(at..).unwrap_or(&[]), second)
        } else {
            let n = call.len();
            if n > MAX_ASSEMBLED_CALL_BYTES {
                st.stats.rpc_errors += 1;
                st.stats.garbage_args += 1;
                return reply_header(reply, &accepted(AcceptedReply::GarbageArgs));
            }
            scratch.resize(n, 0);
            call.copy_to(scratch);
            (scratch.get(at..n).unwrap_or(&[]), None)
        };
        let c = Call {
            proc_: hdr.proc_,
            cred,
            peer: call.peer,
            args,
            tail,
            token: call.defer_token(),
        };
        // A retransmit of a non-idempotent Call gets the reply the first one
        // got, and one still being served is dropped (RFC 1813 section 4.5;
        // see [`drc`]).
        let mut slot = None;
        // A Call the helper pool ran: its results, and the cache entry it
        // kept in progress meanwhile.
        let pooled = st.offload.resumed_for(c.token);
        if let Some(f) = &pooled {
            slot = st.offload.take_drc_slot(f.token());
        } else if hdr.prog == NFS_PROGRAM && drc::nfs3_cached(hdr.proc_) {
            let key = drc::Key::new(xid, call.peer, hdr.prog, hdr.vers, hdr.proc_, args, call.len());
            let head = reply.head_mut();
            let found = drc.with(|c| match c.begin(&key) {
                Lookup::Hit(r) => head.get_mut(..r.len()).map(|h| {
                    h.copy_from_slice(r);
                    Ok(r.len())
                }),
                Lookup::InProgress => None,
                Lookup::Miss(s) => Some(Err(Some(s))),
                Lookup::NoRoom => Some(Err(None)),
            });
            match found {
                Some(Ok(n)) => {
                    count(st);
                    reply.set_head_len(n);
                    return Ok(());
                }
                Some(Err(s)) => slot = s,
                None => {
                    st.stats.dropped += 1;
                    return Err(ServiceError::Drop);
                }
            }
        }
        let res = {
            // The SUCCESS header; the procedures write after it.
            match rpc::encode_success_reply_none(xid, reply.head_mut()) {
                Some(REPLY_HEADER_BYTES) => {
                    if let Some(mut f) = pooled {
                        match f.opened.take() {
                            // The file this Call's I/O needs was opened on
                            // the pool: the channel adopts it, and the Call
                            // runs here.
                            Some((bi, fh, opened)) => {
                                if let (Some(ch), Ok(Some(file))) = (st.channels.get_mut(bi), opened) {
                                    ch.adopt(&fh, file);
                                }
                                st.offload.opened_for = c.token;
                                nfs3::call(shared, st, &c, reply, REPLY_HEADER_BYTES)
                            }
                            None => offload::results(f, reply, REPLY_HEADER_BYTES),
                        }
                    } else if offload::wanted(shared, st, hdr.prog, &c) {
                        let token = c.token.ok_or(ServiceError::Reject)?;
                        let cap = reply.head_mut().len();
                        st.offload.submit(
                            shared,
                            token,
                            head.get(..at).unwrap_or(&[]),
                            args,
                            c.peer,
                            cap,
                            slot.take(),
                        );
                        st.deferred.submit_to_pool(token, reply);
                        st.stats.offloaded += 1;
                        Ok(0)
                    } else if hdr.prog == NFS_PROGRAM {
                        nfs3::call(shared, st, &c, reply, REPLY_HEADER_BYTES)
                    } else {
                        mount::call(shared, &c, reply, REPLY_HEADER_BYTES)
                    }
                }
                _ => Err(Fail::System),
            }
        };
        // A Call held for a recall: deferred here, or NFS3ERR_JUKEBOX.
        let res = match res {
            Err(Fail::Recalled(file, kind)) => match c.token {
                // Not a READ whose data buffer may be the requester's memory.
                Some(_) if data_in_call.get() && reply.data_capacity() > 0 => Err(Fail::Nfs(p::NFS3ERR_JUKEBOX)),
                Some(t) if st.delegwait.hold(&shared.v4, t, (file, kind), &mut st.deferred, reply) => Ok(0),
                _ => Err(Fail::Nfs(p::NFS3ERR_JUKEBOX)),
            },
            r => r,
        };
        // Replies with an NFS result (success or an nfsstat3) are kept;
        // RPC-level errors such as SYSTEM_ERR may not recur and are not.
        let keep = matches!(res, Ok(_) | Err(Fail::Nfs(_)));
        let out = match res {
            // Counted when it is resumed and answered.
            Ok(_) if reply.is_deferred() => Ok(()),
            Ok(n) => {
                count(st);
                reply.set_head_len(REPLY_HEADER_BYTES + n);
                Ok(())
            }
            Err(Fail::Nfs(status)) if hdr.prog == NFS_PROGRAM => {
                count(st);
                let n = {
                    let mut w = Writer::new(&mut reply.head_mut()[REPLY_HEADER_BYTES..]);
                    nfs3::empty_failure(&mut w, hdr.proc_, status).map(|_| w.len())
                };
                match n {
                    Ok(n) => {
                        reply.set_head_len(REPLY_HEADER_BYTES + n);
                        Ok(())
                    }
                    Err(_) => Err(ServiceError::Reject),
                }
            }
            // Not counted: the engine runs the Call again.
            Err(Fail::Busy) => Err(ServiceError::Busy),
            Err(f) => {
                st.stats.rpc_errors += 1;
                let h = match f {
                    Fail::Garbage => {
                        st.stats.garbage_args += 1;
                        accepted(AcceptedReply::GarbageArgs)
                    }
                    Fail::Auth(why) => {
                        st.stats.auth_errors += 1;
                        ReplyHeader::denied(xid, RejectedReply::AuthError(why))
                    }
                    Fail::Nfs(_) | Fail::System | Fail::Busy | Fail::Recalled(..) => accepted(AcceptedReply::SystemErr),
                };
                reply_header(reply, &h)
            }
        };
        if let Some(s) = slot {
            let n = reply.head_len();
            let kept = (keep && out.is_ok() && !reply.is_deferred()).then(|| &reply.head_mut()[..n]);
            drc.with(|c| c.complete(s, kept));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proto::xdr::Reader;

    /// What the hint was before [`read_count`]: the header and READ3args
    /// decoded in full.
    fn read_count_by_decoding(head: &[u8]) -> Option<u32> {
        let (hdr, at) = CallHeader::decode(head).ok()?;
        if (hdr.prog, hdr.vers, hdr.proc_) != (NFS_PROGRAM, NFS_V3, p::NFSPROC3_READ) {
            return None;
        }
        let mut r = Reader::new(head.get(at..)?);
        p::Read3Args::decode(&mut r).ok().map(|a| a.count)
    }

    fn be(w: u32) -> [u8; 4] {
        w.to_be_bytes()
    }

    /// A READ Call with the given parts, each length word as given (the body
    /// is `body_len` bytes, padded), then `tail` extra bytes.
    #[allow(clippy::too_many_arguments)]
    fn call(
        words: [u32; 6],
        cred: (u32, u32, usize),
        verf: (u32, u32, usize),
        fh: (u32, usize),
        offset: u64,
        count: u32,
        tail: usize,
    ) -> Vec<u8> {
        let mut b = Vec::new();
        for w in words {
            b.extend_from_slice(&be(w));
        }
        for (flavor, len, body) in [cred, verf] {
            b.extend_from_slice(&be(flavor));
            b.extend_from_slice(&be(len));
            b.extend(std::iter::repeat_n(7u8, (body + 3) & !3));
        }
        b.extend_from_slice(&be(fh.0));
        b.extend(std::iter::repeat_n(9u8, (fh.1 + 3) & !3));
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&be(count));
        b.extend(std::iter::repeat_n(0u8, tail));
        b
    }

    #[test]
    fn read_count_of_a_read_call() {
        let words = [1, rpc::CALL, rpc::RPC_VERSION, NFS_PROGRAM, NFS_V3, p::NFSPROC3_READ];
        let c = call(words, (1, 20, 20), (0, 0, 0), (36, 36), 4096, 8192, 0);
        assert_eq!(read_count(&c), Some(8192));
        // Cut anywhere: no count.
        for n in 0..c.len() {
            assert_eq!(read_count(&c[..n]), None, "cut at {n}");
        }
        // Another procedure, program, version or message type: none.
        for (i, v) in [
            (1, rpc::REPLY),
            (2, 3),
            (3, MOUNT_PROGRAM),
            (4, 4),
            (5, p::NFSPROC3_WRITE),
        ] {
            let mut w = words;
            w[i] = v;
            assert_eq!(read_count(&call(w, (1, 20, 20), (0, 0, 0), (36, 36), 0, 1, 0)), None);
        }
        // Bounds: a 400-byte credential and a 64-byte handle are fine, one
        // more is not.
        assert_eq!(
            read_count(&call(words, (1, 400, 400), (0, 0, 0), (64, 64), 0, 5, 0)),
            Some(5)
        );
        assert_eq!(
            read_count(&call(words, (1, 401, 404), (0, 0, 0), (64, 64), 0, 5, 0)),
            None
        );
        assert_eq!(
            read_count(&call(words, (1, 4, 4), (0, 401, 404), (64, 64), 0, 5, 0)),
            None
        );
        assert_eq!(read_count(&call(words, (1, 4, 4), (0, 0, 0), (65, 68), 0, 5, 0)), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// The word-offset hint and the full decode agree on well-formed and
        /// malformed Calls alike: lengths near their bounds, bodies shorter
        /// or longer than their length words say, truncation, and random
        /// header words.
        #[test]
        fn read_count_agrees_with_decoding(
            xid in any::<u32>(),
            mtype in prop_oneof![8 => Just(rpc::CALL), 1 => Just(rpc::REPLY), 1 => any::<u32>()],
            rpcvers in prop_oneof![8 => Just(rpc::RPC_VERSION), 1 => Just(1u32)],
            prog in prop_oneof![8 => Just(NFS_PROGRAM), 1 => Just(MOUNT_PROGRAM)],
            vers in prop_oneof![8 => Just(NFS_V3), 1 => Just(2u32)],
            proc_ in prop_oneof![8 => Just(p::NFSPROC3_READ), 1 => 0u32..22],
            cred_len in prop_oneof![4 => 0u32..=8, 4 => 396u32..=404, 1 => any::<u32>()],
            cred_body_delta in prop_oneof![4 => Just(0i64), 1 => -4i64..=4],
            verf_len in prop_oneof![0u32..=8, 396u32..=404],
            verf_body_delta in prop_oneof![4 => Just(0i64), 1 => -4i64..=4],
            fh_len in prop_oneof![4 => 0u32..=8, 4 => 60u32..=68, 1 => any::<u32>()],
            fh_body_delta in prop_oneof![4 => Just(0i64), 1 => -4i64..=4],
            offset in any::<u64>(),
            count in any::<u32>(),
            tail in 0usize..8,
            cut in any::<prop::sample::Index>(),
            do_cut in prop::bool::weighted(0.2),
        ) {
            let body = |len: u32, d: i64| (i64::from(len.min(404)) + d).max(0) as usize;
            let c = call(
                [xid, mtype, rpcvers, prog, vers, proc_],
                (rpc::AUTH_SYS, cred_len, body(cred_len, cred_body_delta)),
                (rpc::AUTH_NONE, verf_len, body(verf_len, verf_body_delta)),
                (fh_len, body(fh_len, fh_body_delta)),
                offset,
                count,
                tail,
            );
            let c = if do_cut { &c[..cut.index(c.len() + 1)] } else { &c[..] };
            prop_assert_eq!(read_count(c), read_count_by_decoding(c));
        }
    }
}
