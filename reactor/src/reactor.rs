//! Reactor start-up, the cross-core send path, and shutdown.
//!
//! # Shutdown protocol
//!
//! Shutdown must run every message queued before it and let pollers finish
//! their in-flight work, even though running a message or draining a poller
//! may send further messages to cores that are already idle. Termination is
//! detected with message counters (a variant of the "four counter" method):
//!
//! * every message is counted in its sender's `sent` counter *before* it is
//!   enqueued, and in its executor's `done` counter at the *end of the loop
//!   iteration* that ran it (after that iteration's pollers ran), so the
//!   message stays pending until everything it triggered on its core is
//!   itself pending or finished;
//! * `request_stop` adds one pending *unit* per core (to `external_sent`)
//!   before raising `stopping`; a draining core releases its unit (`done +=
//!   1`) after an iteration with no work at all, and takes a unit back
//!   (`sent += 1`) when a later iteration has work again;
//! * external threads (not core threads) count in `external_sent` /
//!   `external_done` and may no longer send once `stopping` is set;
//! * timers are dropped when a core starts draining.
//!
//! A core that holds no unit sums every `done` counter, then every `sent`
//! counter (all `SeqCst`); if the sums are equal, nothing was pending at the
//! moment it finished reading the `done` counters, and since every message
//! and every unit is pending for as long as it can cause new work, nothing
//! can become pending again: the core exits. This relies on the
//! [`crate::Poller::drain`] contract (a draining poller reports `Busy` while
//! anything is in flight).
//!
//! The counters are each written by one thread only (plain load + `SeqCst`
//! store), so the hot path pays no contended read-modify-write.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use mempool::ring::Ring;

use crate::core_loop::{current_core, duration_ns, Core, CoreCtx, Poller};
use crate::error::{ReactorError, SendError, TrySendError};
use crate::idle::IdlePolicy;
use crate::msg::Message;
use crate::stats::{CoreStats, SharedStats};

/// Largest number of cores one reactor runs.
pub const MAX_CORES: usize = 1024;

/// Largest message batch drained per loop iteration.
pub const MAX_MESSAGE_BATCH: usize = 1024;

/// Options of a [`Reactor`]. Build with [`ReactorOptions::new`] and adjust
/// fields, or from a `cores.json` with [`crate::config::Config::reactor_options`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReactorOptions {
    /// CPU of each core; core `i` runs on `cpus[i]`.
    pub cpus: Vec<usize>,
    /// Pin each core thread to its CPU (default `true`). When `false`, the
    /// CPU numbers are only labels (useful to run more cores than CPUs in a
    /// test).
    pub pin_threads: bool,
    /// What idle cores do.
    pub idle: IdlePolicy,
    /// Slots of each core's inbound message ring (power of two).
    pub ring_capacity: usize,
    /// Messages dequeued and run per loop iteration (1..=ring capacity,
    /// at most [`MAX_MESSAGE_BATCH`]).
    pub message_batch: usize,
    /// Timer wheel tick.
    pub timer_tick: Duration,
    /// Buckets of each core's timer wheel (power of two).
    pub timer_slots: usize,
    /// Timers each core can hold.
    pub max_timers: usize,
    /// How long a core may keep having work after shutdown began before
    /// it gives up with [`ReactorError::DrainTimeout`] (which stops every
    /// core). A core blocked inside a closure or poller cannot time out.
    pub drain_timeout: Duration,
}

