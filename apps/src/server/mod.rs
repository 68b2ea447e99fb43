//! `rpcrdma-target`: the NFSv3 gateway process.
//!
//! [`Target::start`] turns a validated [`Config`] into a running target:
//!
//! 1. opens every backend ([`crate::backend::open`]) and builds the NFS and
//!    MOUNT services' shared state ([`NfsShared`]);
//! 2. sizes one process-wide buffer pool from the `pools` section (one size
//!    class per usage: receive, send, data; one per-core cache per core) and
//!    maps it once — the fabric registers it once per engine (persistent keys);
//! 3. starts one reactor thread per configured core (pinned unless
//!    `reactor.pin_threads` is false); on every `io`
//!    core that owns a fabric listener (listener *k* goes to io core
//!    *k mod n*) it creates that core's fabric provider and a
//!    [`Responder`] engine serving an [`NfsService`], polled by the core's
//!    loop (shared-nothing: the engine, its fabric, its queues and its backend
//!    channels belong to that core alone);
//! 4. starts the TCP record-marking listeners for NFS and MOUNT
//!    ([`tcp::TcpServer`]);
//! 5. registers NFS and MOUNT with the host's rpcbind, or answers rpcbind
//!    queries itself ([`rpcbind`]), so clients need no `mountport=`.
//!
//! [`Target::shutdown`] drains: engines refuse new connections and keep
//! serving until every received Call is answered (bounded by
//! `reactor.drain_timeout_ms`), TCP listeners stop accepting, every backend
//! is synced so no UNSTABLE write is lost, TCP connections get
//! `listeners.tcp.shutdown_grace_ms` to finish the Call they serve before the
//! rest are closed (a stalled client cannot hold shutdown), the backends are
//! synced again if TCP Calls were served meanwhile, and the process may exit.
//! The rpcbind registrations are removed first, before anything stops.

pub mod rpcbind;
pub mod stats;
pub mod tcp;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::config::{Config, FabricConfig, PageSize, PoolUsage};
use dataplane::fabric::Fabric;
use dataplane::responder::{Responder, ResponderConfig, ResponderStats};
use dataplane::shm::{ShmConfig, ShmFabric};
use mempool::pool::{ClassId, Mempool, PoolPlan};
use mempool::region::{HugePageSize, RegionConfig};
use proto::header::Limits;
use proto::negotiate::VersionRange;
use reactor::{Arm, CoreCtx, PollStatus, Poller, Reactor};

use crate::backend::{self, Backend};
use crate::nfs::{NfsService, NfsShared};
use stats::{CoreView, Published, Publisher, StatsServer};

