//! A whole run: options, setup (MOUNT, LOOKUP/CREATE, fill), the worker
//! threads (one per client core, pinned), warm-up, measured time, the
//! read-back check, and the result. Called from the main thread.
//!
//! Timing: every worker connects first; then all start together. Calls sent
//! in the warm-up are not measured; a Call is measured when it was sent (or,
//! open loop, intended) at or after the end of the warm-up and finished by
//! the end of the measured time (duration mode). In count mode (`--count N`)
//! the first N measured Calls (split evenly over the connections) are
//! measured and the time is from the end of the warm-up to the last of them.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

use proto::nfs3::{NFS3ERR_NOENT, NFSPROC3_CREATE, NFSPROC3_GETATTR, NFSPROC3_LOOKUP, NFS_PROGRAM, NFS_V3};
use proto::ulb::Nfs3Binding;

use crate::cpu::{CpuSample, CpuUse};
use crate::engine::{
    self, Clock, FabricMaker, NfsCaller, NfsFile, OpKind, Pools, Progress, Recorder, Session, ShmMaker, WorkerPlan,
    Workload,
};
use crate::hdrlog::Interval;
use crate::nfs::{self, Cred};
use crate::stats::{LatencyHist, RunResult};
use crate::tcp::{self, MountTarget};
use crate::{raw, PerfError};

/// Fabric providers the CLI offers (`sim` is in-process only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricKind {
    Shm,
    Verbs,
    /// Not a fabric: ONC RPC over TCP with record marking (RFC 5531 s11)
    /// to the NFS TCP port (`--transport tcp`), for comparing the same
    /// target's two transports ([`crate::tcpload`]).
    Tcp,
}

impl FabricKind {
    /// `dataplane::default_provider()`: verbs when an RDMA device is listed.
    pub fn default_kind() -> Self {
        match dataplane::default_provider() {
            dataplane::ProviderKind::Verbs => FabricKind::Verbs,
            _ => FabricKind::Shm,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            FabricKind::Shm => "shm",
            FabricKind::Verbs => "verbs",
            FabricKind::Tcp => "tcp",
        }
    }
    /// The target address when none is given: rpcrdma-target's shm socket
    /// (configs/cores.json), or port 20049 on the loopback for verbs.
    pub fn default_target(&self) -> &'static str {
        match self {
            FabricKind::Shm => "/tmp/rpcrdma/fabric.sock",
            FabricKind::Verbs => "127.0.0.1:20049",
            FabricKind::Tcp => "127.0.0.1:2049",
        }
    }
}

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Rpc(OpKind),
    /// The fabric ping-pong. `loopback`: start the echo side in this process
    /// on `echo_cpu`. `touch`: each side reads every message it receives
    /// (see [`crate::raw`]; for a remote echo side, `perf raw --serve
    /// --touch` sets its half).
    Raw {
        loopback: bool,
        echo_cpu: Option<usize>,
        touch: bool,
    },
}

/// NFS options (read, write, mixed).
#[derive(Clone, Debug)]
pub struct NfsOptions {
    pub mount: MountTarget,
    pub export: String,
    pub file: String,
    pub create: bool,
    pub file_size: u64,
    pub seq: bool,
    pub stable: u32,
    /// A COMMIT after every this many bytes written per connection (0: none).
    pub commit_every: u64,
    pub salt: u64,
    /// UMNT at the end.
    pub unmount: bool,
}

/// Authentication of the Calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys { uid: u32, gid: u32 },
}

/// The options of a run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub mode: Mode,
    pub fabric: FabricKind,
    pub target: String,
    /// RPC-over-RDMA version (1 or 2).
    pub version: u32,
    /// I/O size (READ/WRITE), message size (raw); ignored by NULL.
    pub size: u32,
    pub qd: u32,
    pub conns: u32,
    pub cores: Vec<usize>,
    pub duration: Duration,
    pub count: Option<u64>,
    pub warmup: Duration,
    /// Open loop: Calls per second per connection.
    pub rate: Option<f64>,
    pub ddp: bool,
    pub verify: bool,
    /// `--verify-only` (reads): check the file's content against the pattern
    /// without writing it first, then read every block back and check it.
    /// Implies [`RunConfig::verify`].
    pub verify_only: bool,
    pub auth: Auth,
    pub seed: u64,
    pub nfs: Option<NfsOptions>,
    /// Progress line on stderr every second.
    pub progress: bool,
    pub timeout: Duration,
    /// After this many consecutive poll turns that completed nothing, a
    /// worker sleeps [`RunConfig::idle_sleep_us`] per further idle turn. For
    /// hosts where busy polling starves the fabric itself (Soft-RoCE under
    /// emulation); 0 = always spin (the default: sleeping adds latency).
    pub idle_sleep_us: u32,
    /// Yield the CPU instead (after the same idle turns; `--idle-yield`).
    pub idle_yield: bool,
    /// Block until a completion arrives instead (after the same idle
    /// turns; `--idle-wait`; see `engine::IdleWait`). Takes precedence.
    pub idle_wait: bool,
    /// The target's process id: its CPU time over the measured window is
    /// reported next to perf's own ([`crate::cpu`]).
    pub target_pid: Option<u32>,
    /// NFSv4.1 COMPOUNDs instead of NFSv3 (`--nfs 4.1`): sessions set up
    /// first, then SEQUENCE + PUTFH + READ/WRITE per Call, or SEQUENCE
    /// alone for NULL.
    pub nfs41: bool,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunOutput {
    pub result: RunResult,
    pub hist: LatencyHist,
    pub intervals: Vec<Interval>,
    /// Wall-clock time of the start of the measured time.
    pub base_time: SystemTime,
    /// `--verify` with writes, or `--verify-only`: blocks read back and
    /// checked after the run.
    pub verified_blocks: Option<u64>,
    /// A connection to the target was lost: the run stopped at once and no
    /// read-back check was made.
    pub target_lost: bool,
    /// The requesters' counters, summed over the connections (RPC runs).
    pub transport: dataplane::requester::RequesterStats,
    /// How often the workers blocked for a completion (`--idle-wait`).
    pub idle_waits: u64,
    /// How many of those blocks a ready descriptor ended.
    pub idle_wakes: u64,
    /// Call-nanoseconds the connections were short of their queue depth in
    /// the measured time, by reason (`engine::HeldBack`; closed-loop RPC
    /// runs over a fabric).
    pub held_back_ns: [u64; 3],
}

