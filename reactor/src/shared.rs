//! What the core threads and every handle share: one slot per core (its
//! inbound message ring, message counters, sleep/wake state, published
//! statistics), the reactor-wide flags, the cross-core send path and the
//! shutdown detector. Generic over the context a message closure receives
//! (`C`, the crate's `CoreCtx`), so this module depends on nothing above it.
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

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

use mempool::ring::Ring;

use crate::error::{ReactorError, SendError, TrySendError};
use crate::msg::Message;
use crate::options::ReactorOptions;
use crate::stats::SharedStats;

thread_local! {
    /// `(reactor id, core index)` of the reactor core running on this
    /// thread; reactor id 0 means "not a core thread".
    static CURRENT_CORE: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The core index of the calling thread if it is a core of reactor
/// `reactor_id`.
pub(crate) fn current_core(reactor_id: usize) -> Option<usize> {
    let (id, core) = CURRENT_CORE.with(|c| c.get());
    (id == reactor_id).then_some(core)
}

/// Whether the calling thread is a core of any reactor: code that may be
/// called both on a core and on a helper thread asks this before it waits
/// (a core never waits; a helper may). Any thread may call it.
pub fn on_core_thread() -> bool {
    CURRENT_CORE.with(|c| c.get().0 != 0)
}

/// Marks the calling thread as core `core` of reactor `reactor_id`. Called
/// once by each core thread, on that thread, before its loop starts.
pub(crate) fn set_current_core(reactor_id: usize, core: usize) {
    CURRENT_CORE.with(|c| c.set((reactor_id, core)));
}

/// `d` in nanoseconds, saturating.
pub(crate) fn duration_ns(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
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
    /// The core's epoll doorbell (spin-then-wait only; see `waiter`).
    pub(crate) bell: Option<crate::waiter::Doorbell>,
}

impl Wake {
    /// Wakes the core: rings its epoll doorbell (spin-then-wait) or unparks
    /// its thread (spin-then-sleep).
    pub(crate) fn wake(&self) {
        if let Some(b) = &self.bell {
            b.ring();
        } else if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

/// What other threads may touch of one core. `C` is the context message
/// closures receive.
pub(crate) struct CoreSlot<C> {
    pub(crate) cpu: usize,
    pub(crate) ring: Ring<Message<C>>,
    pub(crate) counters: Counters,
    pub(crate) wake: Wake,
    pub(crate) stats: SharedStats,
    /// The core thread has exited (normally or by panic).
    pub(crate) stopped: AtomicBool,
    /// Crowded-CPU moves of this core, and the CPU it is pinned to now
    /// (`cpu` until the first), written by the watcher thread only
    /// (Relaxed: figures for the statistics, nothing published with them).
    pub(crate) crowd_moves: AtomicU64,
    pub(crate) home: AtomicUsize,
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

/// State shared by the core threads and every handle. `C` is the context
/// message closures receive (the crate's `CoreCtx`).
pub(crate) struct Shared<C> {
    /// Unique per reactor (never 0), to recognise this reactor's core
    /// threads.
    pub(crate) id: usize,
    pub(crate) opts: ReactorOptions,
    pub(crate) start: Instant,
    tick_ns: u64,
    wake_enabled: bool,
    pub(crate) control: Control,
    pub(crate) cores: Box<[CoreSlot<C>]>,
}

static NEXT_REACTOR_ID: AtomicUsize = AtomicUsize::new(1);

impl<C> Shared<C> {
    /// One slot (and ring) per configured core. Called by the thread that
    /// starts the reactor.
    pub(crate) fn new(opts: ReactorOptions) -> Result<Shared<C>, ReactorError> {
        let mut cores = Vec::with_capacity(opts.cpus.len());
        for (core, &cpu) in opts.cpus.iter().enumerate() {
            let ring = Ring::new(opts.ring_capacity).map_err(|source| ReactorError::Ring { core, source })?;
            cores.push(CoreSlot {
                cpu,
                ring,
                counters: Counters::default(),
                wake: Wake {
                    bell: if opts.idle.waits_in_epoll() {
                        Some(
                            crate::waiter::Doorbell::new()
                                .map_err(|e| ReactorError::InvalidOptions(format!("core {core}: eventfd: {e}")))?,
                        )
                    } else {
                        None
                    },
                    ..Wake::default()
                },
                stats: SharedStats::default(),
                stopped: AtomicBool::new(false),
                crowd_moves: AtomicU64::new(0),
                home: AtomicUsize::new(cpu),
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
    fn enqueue(&self, to: usize, msg: Message<C>) -> Result<(), (SendError, Message<C>)> {
        let cores = self.cores.len();
        let Some(dst) = self.cores.get(to) else {
            return Err((SendError::NoSuchCore { core: to, cores }, msg));
        };
        let from = current_core(self.id);
        if dst.stopped.load(Ordering::Acquire) {
            // Pairs with the Release store of `stopped` when the core thread
            // exits. A core that drained and left because shutdown was asked
            // for is, to an external sender, a reactor shutting down: which
            // of the two errors it sees must not depend on how fast the core
            // stopped. A core that left on a panic (abort) is reported as
            // stopped.
            let clean_stop =
                self.control.stopping.load(Ordering::SeqCst) && !self.control.aborted.load(Ordering::SeqCst);
            if from.is_none() && clean_stop {
                return Err((SendError::ShuttingDown, msg));
            }
            return Err((SendError::CoreStopped { core: to }, msg));
        }
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
                dst.wake.wake();
            }
        }
        Ok(())
    }

    pub(crate) fn send<F>(&self, to: usize, f: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut C) + Send + 'static,
    {
        self.enqueue(to, Message::new(f)).map_err(|(e, m)| {
            // SAFETY: `m` is the caller's only copy; the ring did not take it.
            unsafe { m.discard() };
            e
        })
    }

    pub(crate) fn try_send<F>(&self, to: usize, f: F) -> Result<(), TrySendError<F>>
    where
        F: FnOnce(&mut C) + Send + 'static,
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
            c.wake.wake();
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

impl<C> Drop for Shared<C> {
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
