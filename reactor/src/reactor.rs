//! Reactor start-up (the builder, one pinned thread per core), waiting for
//! the cores, and shutdown. The shutdown protocol the cores follow is
//! described in the `shared` module, next to the counters it uses.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::core_loop::{Core, CoreCtx, Poller};
use crate::crowding::{spawn_watch, WatchSetup, Watched};
use crate::error::ReactorError;
use crate::handle::ReactorHandle;
use crate::options::ReactorOptions;
use crate::shared::Shared;
use crate::stats::CoreStats;

type InitFn = Arc<dyn Fn(&mut CoreCtx) + Send + Sync>;
type MoveFn = Arc<dyn Fn(&ReactorHandle, &CrowdMoved) + Send + Sync>;

/// Builder: options, pollers per core, and a start-up hook run on every core.
pub struct ReactorBuilder {
    opts: ReactorOptions,
    pollers: Vec<(usize, Box<dyn Poller + Send>)>,
    init: Option<InitFn>,
    on_move: Option<MoveFn>,
}

/// A crowded-CPU move that has just been applied (`crate::crowding`), as
/// the hook of [`ReactorBuilder::on_crowd_move`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrowdMoved {
    /// The core that moved.
    pub core: usize,
    /// The CPU it is pinned to now.
    pub cpu: usize,
    /// Every core's CPU now, by core index.
    pub homes: Vec<usize>,
    /// Every core's thread id, by core index.
    pub core_tids: Vec<libc::pid_t>,
}

/// What a core thread returns: `None` if it failed before reporting ready
/// (the failure went through the ready channel instead).
type CoreResult = Option<Result<CoreStats, ReactorError>>;

/// A running set of pinned core threads. Dropping it shuts it down (and
/// ignores errors); call [`Reactor::shutdown`] to get the statistics and
/// errors.
pub struct Reactor {
    shared: Arc<Shared<CoreCtx>>,
    threads: Vec<JoinHandle<CoreResult>>,
    /// The crowded-CPU watcher and its stop flag, when it runs.
    watch: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    crowd_move: CrowdMove,
}

/// Whether the crowded-CPU move (`crate::crowding`) watches the cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrowdMove {
    /// The watcher runs.
    Watching,
    /// Not asked for: cores float (`pin_threads: false`), the option is
    /// off, or the process has one CPU.
    Off,
    /// Asked for, but the kernel's scheduler statistics cannot be read (no
    /// `/proc/schedstat`: a kernel without `sched_info`, or a sandbox); the
    /// cores stay on their CPUs.
    Unavailable(String),
}