/// Why the target could not start (or stop cleanly).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("backend {name:?}: {source}")]
    Backend {
        name: String,
        #[source]
        source: backend::FsError,
    },
    #[error("buffer pools: {0}")]
    Pool(#[from] mempool::MempoolError),
    #[error("reactor: {0}")]
    Reactor(#[from] reactor::ReactorError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("engine on core {core}: {msg}")]
    Engine { core: usize, msg: String },
}

/// Counters gathered at shutdown.
#[derive(Clone, Debug, Default)]
pub struct TargetStats {
    /// Per engine (core index, its counters).
    pub engines: Vec<(usize, ResponderStats)>,
    pub tcp_calls: u64,
    /// The TCP listeners' counters, summed (evictions, timeouts, connections
    /// closed after the shutdown grace, ...).
    pub tcp: tcp::TcpCounts,
    /// Per reactor core: loop iterations, busy and idle time (empty when the
    /// reactor failed to stop cleanly).
    pub cores: Vec<reactor::CoreStats>,
}

/// A running target. Owned by the thread that started it (the admin thread).
pub struct Target {
    reactor: Option<Reactor>,
    tcp: Vec<tcp::TcpServer>,
    rpcbind: Option<rpcbind::Rpcbind>,
    shared: Arc<NfsShared>,
    engine_stats: Arc<Mutex<Vec<(usize, ResponderStats)>>>,
    /// The live statistics socket (`None` when it could not be bound).
    stats: Option<StatsServer>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("running", &self.reactor.is_some())
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

/// The pool classes of the three usages.
#[derive(Clone, Copy, Debug)]
struct Classes {
    recv: ClassId,
    send: ClassId,
    data: ClassId,
    data_size: usize,
}

/// Everything an io core needs to build its engine, shared by the start-up
/// hook of every core.
#[derive(Debug)]
struct EngineSetup {
    pool: &'static Mempool,
    classes: Classes,
    shared: Arc<NfsShared>,
    /// (core index, listen address, versions) per engine.
    listeners: Vec<(usize, String, VersionRange)>,
    fabric: FabricConfig,
    credits: u32,
    max_conns: u32,
    /// `$.rdma.remote_invalidation`.
    remote_invalidation: bool,
    errors: Mutex<Vec<TargetError>>,
    stats: Arc<Mutex<Vec<(usize, ResponderStats)>>>,
    /// Each engine's published live statistics.
    published: Arc<Mutex<Vec<Arc<Published>>>>,
    epoch: Instant,
}

/// The largest buffer of the pool with `usage`.
fn pool_of(cfg: &Config, usage: PoolUsage) -> Result<&crate::config::PoolConfig, TargetError> {
    cfg.pools
        .iter()
        .filter(|p| p.usage == usage)
        .max_by_key(|p| p.buffer_size_bytes)
        .ok_or_else(|| TargetError::Config(format!("no pool with usage {usage:?}")))
}

/// Build the process-wide pool. It lives as long as the process (engines
/// borrow it for `'static`); a process starts one target.
fn build_pool(cfg: &Config) -> Result<(&'static Mempool, Classes), TargetError> {
    let cores = cfg.cores.len();
    let mut plan = PoolPlan::new(cores);
    let mut add = |name: &'static str, usage: PoolUsage| -> Result<(ClassId, usize, PageSize), TargetError> {
        let p = pool_of(cfg, usage)?;
        let id = plan.add_class(name, p.buffer_size_bytes as usize, p.per_core_cache)?;
        let count = u64::from(p.count);
        plan.set_count(id, count);
        // Every engine together may hold what the caches do not: the engines
        // queue for buffers when a class runs dry (one pending queue per
        // scarce resource), so the configured count is the holders' budget.
        let headroom = cores as u64 * u64::from(p.per_core_cache);
        plan.reserve(name, id, count.saturating_sub(headroom));
        Ok((id, p.buffer_size_bytes as usize, p.page_size))
    };
    let (recv, _, page) = add("receive", PoolUsage::Receive)?;
    let (send, _, _) = add("send", PoolUsage::Send)?;
    let (data, data_size, _) = add("data", PoolUsage::Data)?;
    plan.validate()?;
    let region = RegionConfig {
        page_size: match page {
            PageSize::Size1G => HugePageSize::Size1G,
            _ => HugePageSize::Size2M,
        },
        // "4K" asks for normal pages: the hugepage attempt falls back.
        allow_fallback: true,
        lock: true,
        ..RegionConfig::default()
    };
    let pool = Mempool::new(&plan, &region)?;
    if let Some(w) = pool.warning() {
        if page != PageSize::Size4K {
            tracing::warn!("{w}");
        }
    }
    Ok((
        Box::leak(Box::new(pool)),
        Classes {
            recv,
            send,
            data,
            data_size,
        },
    ))
}

/// Open every backend named in the configuration.
/// Backends by name, as the NFS layer takes them.
type NamedBackends = Vec<(String, Arc<dyn Backend>)>;

fn open_backends(cfg: &Config) -> Result<NamedBackends, TargetError> {
    let mut out = Vec::with_capacity(cfg.backends.len());
    let cores = crate::cpus::CoreCpus::of(cfg);
    for b in &cfg.backends {
        let be = backend::open_for(b, &cores).map_err(|source| TargetError::Backend {
            name: b.name().to_string(),
            source,
        })?;
        tracing::info!(name = b.name(), kind = b.kind(), "backend open");
        out.push((b.name().to_string(), be));
    }
    Ok(out)
}

/// What follows a core that the crowded-CPU watcher moved
/// (`reactor::crowding`): the helper threads and the io-wq workers kept off
/// the cores' CPUs (`crate::cpus`), whose set of CPUs the move changes.
struct FollowMoves {
    helpers: crate::cpus::OffCores,
    io_cores: Vec<usize>,
    /// A `uring` backend keeps its io-wq workers off the cores.
    iowq: bool,
}

impl FollowMoves {
    /// The watcher thread, after a move.
    fn moved(&self, reactor: &reactor::ReactorHandle, ev: &reactor::CrowdMoved) {
        let Some(f) = self.helpers.follow_move(&ev.homes, &ev.core_tids) else {
            tracing::info!(core = ev.core, cpu = ev.cpu, "crowded core moved");
            return;
        };
        tracing::info!(
            core = ev.core,
            cpu = ev.cpu,
            helper_cpus = ?f.to,
            was = ?f.from,
            threads = f.threads,
            failed = f.failed,
            "crowded core moved; helper threads follow"
        );
        if !self.iowq {
            return;
        }
        for &core in &self.io_cores {
            let cpus = f.to.clone();
            let sent = reactor.send(core, move |_ctx| {
                if let Err(e) = crate::backend::uring::follow_move(&cpus) {
                    tracing::debug!(core, ?cpus, error = %e, "uring: io-wq affinity not registered after a move");
                }
            });
            if sent.is_err() {
                return; // shutting down
            }
        }
    }
}

fn version_range(versions: &[u32]) -> Result<VersionRange, TargetError> {
    let lo = versions.iter().copied().min().unwrap_or(1);
    let hi = versions.iter().copied().max().unwrap_or(1);
    VersionRange::new(lo, hi).map_err(|e| TargetError::Config(format!("versions {versions:?}: {e}")))
}

impl Target {
    /// Start the target described by `cfg` (validated by [`Config::load`]).
    /// Returns once every engine listens and the TCP ports are bound. Call
    /// from the admin thread.
    pub fn start(cfg: Config) -> Result<Target, TargetError> {
        cfg.validate().map_err(|p| TargetError::Config(p.to_string()))?;
        let backends = open_backends(&cfg)?;
        let shared = NfsShared::new(&cfg, backends).map_err(TargetError::Config)?;
        let (pool, classes) = build_pool(&cfg)?;

        if let FabricConfig::Sim { .. } = cfg.fabric {
            // The simulated fabric runs on virtual time stepped by its owner:
            // it serves in-process tests (which build engines directly), not a
            // free-running target.
            return Err(TargetError::Config(
                "fabric provider \"sim\" is an in-process test fabric; use \"shm\" or \"verbs\"".into(),
            ));
        }
        let io = cfg.io_cores();
        if io.is_empty() {
            return Err(TargetError::Config("no core with role \"io\"".into()));
        }
        let credits = cfg.credits.max_per_connection.max(1);
        // An engine holds up to two receive buffers per credit per connection
        // (posted on the SRQ, and held by a request being served): see
        // `Config::capacity` and docs/CONFIG.md.
        let capacity = cfg.capacity();
        if capacity.conns_per_core_unclamped == 0 {
            return Err(TargetError::Config(capacity.to_string()));
        }
        let max_conns = capacity.conns_per_core as u32;
        let mut listeners = Vec::new();
        for (k, l) in cfg.listeners.fabric.iter().enumerate() {
            let core = io[k % io.len()];
            let addr = match &cfg.fabric {
                FabricConfig::Shm { socket_path } => socket_path.clone(),
                FabricConfig::Verbs { .. } => SocketAddr::new(l.address, l.port).to_string(),
                // Refused above.
                FabricConfig::Sim { .. } => format!("{}:{}", l.address, l.port),
            };
            listeners.push((core, addr, version_range(&l.versions)?));
        }
        if let FabricConfig::Shm { socket_path } = &cfg.fabric {
            if let Some(dir) = std::path::Path::new(socket_path).parent() {
                std::fs::create_dir_all(dir).map_err(|source| TargetError::Io {
                    what: format!("create {}", dir.display()),
                    source,
                })?;
            }
        }
        tracing::info!(
            cores = cfg.cores.len(),
            io_cores = io.len(),
            credits,
            max_conns_per_core = max_conns,
            data_buffer_bytes = classes.data_size,
            pinned = cfg.reactor.pin_threads,
            "starting engines"
        );
        let engine_stats = Arc::new(Mutex::new(Vec::new()));
        let published = Arc::new(Mutex::new(Vec::new()));
        let epoch = Instant::now();
        let setup = Arc::new(EngineSetup {
            pool,
            classes,
            shared: shared.clone(),
            listeners,
            fabric: cfg.fabric.clone(),
            credits,
            max_conns,
            remote_invalidation: cfg.rdma.remote_invalidation,
            errors: Mutex::new(Vec::new()),
            stats: engine_stats.clone(),
            published: published.clone(),
            epoch,
        });
        let hook = setup.clone();
        let follow = FollowMoves {
            helpers: shared.off_cores().clone(),
            io_cores: io.clone(),
            iowq: cfg.backends.iter().any(|b| {
                matches!(
                    b,
                    crate::config::BackendConfig::Uring {
                        iowq_off_cores: true,
                        ..
                    }
                )
            }),
        };
        let reactor = Reactor::builder(cfg.reactor_options())
            .on_core_start(move |ctx| start_engines(&hook, ctx))
            .on_crowd_move(move |h, ev| follow.moved(h, ev))
            .start()?;
        let errs = std::mem::take(&mut *setup.errors.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(e) = errs.into_iter().next() {
            let _ = reactor.shutdown();
            return Err(e);
        }
        match reactor.crowd_move() {
            reactor::CrowdMove::Watching => tracing::info!("crowded-CPU move watching the cores"),
            reactor::CrowdMove::Off => {}
            reactor::CrowdMove::Unavailable(why) => {
                tracing::info!(reason = %why, "crowded-CPU move unavailable: the cores stay on their CPUs")
            }
        }

        // TCP services, bound on each distinct listener address.
        let mut addrs: Vec<IpAddr> = cfg.listeners.fabric.iter().map(|l| l.address).collect();
        addrs.sort();
        addrs.dedup();
        let rpcbind_addrs = addrs.clone();
        let opts = tcp::TcpOptions::new(
            &cfg.listeners.tcp,
            classes.data_size + 64 * 1024,
            classes.data_size,
            cfg.cores.len(),
        );
        let mut tcp = Vec::new();
        for ip in addrs {
            for (port, what) in [
                (cfg.listeners.nfs_tcp_port, "NFS"),
                (cfg.listeners.mount_tcp_port, "MOUNT"),
            ] {
                let at = SocketAddr::new(ip, port);
                match tcp::TcpServer::start(at, shared.clone(), opts) {
                    Ok(s) => {
                        tracing::info!(addr = %s.local_addr(), "{what} over TCP listening");
                        tcp.push(s);
                    }
                    Err(source) => {
                        drop(tcp);
                        let _ = reactor.shutdown();
                        return Err(TargetError::Io {
                            what: format!("bind {what} TCP port {at}"),
                            source,
                        });
                    }
                }
            }
        }
        let sources = stats::Sources {
            cores: published,
            pool: Some((
                pool,
                vec![
                    ("receive", classes.recv),
                    ("send", classes.send),
                    ("data", classes.data),
                ],
            )),
            tcp: tcp.iter().map(|t| (t.local_addr(), t.stats_arc())).collect(),
            epoch,
            nfs: Some(shared.clone()),
            reactor: Some(reactor.handle()),
        };
        let path = stats::socket_path(&cfg);
        let stats = match StatsServer::start(&path, sources) {
            Ok(s) => {
                tracing::info!(socket = %path.display(), "live statistics");
                Some(s)
            }
            Err(e) => {
                tracing::warn!(socket = %path.display(), error = %e, "no live statistics socket");
                None
            }
        };
        let maps = rpcbind_mappings(&cfg, &rpcbind_addrs);
        let rpcbind = rpcbind::Rpcbind::start(&cfg.listeners.rpcbind, maps, &rpcbind_addrs);
        Ok(Target {
            reactor: Some(reactor),
            tcp,
            rpcbind: Some(rpcbind),
            shared,
            engine_stats,
            stats,
        })
    }

    /// The live statistics socket, when it is served.
    pub fn stats_socket(&self) -> Option<&std::path::Path> {
        self.stats.as_ref().map(|s| s.path())
    }

    /// What the target does about rpcbind.
    pub fn rpcbind_state(&self) -> rpcbind::RpcbindState {
        self.rpcbind.as_ref().map_or(rpcbind::RpcbindState::Idle, |r| r.state())
    }

    /// The bound TCP addresses (NFS, MOUNT per listener address).
    pub fn tcp_addrs(&self) -> Vec<SocketAddr> {
        self.tcp.iter().map(|t| t.local_addr()).collect()
    }

    /// The TCP listeners' counters now, summed.
    pub fn tcp_counts(&self) -> tcp::TcpCounts {
        let mut c = tcp::TcpCounts::default();
        for t in &self.tcp {
            c.add(&t.stats().snapshot());
        }
        c
    }

    /// The services' shared state.
    pub fn shared(&self) -> &Arc<NfsShared> {
        &self.shared
    }

    /// Drain and stop: see the module documentation. Call from the thread
    /// that started the target.
    pub fn shutdown(mut self) -> Result<TargetStats, TargetError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<TargetStats, TargetError> {
        let mut first_err = None;
        let mut cores = Vec::new();
        // Clients stop finding us before we stop answering.
        if let Some(mut r) = self.rpcbind.take() {
            r.stop();
        }
        if let Some(mut s) = self.stats.take() {
            s.stop();
        }
        // No new TCP connection from here; idle ones close at once.
        for t in &self.tcp {
            t.stop_accepting();
        }
        if let Some(r) = self.reactor.take() {
            match r.shutdown() {
                Ok(c) => cores = c,
                Err(e) => first_err = Some(TargetError::Reactor(e)),
            }
        }
        // Sync before waiting for TCP connections: a client stalled in the
        // middle of a record (or not reading) may hold its thread until the
        // grace runs out, and a supervisor may kill the process meanwhile.
        let synced_at = self.tcp_counts().calls;
        let sync = |shared: &NfsShared, first_err: &mut Option<TargetError>| {
            if let Err(e) = shared.sync_all() {
                tracing::error!(error = %e, "syncing backends at shutdown failed");
                first_err.get_or_insert(TargetError::Backend {
                    name: "*".into(),
                    source: e,
                });
            }
        };
        sync(&self.shared, &mut first_err);
        let mut tcp = tcp::TcpCounts::default();
        for mut t in self.tcp.drain(..) {
            t.stop();
            tcp.add(&t.stats().snapshot());
        }
        if tcp.calls != synced_at {
            // Calls served during the grace may have written: sync again.
            sync(&self.shared, &mut first_err);
        }
        let stats = TargetStats {
            engines: std::mem::take(&mut *self.engine_stats.lock().unwrap_or_else(|e| e.into_inner())),
            tcp_calls: tcp.calls,
            tcp,
            cores,
        };
        match first_err {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if self.reactor.is_some() {
            let _ = self.stop();
        }
    }
}

/// The services rpcbind tells clients about ([`rpcbind`]): on each listener
/// address, NFS v3 over TCP, NFS v3 over RDMA at each verbs fabric listener
/// of that address, MOUNT v1 and v3 over TCP. One per program, version and
/// netid (rpcbind holds one address each): the first listener wins.
pub fn rpcbind_mappings(cfg: &Config, addrs: &[IpAddr]) -> Vec<rpcbind::wire::Mapping> {
    use proto::nfs3::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
    use rpcbind::wire::{Mapping, Netid};
    let mut maps: Vec<Mapping> = Vec::new();
    let mut add = |m: Mapping| {
        if !maps
            .iter()
            .any(|o| (o.prog, o.vers, o.netid) == (m.prog, m.vers, m.netid))
        {
            maps.push(m);
        }
    };
    for &ip in addrs {
        let tcp = Netid::tcp_for(ip);
        let l = &cfg.listeners;
        add(Mapping {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            netid: tcp,
            ip,
            port: l.nfs_tcp_port,
        });
        if matches!(cfg.fabric, FabricConfig::Verbs { .. }) {
            for f in l.fabric.iter().filter(|f| f.address == ip) {
                add(Mapping {
                    prog: NFS_PROGRAM,
                    vers: NFS_V3,
                    netid: Netid::rdma_for(ip),
                    ip,
                    port: f.port,
                });
            }
        }
        for vers in [1, MOUNT_V3] {
            add(Mapping {
                prog: MOUNT_PROGRAM,
                vers,
                netid: tcp,
                ip,
                port: l.mount_tcp_port,
            });
        }
    }
    maps
}

/// Start-up hook run on every core: build this core's engines.
fn start_engines(setup: &EngineSetup, ctx: &mut CoreCtx) {
    let core = ctx.core();
    for (c, addr, versions) in setup.listeners.iter() {
        if *c != core {
            continue;
        }
        let r = match &setup.fabric {
            FabricConfig::Shm { .. } => ShmFabric::new(ShmConfig {
                // Each connection may draw as many SRQ receives as it has
                // credits, plus one for each Reply to a backward Call it may
                // owe (RFC 8167: those Replies arrive in the responder's
                // receives too): a requester granted all its credits and
                // answering every callback never waits for a receive (RNR)
                // on a window smaller than that.
                srq_window: (setup.credits + dataplane::responder::DEFAULT_BACKWARD_CREDITS)
                    .clamp(1, ShmConfig::default().max_ring_depth),
                // The engine decodes every Call it receives.
                ..ShmConfig::for_rpc_engine()
            })
            .map_err(|e| e.to_string())
            .and_then(|f| add_engine(setup, ctx, f, addr, *versions)),
            FabricConfig::Sim { .. } => Err("the sim fabric is not served by the target".into()),
            #[cfg(feature = "verbs")]
            FabricConfig::Verbs { device, .. } => {
                let vc = dataplane::verbs::VerbsConfig {
                    device: Some(device.clone()),
                    ..Default::default()
                };
                dataplane::verbs::VerbsFabric::new(vc)
                    .map_err(|e| e.to_string())
                    .and_then(|f| add_engine(setup, ctx, f, addr, *versions))
            }
            #[cfg(not(feature = "verbs"))]
            FabricConfig::Verbs { .. } => Err("this build has no verbs provider".into()),
        };
        match r {
            Ok(()) => tracing::info!(core, listen = %addr, "engine listening"),
            Err(msg) => setup
                .errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(TargetError::Engine { core, msg }),
        }
    }
}

fn add_engine<F: Fabric + 'static>(
    setup: &EngineSetup,
    ctx: &mut CoreCtx,
    fabric: F,
    addr: &str,
    versions: VersionRange,
) -> Result<(), String> {
    let core = ctx.core();
    let service = NfsService::new(setup.shared.clone(), core).map_err(|e| format!("backend channel: {e}"))?;
    let cfg = ResponderConfig {
        versions,
        credits: setup.credits,
        max_conns: setup.max_conns,
        send_depth: 2 * setup.credits.min(128) + 8,
        max_rdma_reads: 16,
        limits: Limits::DEFAULT,
        max_read_bytes: setup.classes.data_size as u64,
        recv_class: setup.classes.recv,
        send_class: setup.classes.send,
        data_class: setup.classes.data,
        remote_invalidation: setup.remote_invalidation,
        // NFSv4.1 callbacks over RDMA (RFC 8167): a few backward Calls in
        // flight per connection; the receives they need fit the slack the
        // capacity plan keeps per connection (twice its credits).
        backward_credits: dataplane::responder::DEFAULT_BACKWARD_CREDITS,
    };
    let regions = setup.pool.regions().to_vec();
    let responder = Responder::new(cfg, fabric, service, setup.pool, &regions, core, Some(addr))
        .map_err(|e| format!("responder: {e}"))?;
    let cell = Arc::new(Published::new(core));
    setup
        .published
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(cell.clone());
    let mut responder = responder;
    // Interrupt mode: the fabric's completion / CM / doorbell descriptors
    // join the core's epoll (a no-op unless the idle policy waits there).
    for fd in responder.fabric().wake_fds() {
        ctx.watch_fd(fd).map_err(|e| format!("epoll: {e}"))?;
    }
    ctx.add_poller(Box::new(EnginePoller {
        responder,
        core,
        draining: false,
        stats: setup.stats.clone(),
        done: false,
        publisher: Publisher::new(cell, setup.epoch),
        refusals: RefusalLog::new(setup.max_conns),
    }));
    Ok(())
}

/// Polls one engine on its core.
/// Whether a blocking core arms its send-side completions even when no live
/// Call waits for one: only with `RPCRDMA_ARM_SENDS=1`. By default a core
/// arms receives alone then (issue 24 item 1): a reply's Send completing
/// after the core blocked would wake it only to free the reply's buffers,
/// which the next Call's wake-up does as well; under Soft-RoCE that
/// wake-up was about one per READ at qd 1 (strace in the guest,
/// docs/BENCHMARKS.md). Read once.
fn arm_sends_always() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RPCRDMA_ARM_SENDS").is_some_and(|v| v == "1"))
}

/// Whether a turn that only reaped replies' completions counts as idle (it
/// then neither restarts the core's spin nor sends it round its re-check
/// again): only with `RPCRDMA_REAPS_IDLE=1`. By default such a turn is work,
/// as before: in the guest of `tests/kernel/` counting it idle made the core
/// block more often at qd 1 and cost 4 KiB random writes 15 to 20 % in
/// each of three rounds (docs/BENCHMARKS.md, issue 24 item 1). Read once.
fn reaps_idle() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RPCRDMA_REAPS_IDLE").is_some_and(|v| v == "1"))
}

