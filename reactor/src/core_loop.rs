//! The per-core run-to-completion loop, the [`Poller`] trait and the
//! [`CoreCtx`] handed to pollers, message closures and timer callbacks.
//!
//! One iteration of the loop:
//! 1. fire due timers (coarse wheel, see [`crate::timer`]);
//! 2. dequeue up to `message_batch` closure messages from the core's ring
//!    and run them in order;
//! 3. poll every poller once;
//! 4. account the iteration as busy (any message, timer or `Busy` poller) or
//!    idle, then apply the idle policy (see [`crate::idle`]). Under
//!    spin-then-wait, an idle core first *arms* (its `sleeping` flag, then
//!    every poller's [`Poller::arm`]); the next iteration is the re-check, and
//!    if it is idle too the core blocks in its `epoll` (`crate::waiter`).
//!
//! Everything in this module runs on the owning core thread; `CoreCtx` is
//! neither `Send` nor `Sync`.

use std::any::{Any, TypeId};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock;
use crate::error::{ReactorError, SendError, TimerError, TrySendError};
use crate::idle::{IdleAction, IdlePolicy, IdleState};
use crate::loop_timing::{LoopTiming, Section};
use crate::msg::Message;
use crate::shared::{bump, duration_ns, set_current_core, Shared};
use crate::stats::CoreStats;
use crate::timer::{TimerId, TimerWheel};
use crate::waiter::{WaitOutcome, Waiter};

/// Result of one [`Poller::poll`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollStatus {
    /// The poller did work (or, from [`Poller::drain`], still has work in
    /// flight).
    Busy,
    /// Nothing to do right now.
    Idle,
}

/// Something the core loop polls on every iteration: a completion queue, a
/// connection's receive ring, a listener, ...
///
/// Pollers run on their core thread only; they need not be `Send` unless
/// they are handed to [`crate::ReactorBuilder::poller`] before start.
pub trait Poller {
    /// Does a bounded amount of work and reports whether there was any.
    /// Must not block.
    fn poll(&mut self, ctx: &mut CoreCtx) -> PollStatus;

    /// Called instead of [`Poller::poll`] once shutdown has begun, until the
    /// whole reactor is quiescent. A draining poller must stop accepting new
    /// external work (new connections, new requests from the wire), finish
    /// what it has in flight, and return [`PollStatus::Busy`] for as long as
    /// anything is still in flight — even on a call that made no progress —
    /// so that it cannot produce work after reporting `Idle`. The default
    /// simply polls.
    fn drain(&mut self, ctx: &mut CoreCtx) -> PollStatus {
        self.poll(ctx)
    }

    /// Spin-then-wait: the core is about to block. Make sure that new work
    /// for this poller makes a descriptor it registered with
    /// [`CoreCtx::watch_fd`] readable (request a completion notification,
    /// tell peers that we sleep), clearing what made it readable before.
    /// The core polls every poller once more after arming, so work that
    /// arrived before arming is found then; the poller need not look for it
    /// here. [`Arm::Unsupported`] (the default) makes the core sleep in short
    /// slices instead of blocking.
    fn arm(&mut self, _ctx: &mut CoreCtx) -> Arm {
        Arm::Unsupported
    }

    /// The core woke up (or found work while armed): undo what
    /// [`Poller::arm`] told peers (for instance, that we sleep), so that
    /// they stop ringing. Called once after every `arm`.
    fn disarm(&mut self, _ctx: &mut CoreCtx) {}
}

/// What [`Poller::arm`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// New work will make a watched descriptor readable.
    Armed,
    /// This poller has no way to signal new work (or cannot now): the core
    /// must come back to poll it soon.
    Unsupported,
}

impl<F> Poller for F
where
    F: FnMut(&mut CoreCtx) -> PollStatus,
{
    fn poll(&mut self, ctx: &mut CoreCtx) -> PollStatus {
        self(ctx)
    }
}

/// Identifies a poller on its core (for [`CoreCtx::remove_poller`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PollerId(u64);