/// Most connections of a run.
pub const MAX_CONNS: u32 = 256;
/// Most Calls per connection (credits).
pub const MAX_QD: u32 = 128;

impl RunConfig {
    /// Check the options against each other.
    pub fn validate(&self) -> Result<(), PerfError> {
        let bad = |s: String| Err(PerfError::Option(s));
        if !(1..=2).contains(&self.version) {
            return bad(format!("--vers {}: 1 or 2", self.version));
        }
        if self.qd == 0 || self.qd > MAX_QD {
            return bad(format!("--qd {}: 1..={MAX_QD}", self.qd));
        }
        if self.conns == 0 || self.conns > MAX_CONNS {
            return bad(format!("--conns {}: 1..={MAX_CONNS}", self.conns));
        }
        if self.cores.is_empty() {
            return bad("--cores: at least one CPU".into());
        }
        if self.count == Some(0) {
            return bad("--count 0".into());
        }
        if self.count.is_none() && self.duration.is_zero() {
            return bad("--duration 0".into());
        }
        if let Some(r) = self.rate {
            if !(r > 0.0 && r.is_finite() && r <= 1e9) {
                return bad(format!("--rate {r}: a positive number of Calls per second"));
            }
        }
        if self.nfs41 {
            if self.nfs.as_ref().is_some_and(|n| n.commit_every > 0) {
                return bad("--nfs 4.1 with --commit-every: not built".into());
            }
            if self.verify_only {
                return bad("--nfs 4.1 with --verify-only: not built".into());
            }
            if matches!(self.mode, Mode::Raw { .. }) {
                return bad("--nfs 4.1: an NFS load".into());
            }
        }
        match self.mode {
            Mode::Raw { .. } => {
                if self.size == 0 || self.size > raw::MAX_SIZE {
                    return bad(format!("--size {}: 1..={} for raw", self.size, raw::MAX_SIZE));
                }
                if self.rate.is_some() {
                    return bad("--rate is not supported by raw (closed loop only)".into());
                }
                if self.conns > raw::ECHO_SLOTS {
                    return bad(format!(
                        "--conns {}: raw serves at most {}",
                        self.conns,
                        raw::ECHO_SLOTS
                    ));
                }
            }
            Mode::Rpc(OpKind::Null { .. }) => {}
            Mode::Rpc(k) => {
                if self.size == 0 || self.size > proto::ulb::NFS3_DEFAULT_MAX_IO_BYTES {
                    return bad(format!(
                        "--size {}: 1..={} for NFS READ/WRITE",
                        self.size,
                        proto::ulb::NFS3_DEFAULT_MAX_IO_BYTES
                    ));
                }
                let Some(n) = &self.nfs else {
                    return bad("NFS options missing".into());
                };
                if n.file_size < self.size as u64 {
                    return bad(format!("--file-size {} is below the I/O size", n.file_size));
                }
                if self.verify_only && k != OpKind::Read {
                    return bad("--verify-only checks without writing: use it with read".into());
                }
                if (self.verify || self.verify_only) && n.file_size / (self.size as u64) > 1 << 28 {
                    return bad("--verify tracks every block: --file-size / --size must stay below 2^28".into());
                }
                if let OpKind::Mixed { read_pct } = k {
                    if read_pct > 100 {
                        return bad(format!("--read-pct {read_pct}: 0..=100"));
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn cred(&self) -> Result<Cred, PerfError> {
        match self.auth {
            Auth::None => Ok(Cred::none()),
            Auth::Sys { uid, gid } => {
                Cred::sys(&nfs::machine_name(), uid, gid).map_err(|e| PerfError::Option(format!("AUTH_SYS: {e}")))
            }
        }
    }

    /// The connections of worker `w` (round-robin over the cores).
    pub(crate) fn worker_conns(&self, w: usize, workers: usize) -> Vec<u32> {
        (0..self.conns).filter(|c| *c as usize % workers == w).collect()
    }

    /// Count mode: measured operations of each connection.
    pub(crate) fn quota(&self, conn: u32) -> Option<u64> {
        self.count.map(|n| {
            let c = self.conns as u64;
            n / c + u64::from((conn as u64) < n % c)
        })
    }
}

/// Run with the configured fabric.
pub fn run(cfg: &RunConfig) -> Result<RunOutput, PerfError> {
    cfg.validate()?;
    match cfg.fabric {
        FabricKind::Shm => run_with(&shm_maker(reads_messages(cfg.mode)), cfg),
        #[cfg(feature = "verbs")]
        FabricKind::Verbs => run_with(&engine::VerbsMaker::default(), cfg),
        #[cfg(not(feature = "verbs"))]
        FabricKind::Verbs => Err(PerfError::Option("this build has no verbs provider".into())),
        FabricKind::Tcp => match cfg.mode {
            Mode::Rpc(kind) => crate::tcpload::run_tcp(cfg, kind),
            Mode::Raw { .. } => Err(PerfError::Option("raw runs over a fabric, not TCP".into())),
        },
    }
}

/// Shared between the main thread and the workers.
pub(crate) struct Shared {
    connected: Barrier,
    go: Barrier,
    pub(crate) start_ns: AtomicU64,
    pub(crate) abort: AtomicBool,
    pub(crate) finished: AtomicUsize,
    pub(crate) progress: Vec<Progress>,
    pub(crate) errors: Mutex<Vec<PerfError>>,
}

impl Shared {
    pub(crate) fn new(workers: usize) -> Self {
        Shared {
            connected: Barrier::new(workers + 1),
            go: Barrier::new(workers + 1),
            start_ns: AtomicU64::new(0),
            abort: AtomicBool::new(false),
            finished: AtomicUsize::new(0),
            progress: (0..workers).map(|_| Progress::default()).collect(),
            errors: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn fail(&self, e: PerfError) {
        self.abort.store(true, Ordering::Relaxed);
        if let Ok(mut v) = self.errors.lock() {
            v.push(e);
        }
    }

    /// Worker side of the start: report setup done (or failed), wait for the
    /// start time. `None` when the run is aborted.
    pub(crate) fn wait_start(&self) -> Option<u64> {
        self.connected.wait();
        self.go.wait();
        // Acquire pairs with the main thread's Release store before `go`.
        (!self.abort.load(Ordering::Acquire)).then(|| self.start_ns.load(Ordering::Acquire))
    }
}

/// Counts a worker as finished when it returns, whichever way.
pub(crate) struct Finished<'a>(pub(crate) &'a AtomicUsize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        // Release pairs with the main thread's Acquire load in the watch loop.
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// Whether a run's receivers read the messages they receive: the RPC
/// engines decode every Call and Reply; the raw ping-pong only with `touch`.
fn reads_messages(mode: Mode) -> bool {
    match mode {
        Mode::Rpc(_) => true,
        Mode::Raw { touch, .. } => touch,
    }
}

/// The shm provider as the run's receivers are best served: receive buffers
/// prefetched when a delivery is seen if they read their messages
/// ([`dataplane::shm::ShmConfig::recv_prefetch_bytes`]), not otherwise.
fn shm_maker(reads: bool) -> ShmMaker {
    ShmMaker(if reads {
        dataplane::shm::ShmConfig::for_rpc_engine()
    } else {
        dataplane::shm::ShmConfig::default()
    })
}

/// Run with the provider `maker` makes.
pub fn run_with<M: FabricMaker>(maker: &M, cfg: &RunConfig) -> Result<RunOutput, PerfError> {
    cfg.validate()?;
    match cfg.mode {
        Mode::Raw {
            loopback,
            echo_cpu,
            touch,
        } => run_raw(maker, cfg, loopback, echo_cpu, touch),
        Mode::Rpc(kind) => run_rpc(maker, cfg, kind),
    }
}

pub(crate) fn workers_of(cfg: &RunConfig) -> usize {
    cfg.cores.len().min(cfg.conns as usize)
}

fn run_rpc<M: FabricMaker>(maker: &M, cfg: &RunConfig, kind: OpKind) -> Result<RunOutput, PerfError> {
    let is_nfs = !matches!(kind, OpKind::Null { .. });
    let io_size = if is_nfs { cfg.size } else { 0 };
    // One cache slot per connection, plus one for the setup / check session.
    let mut depths = vec![cfg.qd; cfg.conns as usize];
    depths.push(engine::SESSION_DEPTH);
    let pools = Pools::new(&depths, Pools::data_bytes_for(io_size))?;
    let session_slot = cfg.conns as usize;
    let mut wl = Workload {
        kind,
        cred: cfg.cred()?,
        io_size,
        file: None,
        seq: cfg.nfs.as_ref().is_some_and(|n| n.seq),
        verify: cfg.verify || cfg.verify_only,
        salt: cfg.nfs.as_ref().map_or(0, |n| n.salt),
        stable: cfg.nfs.as_ref().map_or(0, |n| n.stable),
        commit_every: cfg.nfs.as_ref().map_or(0, |n| n.commit_every),
        binding: Nfs3Binding::new(io_size.max(1)),
        v4: None,
    };
    if cfg.nfs41 {
        let mut s = session(maker, &pools, session_slot, cfg)?;
        let r = crate::nfs4setup::setup(&mut s, &mut wl, cfg);
        s.close();
        r?;
    } else if is_nfs {
        let n = cfg
            .nfs
            .as_ref()
            .ok_or_else(|| PerfError::Option("NFS options missing".into()))?;
        let root = tcp::mount(&n.mount, &n.export, &wl.cred)?;
        let mut s = session(maker, &pools, session_slot, cfg)?;
        let r = prepare_file(&mut s, &wl, cfg, n, &root);
        s.close();
        wl.file = Some(r?);
    }
    let clock = Clock::start();
    let connect = |c: u32| {
        engine::connect(
            maker,
            &pools,
            c as usize,
            &cfg.target,
            cfg.version,
            cfg.qd,
            cfg.ddp,
            cfg.timeout,
        )
    };
    let work = |reqs, plan: &WorkerPlan, start_ns, end_ns, progress: &Progress, abort: &AtomicBool| {
        engine::run_worker(reqs, plan, &wl, clock, start_ns, end_ns, cfg.timeout, progress, abort)
    };
    let (outs, cpu, start_ns) = drive_workers(cfg, clock, cfg.idle_sleep_us, connect, work)?;
    let (mut rec, mut written, transport, lost) = merge_outs(&outs, start_ns);
    let verified = check_back(cfg, &wl, kind, lost, &mut written, &mut rec, |written| {
        let mut s = session(maker, &pools, session_slot, cfg)?;
        let r = engine::verify_blocks(&mut s, &wl, written);
        s.close();
        r
    });
    if let Some(n) = cfg.nfs.as_ref().filter(|n| n.unmount && is_nfs && !lost) {
        // Informational on the server; a failure does not change the result.
        let _ = tcp::unmount(&n.mount, &n.export, &wl.cred);
    }
    let version = cfg.version;
    let mut out = finish(
        cfg,
        kind.name(),
        maker.name(),
        version,
        io_size as u64,
        rec,
        clock,
        verified,
        &cpu,
    );
    out.transport = transport;
    out.target_lost = lost;
    out.idle_waits = outs.iter().flatten().map(|o| o.idle_waits).sum();
    out.idle_wakes = outs.iter().flatten().map(|o| o.idle_wakes).sum();
    for o in outs.iter().flatten() {
        for (t, v) in out.held_back_ns.iter_mut().zip(o.held_back_ns) {
            *t += v;
        }
    }
    if cfg.rate.is_none() {
        out.result.held_back_pct = crate::stats::HeldBackPct::of(
            out.held_back_ns,
            out.result.queue_depth,
            out.result.connections,
            out.result.duration_s,
        );
    }
    Ok(out)
}

fn add_stats(a: &mut dataplane::requester::RequesterStats, b: &dataplane::requester::RequesterStats) {
    a.calls += b.calls;
    a.replies += b.replies;
    a.short_calls += b.short_calls;
    a.chunked_calls += b.chunked_calls;
    a.long_calls += b.long_calls;
    a.transport_errors += b.transport_errors;
    a.bad_replies += b.bad_replies;
    a.unmatched += b.unmatched;
    a.wc_errors += b.wc_errors;
    a.fallbacks_to_v1 += b.fallbacks_to_v1;
}

/// CPU readings at the start and the end of the measured time.
pub(crate) type CpuWindow = (CpuSample, CpuSample);

/// Run the load's workers, one thread per CPU of `cfg.cores` (at most one
/// per connection): each pins itself, makes its connections (`connect`,
/// by global index), waits for the others, runs `work` over them for the
/// measured window and hands back its output, while this thread starts
/// them together and watches the CPU. The same for every transport (the
/// fabric's requesters, TCP sockets). Returns the outputs (`None` for a
/// worker that failed), the CPU window and when the measured window began,
/// or the first worker's error. Main thread.
pub(crate) fn drive_workers<C>(
    cfg: &RunConfig,
    clock: Clock,
    idle_sleep_us: u32,
    connect: impl Fn(u32) -> Result<C, PerfError> + Sync,
    work: impl Fn(Vec<C>, &WorkerPlan, u64, u64, &Progress, &AtomicBool) -> Result<engine::WorkerOut, PerfError> + Sync,
) -> Result<(Vec<Option<engine::WorkerOut>>, CpuWindow, u64), PerfError> {
    let workers = workers_of(cfg);
    let shared = Shared::new(workers);
    let (outs, cpu) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (shared, connect, work) = (&shared, &connect, &work);
                let cpu = cfg.cores[w];
                sc.spawn(move || -> Option<engine::WorkerOut> {
                    let _done = Finished(&shared.finished);
                    let plan = WorkerPlan {
                        conns: cfg.worker_conns(w, workers),
                        total_conns: cfg.conns,
                        qd: cfg.qd,
                        rate: cfg.rate,
                        seed: cfg.seed,
                        idle_sleep_us,
                        idle_yield: cfg.idle_yield,
                        idle_wait: cfg.idle_wait,
                        quotas: cfg.count.map(|_| {
                            cfg.worker_conns(w, workers)
                                .iter()
                                .map(|&c| cfg.quota(c).unwrap_or(0))
                                .collect()
                        }),
                    };
                    let setup = crate::pin_to_cpu(cpu)
                        .and_then(|()| plan.conns.iter().map(|&c| connect(c)).collect::<Result<Vec<_>, _>>());
                    let conns = match setup {
                        Ok(r) => r,
                        Err(e) => {
                            shared.fail(e);
                            shared.wait_start();
                            return None;
                        }
                    };
                    let start = shared.wait_start();
                    let out = match start {
                        Some(s0) => {
                            let start_ns = s0 + cfg.warmup.as_nanos() as u64;
                            let end_ns = match cfg.count {
                                Some(_) => u64::MAX,
                                None => start_ns + cfg.duration.as_nanos() as u64,
                            };
                            work(conns, &plan, start_ns, end_ns, &shared.progress[w], &shared.abort)
                        }
                        None => {
                            drop(conns);
                            Err(PerfError::Other("aborted".into()))
                        }
                    };
                    match out {
                        Ok(o) => Some(o),
                        Err(e) => {
                            if start.is_some() {
                                shared.fail(e);
                            }
                            None
                        }
                    }
                })
            })
            .collect();
        let cpu = start_and_watch(&shared, clock, cfg, workers);
        (handles.into_iter().map(|h| h.join().unwrap_or(None)).collect(), cpu)
    });
    if let Some(e) = shared
        .errors
        .into_inner()
        .ok()
        .and_then(|mut v| (!v.is_empty()).then(|| v.remove(0)))
    {
        return Err(e);
    }
    let start_ns = shared.start_ns.load(Ordering::Acquire) + cfg.warmup.as_nanos() as u64;
    Ok((outs, cpu, start_ns))
}

/// The workers' outputs together: the record, the blocks written (for the
/// read-back check), the transport counters, and whether a connection was
/// lost.
pub(crate) fn merge_outs(
    outs: &[Option<engine::WorkerOut>],
    start_ns: u64,
) -> (Recorder, Vec<u64>, dataplane::requester::RequesterStats, bool) {
    let mut rec = Recorder::new(start_ns, u64::MAX);
    let mut written: Vec<u64> = Vec::new();
    let mut transport = dataplane::requester::RequesterStats::default();
    let lost = outs.iter().flatten().any(|o| o.lost);
    for o in outs.iter().flatten() {
        rec.merge(&o.rec);
        for st in &o.stats {
            add_stats(&mut transport, st);
        }
        if written.len() < o.written.len() {
            written.resize(o.written.len(), 0);
        }
        for (a, b) in written.iter_mut().zip(&o.written) {
            *a |= b;
        }
    }
    (rec, written, transport, lost)
}

/// The read-back check after a run, when asked for (`--verify` of a load
/// that writes: the blocks in `written`; `--verify-only`: every block of
/// the file) and the target stayed: `verify` reads them back. Returns the
/// blocks checked (0, and an error counted in `rec`, when the check
/// failed).
pub(crate) fn check_back(
    cfg: &RunConfig,
    wl: &Workload,
    kind: OpKind,
    lost: bool,
    written: &mut Vec<u64>,
    rec: &mut Recorder,
    verify: impl FnOnce(&[u64]) -> Result<u64, PerfError>,
) -> Option<u64> {
    if cfg.verify_only {
        // Every block of the file, not just those the timed READs hit.
        let blocks = wl.file.as_ref().map_or(0, |f| f.size / u64::from(wl.io_size.max(1)));
        *written = vec![0u64; blocks.div_ceil(64) as usize];
        for b in 0..blocks {
            written[(b / 64) as usize] |= 1 << (b % 64);
        }
    }
    if lost {
        if cfg.verify || cfg.verify_only {
            eprintln!("perf: the target went away during the run: no read-back check");
        }
        return None;
    }
    if !(cfg.verify_only || (cfg.verify && kind.writes())) {
        return None;
    }
    match verify(written) {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("perf: read-back check failed: {e}");
            rec.errors += 1;
            Some(0)
        }
    }
}

/// The main thread's part of the start, then the progress line until the
/// workers are done. Reads the CPU times of perf and of the target
/// (`cfg.target_pid`) when the measured time starts and when it ends (or the
/// workers finish, in count mode).
pub(crate) fn start_and_watch(shared: &Shared, clock: Clock, cfg: &RunConfig, workers: usize) -> CpuWindow {
    shared.connected.wait();
    // Release pairs with the workers' Acquire loads after `go`.
    shared.start_ns.store(clock.now_ns(), Ordering::Release);
    shared.go.wait();
    let show = cfg.progress;
    let t0 = Instant::now();
    let measure_at = t0 + cfg.warmup;
    let measure_end = cfg.count.is_none().then(|| measure_at + cfg.duration);
    let mut cpu = (CpuSample::default(), CpuSample::default());
    let mut last_ops = 0u64;
    let mut last_t = t0;
    while shared.finished.load(Ordering::Acquire) < workers {
        let now = Instant::now();
        let next = [
            Some(measure_at).filter(|_| cpu.0.at.is_none()),
            measure_end.filter(|_| cpu.1.at.is_none()),
        ]
        .into_iter()
        .flatten()
        .find(|t| *t >= now);
        let step = next.map_or(Duration::from_millis(50), |t| (t - now).min(Duration::from_millis(50)));
        std::thread::sleep(step);
        let now = Instant::now();
        if cpu.0.at.is_none() && now >= measure_at {
            cpu.0 = CpuSample::now(cfg.target_pid);
        }
        if cpu.1.at.is_none() && measure_end.is_some_and(|e| now >= e) {
            cpu.1 = CpuSample::now(cfg.target_pid);
        }
        if show && last_t.elapsed() >= Duration::from_secs(1) {
            let ops: u64 = shared.progress.iter().map(|p| p.ops.load(Ordering::Relaxed)).sum();
            let errs: u64 = shared.progress.iter().map(|p| p.errors.load(Ordering::Relaxed)).sum();
            let dt = last_t.elapsed().as_secs_f64();
            let phase = if t0.elapsed() < cfg.warmup { "warm-up" } else { "run" };
            eprint!(
                "\r[{:>6.1}s {phase:>7}] ops={ops} iops={:.0} errors={errs}   ",
                t0.elapsed().as_secs_f64(),
                (ops - last_ops) as f64 / dt
            );
            last_ops = ops;
            last_t = Instant::now();
        }
    }
    if cpu.0.at.is_none() {
        cpu.0 = CpuSample::now(cfg.target_pid);
    }
    if cpu.1.at.is_none() {
        cpu.1 = CpuSample::now(cfg.target_pid);
    }
    if show {
        eprintln!();
    }
    cpu
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    cfg: &RunConfig,
    op: &str,
    fabric: &str,
    version: u32,
    size: u64,
    rec: Recorder,
    clock: Clock,
    verified_blocks: Option<u64>,
    cpu: &CpuWindow,
) -> RunOutput {
    let duration_s = match cfg.count {
        Some(_) => (rec.last_ns.saturating_sub(rec.start_ns)) as f64 / 1e9,
        None => cfg.duration.as_secs_f64(),
    };
    let mut result = RunResult::new(
        op, fabric, version, size, cfg.qd, cfg.conns, duration_s, rec.ops, rec.errors, &rec.hist,
    );
    result.cpu = CpuUse::between(&cpu.0, &cpu.1, rec.ops);
    let start = clock.at(rec.start_ns);
    let base_time = SystemTime::now() - start.elapsed();
    let intervals = rec
        .intervals
        .iter()
        .enumerate()
        .map(|(k, h)| Interval {
            start: Duration::from_secs(k as u64),
            length: Duration::from_secs(1).min(Duration::from_secs_f64((duration_s - k as f64).max(0.001))),
            hist: h.clone(),
        })
        .collect();
    RunOutput {
        result,
        hist: rec.hist,
        intervals,
        base_time,
        verified_blocks,
        target_lost: false,
        transport: Default::default(),
        idle_waits: 0,
        idle_wakes: 0,
        held_back_ns: [0; 3],
    }
}

fn session<'p, M: FabricMaker>(
    maker: &M,
    pools: &'p Pools,
    slot: usize,
    cfg: &RunConfig,
) -> Result<Session<'p, M::F>, PerfError> {
    let req = engine::connect(
        maker,
        pools,
        slot,
        &cfg.target,
        cfg.version,
        engine::SESSION_DEPTH,
        cfg.ddp,
        cfg.timeout,
    )?;
    Ok(Session {
        req,
        timeout: cfg.timeout,
    })
}