struct EnginePoller<F: Fabric> {
    responder: Responder<'static, F, NfsService>,
    core: usize,
    draining: bool,
    done: bool,
    stats: Arc<Mutex<Vec<(usize, ResponderStats)>>>,
    /// Live statistics: when and where this core publishes.
    publisher: Publisher,
    refusals: RefusalLog,
}

impl<F: Fabric> EnginePoller<F> {
    /// Publish this core's counters for the statistics thread (a copy into
    /// a seqlock: the core never waits for a reader).
    fn publish(&mut self, now_ns: u64) {
        let r = &mut self.responder;
        let (engine, connections, in_flight) = (r.stats(), r.connections() as u64, r.in_flight() as u64);
        let (deferred_now, credits_granted, held) = (u64::from(r.deferred()), r.credits_granted(), r.held());
        let svc = r.service();
        let (nfs, (drc, _, _)) = (svc.stats(), svc.reply_cache_stats());
        let view = CoreView {
            engine: &engine,
            connections,
            in_flight,
            deferred_now,
            credits_granted,
            held,
            nfs: &nfs,
            drc: &drc,
            procs: svc.procs(),
        };
        self.publisher.publish(&view, now_ns);
    }
}

/// Logs refused connections with their reason, at most once per
/// [`RefusalLog::EVERY`] per engine (with the count since the last line), so
/// a client retrying in a loop cannot flood the log (issue 24 item 5).
struct RefusalLog {
    max_conns: u32,
    /// `conns_rejected` already logged.
    logged: u64,
    last: Option<std::time::Instant>,
    polls: u32,
}