impl ReactorOptions {
    /// Defaults for the given CPUs: pinned, [`IdlePolicy::default`]
    /// (spin then sleep), 1024-slot rings drained 32 at a time, 1 ms ticks,
    /// 256 buckets, 1024 timers per core, 10 s drain timeout.
    pub fn new(cpus: &[usize]) -> Self {
        ReactorOptions {
            cpus: cpus.to_vec(),
            pin_threads: true,
            idle: IdlePolicy::default(),
            ring_capacity: 1024,
            message_batch: 32,
            timer_tick: Duration::from_millis(1),
            timer_slots: 256,
            max_timers: 1024,
            drain_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the options (not whether the CPUs exist: that is checked by
    /// [`ReactorBuilder::start`]).
    pub fn check(&self) -> Result<(), ReactorError> {
        let bad = |s: String| Err(ReactorError::InvalidOptions(s));
        if self.cpus.is_empty() || self.cpus.len() > MAX_CORES {
            return bad(format!("need 1..={MAX_CORES} cores, found {}", self.cpus.len()));
        }
        for (second, cpu) in self.cpus.iter().enumerate() {
            if let Some(first) = self.cpus[..second].iter().position(|c| c == cpu) {
                return Err(ReactorError::DuplicateCpu {
                    cpu: *cpu,
                    first,
                    second,
                });
            }
        }
        if !self.ring_capacity.is_power_of_two()
            || self.ring_capacity < 2
            || self.ring_capacity > mempool::ring::MAX_CAPACITY
        {
            return bad(format!(
                "ring_capacity must be a power of two >= 2, found {}",
                self.ring_capacity
            ));
        }
        if self.message_batch == 0 || self.message_batch > self.ring_capacity || self.message_batch > MAX_MESSAGE_BATCH
        {
            return bad(format!(
                "message_batch must be in 1..=min(ring_capacity, {MAX_MESSAGE_BATCH}), found {}",
                self.message_batch
            ));
        }
        if self.timer_tick < Duration::from_micros(1) || self.timer_tick > Duration::from_secs(1) {
            return bad(format!("timer_tick must be in 1us..=1s, found {:?}", self.timer_tick));
        }
        if self.timer_slots == 0 || !self.timer_slots.is_power_of_two() || self.timer_slots > crate::timer::MAX_SLOTS {
            return bad(format!(
                "timer_slots must be a power of two in 1..={}, found {}",
                crate::timer::MAX_SLOTS,
                self.timer_slots
            ));
        }
        if self.max_timers == 0 || self.max_timers > crate::timer::MAX_TIMERS {
            return bad(format!(
                "max_timers must be in 1..={}, found {}",
                crate::timer::MAX_TIMERS,
                self.max_timers
            ));
        }
        if self.drain_timeout.is_zero() {
            return bad("drain_timeout must be non-zero".to_string());
        }
        self.idle.check().map_err(ReactorError::InvalidOptions)
    }
}

/// Adds `n` to a counter that only the calling thread writes. A plain load
/// and a `SeqCst` store: no locked read-modify-write. `SeqCst` places every
/// counter update in the single total order the shutdown detector reasons
/// about (see the module docs).
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::SeqCst);
}

/// Message counters of one core, written by that core only.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) sent: AtomicU64,
    pub(crate) done: AtomicU64,
}

/// Sleep/wake state of one core; `sleeping` is read by every sender, so it
/// lives on its own cache lines.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Wake {
    pub(crate) sleeping: AtomicBool,
    pub(crate) thread: OnceLock<Thread>,
}

/// What other threads may touch of one core.
pub(crate) struct CoreSlot {
    pub(crate) cpu: usize,
    pub(crate) ring: Ring<Message>,
    pub(crate) counters: Counters,
    pub(crate) wake: Wake,
    pub(crate) stats: SharedStats,
    /// The core thread has exited (normally or by panic).
    pub(crate) stopped: AtomicBool,
}

/// Reactor-wide flags and the external message counters.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Control {
    pub(crate) stop_requested: AtomicBool,
    pub(crate) stopping: AtomicBool,
    pub(crate) aborted: AtomicBool,
    pub(crate) external_sent: AtomicU64,
    pub(crate) external_done: AtomicU64,
}

/// State shared by the core threads and every handle.
pub(crate) struct Shared {
    /// Unique per reactor (never 0), to recognise this reactor's core
    /// threads.
    pub(crate) id: usize,
    pub(crate) opts: ReactorOptions,
    pub(crate) start: Instant,
    tick_ns: u64,
    wake_enabled: bool,
    pub(crate) control: Control,
    pub(crate) cores: Box<[CoreSlot]>,
}

static NEXT_REACTOR_ID: AtomicUsize = AtomicUsize::new(1);

impl Shared {
    fn new(opts: ReactorOptions) -> Result<Shared, ReactorError> {
        let mut cores = Vec::with_capacity(opts.cpus.len());
        for (core, &cpu) in opts.cpus.iter().enumerate() {
            let ring = Ring::new(opts.ring_capacity).map_err(|source| ReactorError::Ring { core, source })?;
            cores.push(CoreSlot {
                cpu,
                ring,
                counters: Counters::default(),
                wake: Wake::default(),
                stats: SharedStats::default(),
                stopped: AtomicBool::new(false),
            });
        }
        Ok(Shared {
            id: NEXT_REACTOR_ID.fetch_add(1, Ordering::Relaxed),
            tick_ns: duration_ns(opts.timer_tick).max(1),
            wake_enabled: opts.idle.may_sleep(),
            start: Instant::now(),
            control: Control::default(),
            cores: cores.into_boxed_slice(),
            opts,
        })
    }

    /// Tick number of instant `t` (ticks since start).
    pub(crate) fn tick_of(&self, t: Instant) -> u64 {
        duration_ns(t.saturating_duration_since(self.start)) / self.tick_ns
    }

    /// Instant at which tick `tick` begins.
    pub(crate) fn tick_start(&self, tick: u64) -> Instant {
        self.start + Duration::from_nanos(tick.saturating_mul(self.tick_ns))
    }