/// LOOKUP (or CREATE) the file, and fill it when reads need its content.
pub(crate) fn prepare_file<C: NfsCaller>(
    s: &mut C,
    wl: &Workload,
    cfg: &RunConfig,
    n: &NfsOptions,
    root: &[u8],
) -> Result<NfsFile, PerfError> {
    let b = &wl.binding;
    let lookup = |s: &mut C| {
        s.nfs_call(
            b,
            NFSPROC3_LOOKUP,
            |buf| nfs::encode_lookup(buf, 0, &wl.cred, root, &n.file),
            |r, _, xid| nfs::parse_lookup(r, Some(xid)),
        )
    };
    let (fh, attr) = match lookup(s) {
        Ok(x) => x,
        Err(PerfError::Nfs {
            status: NFS3ERR_NOENT, ..
        }) if n.create => {
            s.nfs_call(
                b,
                NFSPROC3_CREATE,
                |buf| nfs::encode_create(buf, 0, &wl.cred, root, &n.file, 0o644),
                |r, _, xid| nfs::parse_create(r, Some(xid)),
            )?;
            lookup(s)?
        }
        Err(PerfError::Nfs {
            status: NFS3ERR_NOENT, ..
        }) => {
            return Err(PerfError::Other(format!(
                "{}/{} does not exist (use --create)",
                n.export, n.file
            )))
        }
        Err(PerfError::Nfs { status, .. }) => return Err(PerfError::Nfs { what: "LOOKUP", status }),
        Err(e) => return Err(e),
    };
    let attr = match attr {
        Some(a) => a,
        None => s.nfs_call(
            b,
            NFSPROC3_GETATTR,
            |buf| nfs::encode_getattr(buf, 0, &wl.cred, &fh),
            |r, _, xid| nfs::parse_getattr(r, Some(xid)),
        )?,
    };
    if attr.ftype != nfs::NF3REG {
        return Err(PerfError::Other(format!("{} is not a regular file", n.file)));
    }
    let size = n.file_size - n.file_size % cfg.size as u64;
    if cfg.verify_only {
        // Check what is there; writing the pattern first would hide any loss.
        if attr.size < size {
            return Err(PerfError::Other(format!(
                "--verify-only: {} holds {} bytes, --file-size asks for {size}",
                n.file, attr.size
            )));
        }
    } else if wl.kind.reads() && (attr.size < size || cfg.verify) {
        engine::fill_file(s, wl, &fh, size, engine::FILL_CHUNK_BYTES.max(cfg.size))?;
    }
    Ok(NfsFile { fh, size })
}