/// A timer callback.
pub(crate) enum TimerFn {
    Once(Box<dyn FnOnce(&mut CoreCtx)>),
    Every(Box<dyn FnMut(&mut CoreCtx)>),
}

/// Per-core context: the core's identity, its timer wheel, its per-core
/// local values, and the send API. Passed as `&mut` to pollers, message
/// closures and timer callbacks; only exists on its core thread.
pub struct CoreCtx {
    core: usize,
    cpu: usize,
    shared: Arc<Shared<CoreCtx>>,
    now: Instant,
    draining: bool,
    wheel: TimerWheel<TimerFn>,
    next_poller_id: u64,
    added_pollers: Vec<(PollerId, Box<dyn Poller>)>,
    removed_pollers: Vec<PollerId>,
    locals: Vec<(TypeId, Box<dyn Any>)>,
    stats: CoreStats,
    /// The core's epoll (spin-then-wait only).
    waiter: Option<Waiter>,
}

impl CoreCtx {
    /// Index of this core (position in the configured core list).
    pub fn core(&self) -> usize {
        self.core
    }

    /// CPU this core is pinned to.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// Number of cores of the reactor.
    pub fn num_cores(&self) -> usize {
        self.shared.cores.len()
    }

    /// Time taken at the start of the current loop iteration (cheap; use
    /// [`crate::clock::now`] if you need better than iteration accuracy).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// True once shutdown has begun on this core: pollers are drained,
    /// timers no longer fire, and only core threads may still send.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// The state this core shares with the other cores and the handles.
    pub(crate) fn shared(&self) -> &Arc<Shared<CoreCtx>> {
        &self.shared
    }

    /// Queues `f` to run on core `core` (this core included), like SPDK's
    /// `spdk_thread_send_msg`. Messages from one sender to one core run in
    /// the order they were sent. Closures of up to
    /// [`crate::INLINE_MESSAGE_BYTES`] bytes travel inline without
    /// allocation; larger ones are boxed. A full ring returns
    /// [`SendError::Full`] and drops `f` (use [`CoreCtx::try_send`] to get it
    /// back). Never blocks.
    pub fn send<F>(&self, core: usize, f: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.shared.send(core, f)
    }