    /// Whole ticks covering `d`, rounded up.
    pub(crate) fn ticks_ceil(&self, d: Duration) -> u64 {
        duration_ns(d).div_ceil(self.tick_ns)
    }

    /// First tick that starts no earlier than `now + delay`.
    pub(crate) fn due_tick(&self, now: Instant, delay: Duration) -> u64 {
        let at_ns = duration_ns(now.saturating_duration_since(self.start)).saturating_add(duration_ns(delay));
        at_ns.div_ceil(self.tick_ns)
    }

    /// Counts, enqueues and wakes. On failure the message is handed back
    /// (still owned by the caller).
    fn enqueue(&self, to: usize, msg: Message) -> Result<(), (SendError, Message)> {
        let cores = self.cores.len();
        let Some(dst) = self.cores.get(to) else {
            return Err((SendError::NoSuchCore { core: to, cores }, msg));
        };
        if dst.stopped.load(Ordering::Acquire) {
            // Pairs with the Release store of `stopped` when the core thread
            // exits.
            return Err((SendError::CoreStopped { core: to }, msg));
        }
        let from = current_core(self.id);
        match from {
            Some(k) => bump(&self.cores[k].counters.sent, 1),
            None => {
                self.control.external_sent.fetch_add(1, Ordering::SeqCst);
                if self.control.stopping.load(Ordering::SeqCst) {
                    self.control.external_done.fetch_add(1, Ordering::SeqCst);
                    return Err((SendError::ShuttingDown, msg));
                }
            }
        }
        if let Err(msg) = dst.ring.enqueue(msg) {
            // Not queued: count it as done so the counters balance.
            match from {
                Some(k) => bump(&self.cores[k].counters.done, 1),
                None => {
                    self.control.external_done.fetch_add(1, Ordering::SeqCst);
                }
            }
            return Err((SendError::Full { core: to }, msg));
        }
        if self.wake_enabled {
            // Dekker-style handshake with `Core::sleep`: this fence pairs with
            // the sleeper's SeqCst fence between its store of `sleeping` and
            // its emptiness check of the ring.
            fence(Ordering::SeqCst);
            if dst.wake.sleeping.load(Ordering::Relaxed) {
                if let Some(t) = dst.wake.thread.get() {
                    t.unpark();
                }
            }
        }
        Ok(())
    }

    pub(crate) fn send<F>(&self, to: usize, f: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.enqueue(to, Message::new(f)).map_err(|(e, m)| {
            // SAFETY: `m` is the caller's only copy; the ring did not take it.
            unsafe { m.discard() };
            e
        })
    }

    pub(crate) fn try_send<F>(&self, to: usize, f: F) -> Result<(), TrySendError<F>>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.enqueue(to, Message::new(f)).map_err(|(error, m)| TrySendError {
            error,
            // SAFETY: `m` was built from this `F` just above and is the only
            // live copy (the ring did not take it).
            closure: unsafe { m.take::<F>() },
        })
    }

    /// Starts shutdown (idempotent): one pending unit per core, then the
    /// `stopping` flag, then wake every core.
    pub(crate) fn request_stop(&self) {
        if self.control.stop_requested.swap(true, Ordering::SeqCst) {
            return;
        }
        self.control
            .external_sent
            .fetch_add(self.cores.len() as u64, Ordering::SeqCst);
        self.control.stopping.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    /// Makes every core leave as soon as it sees the flag (after a panic,
    /// a failed start or a drain timeout), without waiting for quiescence.
    pub(crate) fn abort(&self) {
        self.control.aborted.store(true, Ordering::SeqCst);
        self.request_stop();
        self.wake_all();
    }

    fn wake_all(&self) {
        for c in self.cores.iter() {
            if let Some(t) = c.wake.thread.get() {
                t.unpark();
            }
        }
    }

    /// True if no message and no core unit is pending (see module docs).
    /// Reads all `done` counters before all `sent` counters.
    pub(crate) fn quiescent(&self) -> bool {
        let mut done = self.control.external_done.load(Ordering::SeqCst);
        for c in self.cores.iter() {
            done += c.counters.done.load(Ordering::SeqCst);
        }
        let mut sent = self.control.external_sent.load(Ordering::SeqCst);
        for c in self.cores.iter() {
            sent += c.counters.sent.load(Ordering::SeqCst);
        }
        debug_assert!(sent >= done, "more messages done than sent");
        sent == done
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Messages left behind by a core that panicked or by an aborted
        // shutdown: drop their closures without running them.
        for c in self.cores.iter() {
            while let Some(m) = c.ring.dequeue() {
                // SAFETY: each dequeued copy is the single live copy.
                unsafe { m.discard() };
            }
        }
    }
}