impl RefusalLog {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(1);
    /// Polls between looks at the counters while the core stays busy.
    const POLLS: u32 = 4096;

    fn new(max_conns: u32) -> RefusalLog {
        RefusalLog {
            max_conns,
            logged: 0,
            last: None,
            polls: 0,
        }
    }

    /// Called on every poll (cheap) and before the core sleeps (`force`).
    fn check<F: Fabric>(
        &mut self,
        core: usize,
        r: &mut Responder<'static, F, NfsService>,
        draining: bool,
        force: bool,
    ) {
        self.polls = self.polls.wrapping_add(1);
        if !force && !self.polls.is_multiple_of(Self::POLLS) {
            return;
        }
        let rejected = r.stats().conns_rejected;
        if rejected == self.logged {
            return;
        }
        let now = reactor::clock::now();
        if self.last.is_some_and(|t| now.duration_since(t) < Self::EVERY) {
            return;
        }
        let conns = r.connections();
        let reason = if draining {
            "the target is shutting down".to_string()
        } else if conns as u64 >= u64::from(self.max_conns) {
            format!(
                "at capacity: {conns} of {} connections on this core (receive pool and credits, see --check-config and docs/CONFIG.md)",
                self.max_conns
            )
        } else {
            "the fabric failed to accept".to_string()
        };
        tracing::warn!(
            core,
            refused = rejected - self.logged,
            conns_rejected = rejected,
            connections = conns,
            "connections refused: {reason}"
        );
        self.logged = rejected;
        self.last = Some(now);
    }
}