impl ReactorBuilder {
    /// Adds a poller to core `core` (an index into `cpus`). Pollers given
    /// here must be `Send` (they move to the core thread); pollers created
    /// on the core with [`CoreCtx::add_poller`] need not be.
    pub fn poller<P: Poller + Send + 'static>(mut self, core: usize, poller: P) -> Self {
        self.pollers.push((core, Box::new(poller)));
        self
    }

    /// Runs `f` on the watcher thread after each crowded-CPU move, once the
    /// core's thread is pinned to its new CPU: for what should follow the
    /// core (an application's helper threads kept off the cores' CPUs).
    /// Never on a core thread; `f` may make system calls, but should be
    /// brief (the watcher samples again after it).
    pub fn on_crowd_move<F>(mut self, f: F) -> Self
    where
        F: Fn(&ReactorHandle, &CrowdMoved) + Send + Sync + 'static,
    {
        self.on_move = Some(Arc::new(f));
        self
    }

    /// Runs `f` once on every core thread, after pinning and before the
    /// loop starts (e.g. to create `!Send` pollers or per-core locals).
    pub fn on_core_start<F>(mut self, f: F) -> Self
    where
        F: Fn(&mut CoreCtx) + Send + Sync + 'static,
    {
        self.init = Some(Arc::new(f));
        self
    }

    /// Checks the options and the CPUs, spawns and pins one thread per
    /// core, runs the start-up hooks, and returns once every core runs its
    /// loop. Any failure stops the cores already started and is returned.
    /// Call from any thread (not from a core thread of another reactor that
    /// must keep polling: this blocks until the cores are up).
    pub fn start(self) -> Result<Reactor, ReactorError> {
        let ReactorBuilder {
            opts,
            pollers,
            init,
            on_move,
        } = self;
        opts.check()?;
        if let Some((core, _)) = pollers.iter().find(|(c, _)| *c >= opts.cpus.len()) {
            return Err(ReactorError::InvalidOptions(format!(
                "poller given for core {core}, but there are only {} cores",
                opts.cpus.len()
            )));
        }
        let mut allowed: Vec<usize> = Vec::new();
        if opts.pin_threads {
            let available: Vec<usize> = core_affinity::get_core_ids()
                .ok_or(ReactorError::CpuListUnavailable)?
                .into_iter()
                .map(|c| c.id)
                .collect();
            for (core, &cpu) in opts.cpus.iter().enumerate() {
                if !available.contains(&cpu) {
                    return Err(ReactorError::CpuUnavailable { core, cpu, available });
                }
            }
            allowed = available;
        }
        let n = opts.cpus.len();
        let shared = Arc::new(Shared::new(opts)?);
        let mut per_core: Vec<Vec<Box<dyn Poller + Send>>> = (0..n).map(|_| Vec::new()).collect();
        for (core, p) in pollers {
            per_core[core].push(p);
        }
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<libc::pid_t, ReactorError>)>();
        let mut reactor = Reactor {
            shared: shared.clone(),
            threads: Vec::with_capacity(n),
            watch: None,
            crowd_move: CrowdMove::Off,
        };
        for (core, pollers) in per_core.into_iter().enumerate() {
            let thread_shared = shared.clone();
            let init = init.clone();
            let tx = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("reactor-core-{core}"))
                .spawn(move || core_thread(thread_shared, core, pollers, init, tx));
            match spawned {
                Ok(h) => reactor.threads.push(h),
                Err(source) => {
                    shared.abort();
                    // Dropping `reactor` joins the threads already started.
                    return Err(ReactorError::Spawn { core, source });
                }
            }
        }
        drop(ready_tx);
        let mut tids: Vec<libc::pid_t> = vec![0; n];
        for _ in 0..n {
            match ready_rx.recv() {
                Ok((core, Ok(tid))) => tids[core] = tid,
                Ok((_, Err(e))) => {
                    shared.abort();
                    return Err(e);
                }
                Err(_) => {
                    // Every sender is gone without all reporting: cannot
                    // happen (each thread reports once), but do not hang.
                    shared.abort();
                    return Err(ReactorError::InvalidOptions(
                        "a core thread exited during start-up without reporting".into(),
                    ));
                }
            }
        }
        reactor.start_watch(&tids, allowed, on_move);
        Ok(reactor)
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl Reactor {
    /// Starts the crowded-CPU watcher when the options ask for it and there
    /// is another CPU to move to. `tids` are the core threads' ids, by
    /// core; `allowed` the CPUs the process may use (empty when the cores
    /// are not pinned); `on_move` the hook of
    /// [`ReactorBuilder::on_crowd_move`].
    fn start_watch(&mut self, tids: &[libc::pid_t], allowed: Vec<usize>, on_move: Option<MoveFn>) {
        let opts = &self.shared.opts;
        let Some(rule) = opts.crowd_move.filter(|_| opts.pin_threads && allowed.len() > 1) else {
            return;
        };
        let cores: Vec<Watched> = tids
            .iter()
            .zip(&opts.cpus)
            .map(|(&tid, &home)| Watched { tid, home })
            .collect();
        let own_cpus: Vec<usize> = allowed.iter().copied().filter(|c| !opts.cpus.contains(c)).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let shared = self.shared.clone();
        let core_tids = tids.to_vec();
        let moved = Box::new(move |core: usize, cpu: usize| {
            let slot = &shared.cores[core];
            slot.home.store(cpu, Ordering::Relaxed);
            slot.crowd_moves.fetch_add(1, Ordering::Relaxed);
            if let Some(f) = &on_move {
                let ev = CrowdMoved {
                    core,
                    cpu,
                    // The watcher is the only writer of `home`.
                    homes: shared.cores.iter().map(|c| c.home.load(Ordering::Relaxed)).collect(),
                    core_tids: core_tids.clone(),
                };
                f(&ReactorHandle::from_shared(shared.clone()), &ev);
            }
        });
        let setup = WatchSetup {
            rule,
            cores,
            cpus: allowed,
            own_cpus,
            moved,
            stop: stop.clone(),
        };
        match spawn_watch(std::path::Path::new("/proc"), setup) {
            Ok(h) => {
                self.watch = Some((h, stop));
                self.crowd_move = CrowdMove::Watching;
            }
            Err(e) => self.crowd_move = CrowdMove::Unavailable(e.to_string()),
        }
    }

    /// Whether the crowded-CPU move watches the cores (for the start-up
    /// log). Any thread.
    pub fn crowd_move(&self) -> &CrowdMove {
        &self.crowd_move
    }

    /// Stops the watcher (after the cores: it only reads their counters).
    fn stop_watch(&mut self) {
        if let Some((h, stop)) = self.watch.take() {
            // Pairs with the Acquire load in the watcher's loop.
            stop.store(true, Ordering::Release);
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// Body of one core thread.
fn core_thread(
    shared: Arc<Shared<CoreCtx>>,
    core: usize,
    pollers: Vec<Box<dyn Poller + Send>>,
    init: Option<InitFn>,
    ready: mpsc::Sender<(usize, Result<libc::pid_t, ReactorError>)>,
) -> CoreResult {
    let slot = &shared.cores[core];
    let cpu = slot.cpu;
    let finish = |r: CoreResult| {
        // Pairs with the Acquire load of `stopped` in `Shared::enqueue`.
        slot.stopped.store(true, Ordering::Release);
        r
    };
    if shared.opts.pin_threads && !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        let _ = ready.send((core, Err(ReactorError::PinFailed { core, cpu })));
        return finish(None);
    }
    let _ = slot.wake.thread.set(std::thread::current());
    let mut ready = Some(ready);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut c = match Core::new(shared.clone(), core, pollers) {
            Ok(c) => c,
            Err(e) => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send((core, Err(e)));
                }
                return None;
            }
        };
        c.enter_thread();
        if let Some(init) = &init {
            init(c.ctx_mut());
        }
        if let Some(tx) = ready.take() {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let _ = tx.send((core, Ok(tid)));
        }
        Some(c.run())
    }));
    match outcome {
        Ok(r) => finish(r),
        Err(payload) => {
            shared.abort();
            let err = ReactorError::CorePanicked {
                core,
                cpu,
                message: panic_message(payload.as_ref()),
            };
            if let Some(tx) = ready.take() {
                let _ = tx.send((core, Err(err)));
                return finish(None);
            }
            finish(Some(Err(err)))
        }
    }
}