/// Cloneable, `Send + Sync` handle to a running reactor: send closures to
/// cores, read statistics, request shutdown. Usable from any thread,
/// including core threads (a send from a core thread is accounted to that
/// core, and stays allowed while the reactor drains).
#[derive(Clone)]
pub struct ReactorHandle {
    shared: Arc<Shared>,
}

impl core::fmt::Debug for ReactorHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReactorHandle")
            .field("cores", &self.shared.cores.len())
            .finish_non_exhaustive()
    }
}

impl ReactorHandle {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        ReactorHandle { shared }
    }

    /// Queues `f` to run on core `core`; see [`CoreCtx::send`]. From a
    /// non-core thread, fails with [`SendError::ShuttingDown`] once shutdown
    /// has begun.
    pub fn send<F>(&self, core: usize, f: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.shared.send(core, f)
    }

    /// Like [`ReactorHandle::send`], handing the closure back on failure.
    pub fn try_send<F>(&self, core: usize, f: F) -> Result<(), TrySendError<F>>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.shared.try_send(core, f)
    }

    /// Number of cores.
    pub fn num_cores(&self) -> usize {
        self.shared.cores.len()
    }

    /// CPU of core `core`.
    pub fn cpu(&self, core: usize) -> Option<usize> {
        self.shared.cores.get(core).map(|c| c.cpu)
    }

    /// Last published counters of core `core` (published at least once per
    /// timer tick while the core runs, and when it stops).
    pub fn stats(&self, core: usize) -> Option<CoreStats> {
        self.shared.cores.get(core).map(|c| c.stats.snapshot(core, c.cpu))
    }

    /// Last published counters of every core.
    pub fn all_stats(&self) -> Vec<CoreStats> {
        (0..self.num_cores()).filter_map(|c| self.stats(c)).collect()
    }

    /// Messages queued to core `core` and not yet taken by it.
    pub fn queued(&self, core: usize) -> Option<usize> {
        self.shared.cores.get(core).map(|c| c.ring.len())
    }

    /// Starts shutdown (idempotent). The reactor's owner collects the
    /// threads with [`Reactor::shutdown`] or [`Reactor::join`].
    pub fn request_stop(&self) {
        self.shared.request_stop();
    }

    /// True once shutdown has been requested.
    pub fn is_stopping(&self) -> bool {
        self.shared.control.stopping.load(Ordering::Acquire)
    }
}

type InitFn = Arc<dyn Fn(&mut CoreCtx) + Send + Sync>;

/// Builder: options, pollers per core, and a start-up hook run on every core.
pub struct ReactorBuilder {
    opts: ReactorOptions,
    pollers: Vec<(usize, Box<dyn Poller + Send>)>,
    init: Option<InitFn>,
}

/// What a core thread returns: `None` if it failed before reporting ready
/// (the failure went through the ready channel instead).
type CoreResult = Option<Result<CoreStats, ReactorError>>;

/// A running set of pinned core threads. Dropping it shuts it down (and
/// ignores errors); call [`Reactor::shutdown`] to get the statistics and
/// errors.
pub struct Reactor {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<CoreResult>>,
}

impl ReactorBuilder {
    /// Adds a poller to core `core` (an index into `cpus`). Pollers given
    /// here must be `Send` (they move to the core thread); pollers created
    /// on the core with [`CoreCtx::add_poller`] need not be.
    pub fn poller<P: Poller + Send + 'static>(mut self, core: usize, poller: P) -> Self {
        self.pollers.push((core, Box::new(poller)));
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
        let ReactorBuilder { opts, pollers, init } = self;
        opts.check()?;
        if let Some((core, _)) = pollers.iter().find(|(c, _)| *c >= opts.cpus.len()) {
            return Err(ReactorError::InvalidOptions(format!(
                "poller given for core {core}, but there are only {} cores",
                opts.cpus.len()
            )));
        }
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
        }
        let n = opts.cpus.len();
        let shared = Arc::new(Shared::new(opts)?);
        let mut per_core: Vec<Vec<Box<dyn Poller + Send>>> = (0..n).map(|_| Vec::new()).collect();
        for (core, p) in pollers {
            per_core[core].push(p);
        }
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<(), ReactorError>)>();
        let mut reactor = Reactor {
            shared: shared.clone(),
            threads: Vec::with_capacity(n),
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
        for _ in 0..n {
            match ready_rx.recv() {
                Ok((_, Ok(()))) => {}
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

/// Body of one core thread.
fn core_thread(
    shared: Arc<Shared>,
    core: usize,
    pollers: Vec<Box<dyn Poller + Send>>,
    init: Option<InitFn>,
    ready: mpsc::Sender<(usize, Result<(), ReactorError>)>,
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
            let _ = tx.send((core, Ok(())));
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
                Ok(s) => stats.push(s),
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
    }
}