fn run_raw<M: FabricMaker>(
    maker: &M,
    cfg: &RunConfig,
    loopback: bool,
    echo_cpu: Option<usize>,
    touch: bool,
) -> Result<RunOutput, PerfError> {
    let workers = workers_of(cfg);
    let stop = AtomicBool::new(false);
    let addr = if loopback {
        format!("@rpcrdma-perf-raw-{}-{}", std::process::id(), clock_nonce())
    } else {
        cfg.target.clone()
    };
    let shared = Shared::new(workers);
    let clock = Clock::start();
    let (recs, cpu): (Vec<Option<Recorder>>, CpuWindow) = std::thread::scope(|sc| {
        let echo = loopback.then(|| {
            let (listening_tx, listening_rx) = std::sync::mpsc::channel::<()>();
            let (stop, addr) = (&stop, &addr);
            let h = sc.spawn(move || -> Result<u64, PerfError> {
                if let Some(c) = echo_cpu {
                    crate::pin_to_cpu(c)?;
                }
                raw::echo(maker, addr, cfg.size, cfg.qd, stop, touch, || {
                    let _ = listening_tx.send(());
                })
            });
            (h, listening_rx.recv_timeout(cfg.timeout).is_ok())
        });
        let echo_ok = echo.as_ref().is_none_or(|(_, ok)| *ok);
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (shared, addr) = (&shared, &addr);
                let cpu = cfg.cores[w];
                sc.spawn(move || -> Option<Recorder> {
                    let _done = Finished(&shared.finished);
                    let mine = cfg.worker_conns(w, workers);
                    let quotas = cfg
                        .count
                        .map(|_| mine.iter().map(|&c| cfg.quota(c).unwrap_or(0)).collect());
                    let mut started = false;
                    let r = if echo_ok {
                        crate::pin_to_cpu(cpu).and_then(|()| {
                            raw::client(
                                maker,
                                addr,
                                mine.len(),
                                cfg.size,
                                cfg.qd,
                                cfg.timeout,
                                || {
                                    started = true;
                                    let s0 = shared.wait_start().unwrap_or(0);
                                    let start_ns = s0 + cfg.warmup.as_nanos() as u64;
                                    let end_ns = match cfg.count {
                                        Some(_) => u64::MAX,
                                        None => start_ns + cfg.duration.as_nanos() as u64,
                                    };
                                    (clock, start_ns, end_ns)
                                },
                                quotas,
                                &shared.progress[w],
                                &shared.abort,
                                touch,
                            )
                        })
                    } else {
                        Err(PerfError::Other("the loopback echo side did not start".into()))
                    };
                    if !started {
                        if let Err(e) = &r {
                            shared.fail(PerfError::Other(e.to_string()));
                        }
                        shared.wait_start();
                    }
                    match r {
                        Ok(rec) => Some(rec),
                        Err(e) => {
                            if started {
                                shared.fail(e);
                            }
                            None
                        }
                    }
                })
            })
            .collect();
        let cpu = start_and_watch(&shared, clock, cfg, workers);
        let recs = handles.into_iter().map(|h| h.join().unwrap_or(None)).collect();
        stop.store(true, Ordering::Relaxed);
        if let Some((h, _)) = echo {
            match h.join() {
                Ok(Err(e)) => shared.fail(e),
                Err(_) => shared.fail(PerfError::Other("echo thread panicked".into())),
                Ok(Ok(_)) => {}
            }
        }
        (recs, cpu)
    });
    if let Some(e) = shared
        .errors
        .into_inner()
        .ok()
        .and_then(|mut v| (!v.is_empty()).then(|| v.remove(0)))
    {
        return Err(e);
    }
    let start_ns = shared.start_ns.load(Ordering::Acquire) + cfg.warmup.as_nanos() as u64;
    let mut rec = Recorder::new(start_ns, u64::MAX);
    for r in recs.iter().flatten() {
        rec.merge(r);
    }
    Ok(finish(
        cfg,
        "raw",
        maker.name(),
        0,
        cfg.size as u64,
        rec,
        clock,
        None,
        &cpu,
    ))
}