impl Reactor {
    /// A builder for a reactor with these options.
    pub fn builder(opts: ReactorOptions) -> ReactorBuilder {
        ReactorBuilder {
            opts,
            pollers: Vec::new(),
            init: None,
            on_move: None,
        }
    }

    /// Starts a reactor without pollers (they can be added later from
    /// messages with [`CoreCtx::add_poller`]).
    pub fn start(opts: ReactorOptions) -> Result<Reactor, ReactorError> {
        Reactor::builder(opts).start()
    }

    /// A handle for sending messages and reading statistics.
    pub fn handle(&self) -> ReactorHandle {
        ReactorHandle::from_shared(self.shared.clone())
    }

    /// Number of cores.
    pub fn num_cores(&self) -> usize {
        self.shared.cores.len()
    }

    /// Requests shutdown and waits for it: every core drains (runs all
    /// queued messages, drains its pollers, drops its unfired timers) until
    /// the whole reactor is quiescent, then its thread exits. Returns the
    /// final per-core statistics, or the first error (a panic is reported
    /// in preference to a drain timeout).
    pub fn shutdown(mut self) -> Result<Vec<CoreStats>, ReactorError> {
        self.shared.request_stop();
        self.join_threads()
    }

    /// Waits until someone requests shutdown (a handle, a core), then like
    /// [`Reactor::shutdown`].
    pub fn join(mut self) -> Result<Vec<CoreStats>, ReactorError> {
        self.join_threads()
    }

    fn join_threads(&mut self) -> Result<Vec<CoreStats>, ReactorError> {
        let r = self.join_cores();
        self.stop_watch();
        r
    }

    fn join_cores(&mut self) -> Result<Vec<CoreStats>, ReactorError> {
        let mut stats = Vec::with_capacity(self.threads.len());
        let mut first_err: Option<ReactorError> = None;
        for (core, h) in std::mem::take(&mut self.threads).into_iter().enumerate() {
            let r = match h.join() {
                Ok(Some(r)) => r,
                Ok(None) => Err(ReactorError::InvalidOptions(format!(
                    "core {core} failed during start-up"
                ))),
                Err(p) => Err(ReactorError::CorePanicked {
                    core,
                    cpu: self.shared.cores[core].cpu,
                    message: panic_message(p.as_ref()),
                }),
            };
            match r {
                Ok(s) => stats.push(CoreStats {
                    cpu: self.shared.cores[core].home.load(Ordering::Relaxed),
                    crowd_moves: self.shared.cores[core].crowd_moves.load(Ordering::Relaxed),
                    ..s
                }),
                Err(e) => {
                    let replace = match (&first_err, &e) {
                        (None, _) => true,
                        (Some(ReactorError::CorePanicked { .. }), _) => false,
                        (Some(_), ReactorError::CorePanicked { .. }) => true,
                        _ => false,
                    };
                    if replace {
                        first_err = Some(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }
}

impl Drop for Reactor {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shared.request_stop();
            let _ = self.join_threads();
        }
        self.stop_watch();
    }
}