    /// Like [`CoreCtx::send`], but hands the closure back on failure.
    pub fn try_send<F>(&self, core: usize, f: F) -> Result<(), TrySendError<F>>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.shared.try_send(core, f)
    }

    /// Runs `f` on this core once, no earlier than `delay` from now (rounded
    /// up to the wheel's tick; at most about one tick plus one loop
    /// iteration late). The callback is boxed (one allocation, none for a
    /// closure that captures nothing). Fails if the wheel is full or the
    /// core is draining.
    pub fn schedule_timer<F>(&mut self, delay: Duration, f: F) -> Result<TimerId, TimerError>
    where
        F: FnOnce(&mut CoreCtx) + 'static,
    {
        if self.draining {
            return Err(TimerError::ShuttingDown);
        }
        let due = self.shared.due_tick(clock::now(), delay);
        self.wheel.schedule_at(due, 0, TimerFn::Once(Box::new(f)))
    }

    /// Runs `f` on this core every `period` (rounded up to whole ticks, at
    /// least one), first after one period, until cancelled or shutdown.
    pub fn schedule_periodic<F>(&mut self, period: Duration, f: F) -> Result<TimerId, TimerError>
    where
        F: FnMut(&mut CoreCtx) + 'static,
    {
        if self.draining {
            return Err(TimerError::ShuttingDown);
        }
        if period.is_zero() {
            return Err(TimerError::ZeroPeriod);
        }
        let period_ticks = self.shared.ticks_ceil(period).max(1);
        let due = self.shared.due_tick(clock::now(), period);
        self.wheel.schedule_at(due, period_ticks, TimerFn::Every(Box::new(f)))
    }

    /// Cancels a timer of this core; `false` if it already fired (one-shot)
    /// or was cancelled before.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.wheel.cancel(id)
    }

    /// Timers armed (or firing) on this core.
    pub fn timers_pending(&self) -> usize {
        self.wheel.len()
    }

    /// Adds a poller to this core. It is first polled in the next loop
    /// iteration.
    pub fn add_poller(&mut self, poller: Box<dyn Poller>) -> PollerId {
        let id = PollerId(self.next_poller_id);
        self.next_poller_id += 1;
        self.added_pollers.push((id, poller));
        id
    }

    /// Removes (and drops) a poller of this core at the end of the current
    /// loop iteration. Unknown ids are ignored.
    pub fn remove_poller(&mut self, id: PollerId) {
        self.removed_pollers.push(id);
    }

    /// Stores a per-core value of type `T` (one per type), returning the
    /// previous one. Message closures reach per-core state this way.
    pub fn insert_local<T: 'static>(&mut self, value: T) -> Option<T> {
        let old = self.remove_local::<T>();
        self.locals.push((TypeId::of::<T>(), Box::new(value)));
        old
    }

    /// The per-core value of type `T`, if any.
    pub fn local<T: 'static>(&self) -> Option<&T> {
        self.locals
            .iter()
            .find(|(t, _)| *t == TypeId::of::<T>())
            .and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// The per-core value of type `T`, mutably.
    pub fn local_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.locals
            .iter_mut()
            .find(|(t, _)| *t == TypeId::of::<T>())
            .and_then(|(_, v)| v.downcast_mut::<T>())
    }

    /// Removes the per-core value of type `T`.
    pub fn remove_local<T: 'static>(&mut self) -> Option<T> {
        let pos = self.locals.iter().position(|(t, _)| *t == TypeId::of::<T>())?;
        let (_, v) = self.locals.swap_remove(pos);
        v.downcast::<T>().ok().map(|b| *b)
    }

    /// Adds `fd` to the descriptors this core's wait watches (readable,
    /// level-triggered) under spin-then-wait; a no-op under other policies.
    /// The poller that owns `fd` clears it in [`Poller::arm`] and must
    /// [`CoreCtx::unwatch_fd`] it before closing it.
    pub fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        match self.waiter.as_mut() {
            Some(w) => w.watch(fd),
            None => Ok(()),
        }
    }

    /// Stops watching `fd` (see [`CoreCtx::watch_fd`]).
    pub fn unwatch_fd(&mut self, fd: std::os::fd::RawFd) {
        if let Some(w) = self.waiter.as_mut() {
            w.unwatch(fd);
        }
    }

    /// Whether this core blocks in its epoll when idle (spin-then-wait), so
    /// that pollers' [`Poller::arm`] matters.
    pub fn waits_in_epoll(&self) -> bool {
        self.waiter.is_some()
    }

    /// This core's counters as of now (exact, unlike the published copy).
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// Asks the whole reactor to shut down (drain, then stop). The owner of
    /// the [`crate::Reactor`] still has to call `shutdown` or `join` to
    /// collect the threads.
    pub fn request_stop(&self) {
        self.shared.request_stop();
    }
}

/// Everything one core thread owns.
pub(crate) struct Core {
    ctx: CoreCtx,
    pollers: Vec<(PollerId, Box<dyn Poller>)>,
    batch: Vec<Message<CoreCtx>>,
    expired: Vec<(TimerId, TimerFn)>,
    idle: IdleState,
    /// Spin-then-wait: armed in the previous iteration; `Some(all pollers
    /// armed)`.
    armed: Option<bool>,
    /// The core blocked and has not re-read the OS clock since: the first
    /// iteration after a block runs on the counter's time and re-anchors at
    /// its end (see `Core::run`).
    resync_due: bool,
}