fn clock_nonce() -> u32 {
    static N: AtomicUsize = AtomicUsize::new(0);
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    t ^ (N.fetch_add(1, Ordering::Relaxed) as u32) << 24
}

/// Serve the raw echo side at `addr` until `stop` (the `perf raw --serve`
/// command). Pinned to `cpu` when given.
pub fn serve_raw(
    fabric: FabricKind,
    addr: &str,
    size: u32,
    qd: u32,
    cpu: Option<usize>,
    stop: &AtomicBool,
    touch: bool,
) -> Result<u64, PerfError> {
    if let Some(c) = cpu {
        crate::pin_to_cpu(c)?;
    }
    match fabric {
        FabricKind::Shm => raw::echo(&shm_maker(touch), addr, size, qd, stop, touch, || {}),
        #[cfg(feature = "verbs")]
        FabricKind::Verbs => raw::echo(&engine::VerbsMaker::default(), addr, size, qd, stop, touch, || {}),
        #[cfg(not(feature = "verbs"))]
        FabricKind::Verbs => Err(PerfError::Option("this build has no verbs provider".into())),
        FabricKind::Tcp => Err(PerfError::Option("raw runs over a fabric, not TCP".into())),
    }
}

/// Whether stderr is a terminal (progress line by default).
pub fn stderr_is_tty() -> bool {
    std::io::stderr().is_terminal()
}