impl<F: Fabric> Poller for EnginePoller<F> {
    fn poll(&mut self, _ctx: &mut CoreCtx) -> PollStatus {
        // Backend I/O in flight (deferred replies) keeps the core polling,
        // as waiting for it in the service did: an idle core would sleep
        // and notice the completion up to a sleep later.
        let work = self.responder.poll();
        if let Some(now) = self.publisher.due(work > 0) {
            self.publish(now);
        }
        // With `RPCRDMA_REAPS_IDLE=1` a turn that only reaped replies'
        // completions found nothing new: the core's spin is not restarted by
        // it, nor does its re-check before blocking go round again for it.
        let reaps = if reaps_idle() {
            self.responder.reaps_last_turn()
        } else {
            0
        };
        let news = work - reaps.min(work);
        let busy = news > 0 || self.responder.deferred() > 0;
        self.refusals.check(self.core, &mut self.responder, false, false);
        if busy {
            PollStatus::Busy
        } else {
            PollStatus::Idle
        }
    }

    /// The core is about to block: the fabric arms its notifications. Also
    /// while requests wait for their RDMA Reads or their reply's Send to
    /// complete (a completion wakes the core; sleeping in slices instead
    /// cost every WRITE with a Read chunk a fallback sleep). Not while a
    /// request waits for backend I/O (deferred, whose completions ring
    /// nothing here) or is queued for a resource: the core then sleeps in
    /// short slices and keeps polling.
    fn arm(&mut self, _ctx: &mut CoreCtx) -> Arm {
        self.refusals.check(self.core, &mut self.responder, self.draining, true);
        // A sleeping core publishes nothing: copy what changed first.
        if let Some(now) = self.publisher.due_before_sleep() {
            self.publish(now);
        }
        if !self.responder.waits_only_on_fabric() {
            return Arm::Unsupported;
        }
        // Replies on the wire need no wake-up for their completions; RDMA
        // Reads, flushes and Calls waiting for send slots do.
        // `RPCRDMA_ARM_SENDS=1` arms send completions always (as before).
        let armed = if self.responder.waits_on_send_completions() || arm_sends_always() {
            self.responder.fabric().arm_wakeup()
        } else {
            self.responder.fabric().arm_wakeup_receives()
        };
        if armed {
            Arm::Armed
        } else {
            Arm::Unsupported
        }
    }