impl Core {
    /// Builds the core's state. Runs on the core thread after pinning, so
    /// that the allocations are local to the core's NUMA node.
    pub(crate) fn new(
        shared: Arc<Shared<CoreCtx>>,
        core: usize,
        pollers: Vec<Box<dyn Poller + Send>>,
    ) -> Result<Core, ReactorError> {
        let opts = &shared.opts;
        let wheel = TimerWheel::new(opts.timer_slots, opts.max_timers).map_err(ReactorError::InvalidOptions)?;
        let cpu = shared.cores[core].cpu;
        let waiter = match &shared.cores[core].wake.bell {
            Some(bell) => {
                let mut w = Waiter::new().map_err(|e| ReactorError::InvalidOptions(format!("epoll: {e}")))?;
                w.watch(bell.raw_fd())
                    .map_err(|e| ReactorError::InvalidOptions(format!("epoll: {e}")))?;
                Some(w)
            }
            None => None,
        };
        let mut ctx = CoreCtx {
            waiter,
            core,
            cpu,
            now: clock::now(),
            draining: false,
            wheel,
            next_poller_id: 0,
            added_pollers: Vec::new(),
            removed_pollers: Vec::new(),
            locals: Vec::new(),
            stats: CoreStats {
                core,
                cpu,
                ..CoreStats::default()
            },
            shared: shared.clone(),
        };
        let mut list: Vec<(PollerId, Box<dyn Poller>)> = Vec::with_capacity(pollers.len());
        for p in pollers {
            let id = PollerId(ctx.next_poller_id);
            ctx.next_poller_id += 1;
            list.push((id, p));
        }
        Ok(Core {
            batch: vec![Message::EMPTY; opts.message_batch],
            expired: Vec::with_capacity(opts.max_timers),
            idle: IdleState::new(opts.idle),
            armed: None,
            resync_due: false,
            pollers: list,
            ctx,
        })
    }

    /// Marks the calling thread as this core (for sends through a
    /// [`ReactorHandle`] on a core thread).
    pub(crate) fn enter_thread(&self) {
        set_current_core(self.ctx.shared.id, self.ctx.core);
    }

    pub(crate) fn ctx_mut(&mut self) -> &mut CoreCtx {
        &mut self.ctx
    }

    fn publish_stats(&mut self) {
        let c = self.idle.spin_counts();
        let s = &mut self.ctx.stats;
        (s.spin_caught, s.wait_short, s.wait_long, s.spin_window_us) =
            (c.spin_caught, c.wait_short, c.wait_long, c.window_us);
        self.ctx.shared.cores[self.ctx.core].stats.publish(&self.ctx.stats);
    }