/// NFSv3 NULL: the default `null` program.
pub const NULL_DEFAULT: OpKind = OpKind::Null {
    prog: NFS_PROGRAM,
    vers: NFS_V3,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RunConfig {
        RunConfig {
            mode: Mode::Rpc(NULL_DEFAULT),
            fabric: FabricKind::Shm,
            target: "/tmp/x".into(),
            version: 1,
            size: 4096,
            qd: 4,
            conns: 5,
            cores: vec![0, 1],
            duration: Duration::from_secs(1),
            count: Some(13),
            warmup: Duration::ZERO,
            rate: None,
            ddp: true,
            verify: false,
            verify_only: false,
            auth: Auth::None,
            seed: 1,
            nfs: None,
            progress: false,
            timeout: Duration::from_secs(1),
            idle_sleep_us: 0,
            idle_yield: false,
            idle_wait: false,
            target_pid: None,
            nfs41: false,
        }
    }

    #[test]
    fn connections_spread_over_cores_and_quotas_add_up() {
        let c = cfg();
        assert_eq!(c.worker_conns(0, 2), vec![0, 2, 4]);
        assert_eq!(c.worker_conns(1, 2), vec![1, 3]);
        let q: Vec<u64> = (0..5).map(|k| c.quota(k).unwrap()).collect();
        assert_eq!(q, vec![3, 3, 3, 2, 2]);
        assert_eq!(q.iter().sum::<u64>(), 13);
        assert_eq!(workers_of(&c), 2);
        let one = RunConfig { conns: 1, ..cfg() };
        assert_eq!(workers_of(&one), 1, "no idle worker threads");
    }

    #[test]
    fn validation() {
        assert!(cfg().validate().is_ok());
        for bad in [
            RunConfig { version: 3, ..cfg() },
            RunConfig { qd: 0, ..cfg() },
            RunConfig { qd: 129, ..cfg() },
            RunConfig { conns: 0, ..cfg() },
            RunConfig { cores: vec![], ..cfg() },
            RunConfig {
                count: Some(0),
                ..cfg()
            },
            RunConfig {
                count: None,
                duration: Duration::ZERO,
                ..cfg()
            },
            RunConfig {
                rate: Some(-1.0),
                ..cfg()
            },
            RunConfig {
                mode: Mode::Rpc(OpKind::Read),
                ..cfg()
            },
            RunConfig {
                mode: Mode::Raw {
                    loopback: true,
                    echo_cpu: None,
                    touch: false,
                },
                size: 0,
                ..cfg()
            },
            RunConfig {
                mode: Mode::Raw {
                    loopback: true,
                    echo_cpu: None,
                    touch: false,
                },
                rate: Some(10.0),
                ..cfg()
            },
            RunConfig {
                mode: Mode::Raw {
                    loopback: true,
                    echo_cpu: None,
                    touch: false,
                },
                conns: raw::ECHO_SLOTS + 1,
                count: None,
                ..cfg()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