    fn disarm(&mut self, _ctx: &mut CoreCtx) {
        self.responder.fabric().disarm_wakeup();
    }

    fn drain(&mut self, _ctx: &mut CoreCtx) -> PollStatus {
        if self.done {
            return PollStatus::Idle;
        }
        if !self.draining {
            self.draining = true;
            self.responder.begin_drain();
            tracing::info!(
                core = self.core,
                in_flight = self.responder.in_flight(),
                states = ?self.responder.live_by_state(),
                "draining"
            );
        }
        self.responder.poll();
        self.refusals.check(self.core, &mut self.responder, true, false);
        if self.responder.in_flight() > 0 {
            return PollStatus::Busy;
        }
        // Every received Call is answered: disconnect and take buffers back.
        let held = self.responder.shutdown(10_000);
        let stats = self.responder.stats();
        tracing::info!(
            core = self.core,
            calls = stats.calls,
            replies = stats.replies,
            call_errors = stats.call_errors,
            unanswered = stats.unanswered(),
            conns_accepted = stats.conns_accepted,
            conns_rejected = stats.conns_rejected,
            held_requests = held.requests,
            "engine stopped"
        );
        // The fabric's system calls into its device driver (verbs: posts,
        // CQ notification requests, completion-channel reads), per core.
        if let Some(d) = self.responder.fabric().driver_calls() {
            tracing::info!(
                core = self.core,
                post_send_calls = d.post_send_calls,
                send_wrs = d.send_wrs,
                notify_requests = d.notify_requests,
                event_reads = d.event_reads,
                empty_event_reads = d.empty_event_reads,
                "driver calls"
            );
        }
        self.stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.core, stats));
        self.done = true;
        PollStatus::Idle
    }
}