    /// Runs the loop until shutdown completes. Returns the final counters.
    pub(crate) fn run(&mut self) -> Result<CoreStats, ReactorError> {
        let shared = self.ctx.shared.clone();
        let me = self.ctx.core;
        let slot = &shared.cores[me];
        let tick = shared.opts.timer_tick;
        let mut next_tick_at = shared.start + tick;
        let mut draining = false;
        // While draining, whether this core currently holds one unit of the
        // shutdown count (see `Shared::request_stop`).
        let mut holding_unit = false;
        let mut drain_deadline = clock::now();
        let mut t_prev = clock::now();
        // Diagnostics only (the `loop-timing` feature; nothing without it).
        let mut lt = LoopTiming::new();
        loop {
            // Nothing since the last iteration's end, but after a
            // `continue` that skipped `finish` (draining).
            lt.lap(Section::Idle);
            self.ctx.now = t_prev;
            let mut busy = false;
            // Work other than timers (the adaptive spin learns from it).
            let mut traffic = false;

            // 1. Timers.
            if !draining && t_prev >= next_tick_at {
                let now_tick = shared.tick_of(t_prev);
                next_tick_at = shared.tick_start(now_tick + 1);
                busy |= self.fire_timers(now_tick) > 0;
                self.publish_stats();
            }
            lt.lap(Section::Timers);

            // 2. Messages, one batch.
            let n = slot.ring.dequeue_burst(&mut self.batch);
            for i in 0..n {
                let m = self.batch[i];
                // SAFETY: the ring handed out this copy of the message once;
                // the copy left in the ring's slot and the one in `batch` are
                // never used again (the slot is overwritten by a producer,
                // `batch[i]` by the next dequeue).
                unsafe { m.run(&mut self.ctx) };
            }
            busy |= n > 0;
            lt.lap(Section::Messages);

            // 3. Pollers.
            for (pi, (_, p)) in self.pollers.iter_mut().enumerate() {
                let status = if draining {
                    p.drain(&mut self.ctx)
                } else {
                    p.poll(&mut self.ctx)
                };
                traffic |= status == PollStatus::Busy;
                lt.lap(Section::poller(pi));
            }
            traffic |= n > 0;
            busy |= traffic;
            self.apply_poller_changes();

            // 4. Accounting. Order matters for shutdown: re-take a unit
            // before counting the messages done, so the pending count
            // never drops to zero while this core has work that those
            // messages caused.
            if draining {
                if busy && !holding_unit {
                    bump(&slot.counters.sent, 1);
                    holding_unit = true;
                } else if !busy && holding_unit {
                    bump(&slot.counters.done, 1);
                    holding_unit = false;
                }
            }
            if n > 0 {
                bump(&slot.counters.done, n as u64);
                self.ctx.stats.messages_handled += n as u64;
            }
            // The first iteration after a block re-reads the OS clock here,
            // at its end, once the work that woke the core is done: not on
            // the way from the wake-up to that work (a system call in
            // guests without a vDSO clock; issue 24 item 1).
            let t_now = if std::mem::take(&mut self.resync_due) {
                clock::resync()
            } else {
                clock::now()
            };
            let dt_ns = duration_ns(t_now.saturating_duration_since(t_prev));
            if busy {
                self.ctx.stats.busy_ns += dt_ns;
            } else {
                self.ctx.stats.idle_ns += dt_ns;
            }
            self.ctx.stats.loops += 1;
            t_prev = t_now;
            lt.lap(Section::Accounting);

            // 5. Shutdown.
            if !draining {
                if shared.control.stopping.load(Ordering::Acquire) {
                    // Pairs with the Release half of the SeqCst store in
                    // `Shared::request_stop`.
                    draining = true;
                    self.ctx.draining = true;
                    holding_unit = true;
                    self.ctx.stats.timers_dropped += self.ctx.wheel.clear() as u64;
                    drain_deadline = t_now + shared.opts.drain_timeout;
                    self.publish_stats();
                    continue;
                }
            } else {
                if shared.control.aborted.load(Ordering::Acquire) {
                    break;
                }
                if !holding_unit && shared.quiescent() {
                    break;
                }
                // Only a core that still has work gives up; idle cores wait
                // for quiescence or for the abort of the core that gives up.
                if holding_unit && t_now >= drain_deadline {
                    shared.abort();
                    self.publish_stats();
                    return Err(ReactorError::DrainTimeout {
                        core: me,
                        timeout_ms: duration_ns(shared.opts.drain_timeout) / 1_000_000,
                    });
                }
            }

            // 6. Idle policy. Spin-then-wait armed in the previous
            // iteration: this one was the re-check. Work found: back to
            // spinning. None: block until a watched source fires.
            if let Some(all_armed) = self.armed.take() {
                // Whether the core's doorbell may be readable: only a wait
                // that reported it ready clears it (an uncleared ring makes
                // the next wait return at once, see `crate::waiter`).
                let mut outcome = WaitOutcome::default();
                if !busy && !draining {
                    lt.lap(Section::Idle);
                    outcome = self.wait(all_armed, next_tick_at);
                    lt.lap(Section::Wait);
                    // After a block: the counter's time now, the OS clock
                    // at the end of the next iteration (`resync_due`).
                    let t_now = self.after_block();
                    self.ctx.stats.idle_ns += duration_ns(t_now.saturating_duration_since(t_prev));
                    t_prev = t_now;
                }
                self.disarm(outcome.bell);
                // Work found by the re-check ends the idle gap like any
                // other (the adaptive spin learns from it, and the core
                // spins again after it).
                if busy {
                    self.idle.after_work_at(true, traffic, t_now);
                }
                lt.lap(Section::Idle);
                lt.finish();
                continue;
            }
            // A core without pollers has nothing to poll
            // (the target's admin core): it waits for a message or its next
            // timer tick, without spinning first or waking in slices, so it
            // does not take time from whatever else runs on its CPU.
            let action = if self.pollers.is_empty() && !busy && shared.opts.idle.may_sleep() {
                if shared.opts.idle.waits_in_epoll() {
                    IdleAction::Wait
                } else {
                    IdleAction::Sleep(POLLERLESS_MAX_SLEEP)
                }
            } else {
                self.idle.after_work_at(busy, traffic, t_now)
            };
            match action {
                IdleAction::Continue => {}
                IdleAction::Pause(spins) => {
                    self.ctx.stats.pauses += 1;
                    for _ in 0..spins {
                        std::hint::spin_loop();
                    }
                }
                // While draining, idle cores only wait for the others to
                // finish: yield instead of sleeping so shutdown is prompt.
                IdleAction::Sleep(_) | IdleAction::Wait if draining => std::thread::yield_now(),
                IdleAction::Yield => std::thread::yield_now(),
                IdleAction::Sleep(max) => {
                    self.sleep(max, next_tick_at);
                    // The sleep is idle time whatever the next iteration
                    // finds (a message may have woken the core). After a
                    // block: the OS clock at the end of the next iteration.
                    let t_now = self.after_block();
                    self.ctx.stats.idle_ns += duration_ns(t_now.saturating_duration_since(t_prev));
                    t_prev = t_now;
                }
                IdleAction::Wait => self.armed = Some(self.arm()),
            }
            lt.lap(Section::Idle);
            lt.finish();
        }
        lt.report(me);
        self.publish_stats();
        Ok(self.ctx.stats)
    }

    /// The time right after a block, from the counter (no OS clock read on
    /// the way to the work that woke the core); the OS clock is read at the
    /// end of the next iteration.
    fn after_block(&mut self) -> Instant {
        self.resync_due = true;
        clock::after_block()
    }

    /// Fires every timer due at `now_tick`; returns how many ran.
    fn fire_timers(&mut self, now_tick: u64) -> usize {
        self.ctx.wheel.expire(now_tick, &mut self.expired);
        let fired = self.expired.len();
        // Callbacks may schedule or cancel timers; `expired` is not part of
        // the wheel, so draining it while they run is fine.
        while let Some((id, cb)) = self.expired.pop() {
            match cb {
                TimerFn::Once(f) => {
                    f(&mut self.ctx);
                    self.ctx.wheel.finish(id, None);
                }
                TimerFn::Every(mut f) => {
                    f(&mut self.ctx);
                    self.ctx.wheel.finish(id, Some(TimerFn::Every(f)));
                }
            }
        }
        self.ctx.stats.timers_fired += fired as u64;
        fired
    }

    fn apply_poller_changes(&mut self) {
        if !self.ctx.added_pollers.is_empty() {
            self.pollers.append(&mut self.ctx.added_pollers);
        }
        if !self.ctx.removed_pollers.is_empty() {
            let removed = std::mem::take(&mut self.ctx.removed_pollers);
            self.pollers.retain(|(id, _)| !removed.contains(id));
            self.ctx.removed_pollers = removed;
            self.ctx.removed_pollers.clear();
        }
    }

    /// Spin-then-wait, first half: tell senders that this core sleeps, then
    /// arm every poller. Returns whether all of them could arm. The next loop
    /// iteration is the re-check (see `crate::waiter` for the handshake).
    fn arm(&mut self) -> bool {
        let slot = &self.ctx.shared.cores[self.ctx.core];
        // SeqCst store: ordered before the re-check's loads of the ring and
        // of every poller's sources (pairs with the SeqCst fence a sender
        // makes between its enqueue and its load of `sleeping`).
        slot.wake.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.ctx.stats.arms += 1;
        let mut all = true;
        for (_, p) in self.pollers.iter_mut() {
            all &= p.arm(&mut self.ctx) == Arm::Armed;
        }
        all
    }

    /// Undoes [`Core::arm`]; clears the core's doorbell when the wait
    /// reported it ready (`bell_ready`).
    fn disarm(&mut self, bell_ready: bool) {
        let shared = self.ctx.shared.clone();
        let slot = &shared.cores[self.ctx.core];
        slot.wake.sleeping.store(false, Ordering::Relaxed);
        for (_, p) in self.pollers.iter_mut() {
            p.disarm(&mut self.ctx);
        }
        // Cleared after `sleeping`: a sender that saw the flag before it was
        // cleared may ring once more; that only costs one spurious wake.
        // Not cleared when the wait did not report it (or the re-check found
        // work and the core did not wait): a ring it holds keeps it readable,
        // so the next wait returns at once and reports it. That saves the
        // `read` of an empty eventfd on every wake-up by a poller's source.
        if let Some(b) = slot.wake.bell.as_ref().filter(|_| bell_ready) {
            b.clear();
            self.ctx.stats.bell_clears += 1;
        }
    }

    /// Spin-then-wait, second half: block in the core's epoll until a
    /// watched source is ready, the next timer tick (if timers are armed),
    /// `max_wait_ms`, or — when some poller could not arm — the fallback
    /// sleep.
    fn wait(&mut self, all_armed: bool, next_tick_at: Instant) -> WaitOutcome {
        let IdlePolicy::SpinThenWait {
            max_wait_ms,
            fallback_sleep_us,
            ..
        } = self.ctx.shared.opts.idle
        else {
            return WaitOutcome::default();
        };
        let mut d = if all_armed {
            Duration::from_millis(u64::from(max_wait_ms))
        } else {
            Duration::from_micros(u64::from(fallback_sleep_us))
        };
        if !self.ctx.wheel.is_empty() {
            d = d.min(next_tick_at.saturating_duration_since(clock::now()));
        }
        if d.is_zero() || self.ctx.shared.control.stopping.load(Ordering::Relaxed) {
            return WaitOutcome::default();
        }
        self.ctx.stats.sleeps += 1;
        self.publish_stats();
        let bell = self.ctx.shared.cores[self.ctx.core]
            .wake
            .bell
            .as_ref()
            .map(|b| b.raw_fd());
        let Some(w) = &self.ctx.waiter else {
            return WaitOutcome::default();
        };
        let out = w.wait(d, bell);
        let s = &mut self.ctx.stats;
        s.wakes_bell += u64::from(out.bell);
        s.wakes_fd += u64::from(out.others > 0);
        s.wakes_none += u64::from(!out.bell && out.others == 0);
        out
    }

    /// Sleeps up to `max`, but not past the next timer tick if timers are
    /// armed; returns early when a message arrives.
    fn sleep(&mut self, max: Duration, next_tick_at: Instant) {
        let now = clock::now();
        let mut d = max;
        if !self.ctx.wheel.is_empty() {
            d = d.min(next_tick_at.saturating_duration_since(now));
        }
        if d.is_zero() {
            return;
        }
        self.ctx.stats.sleeps += 1;
        self.publish_stats();
        let slot = &self.ctx.shared.cores[self.ctx.core];
        slot.wake.sleeping.store(true, Ordering::Relaxed);
        // Dekker-style handshake with `Shared::enqueue_and_wake`: this fence
        // pairs with the sender's SeqCst fence between its enqueue and its
        // load of `sleeping`. Either the sender sees `sleeping == true` and
        // unparks us, or we see its message here and do not park.
        fence(Ordering::SeqCst);
        if slot.ring.is_empty() && !self.ctx.shared.control.stopping.load(Ordering::Relaxed) {
            std::thread::park_timeout(d);
        }
        slot.wake.sleeping.store(false, Ordering::Relaxed);
    }
}

/// The longest a core without pollers sleeps at a time when nothing wakes
/// it (messages and stop requests unpark it; timers bound the sleep).
const POLLERLESS_MAX_SLEEP: Duration = Duration::from_millis(100);
