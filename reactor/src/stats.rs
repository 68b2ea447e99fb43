//! Per-core statistics.
//!
//! Each core counts into a plain local [`CoreStats`] and publishes it to a
//! cache-line-aligned block of atomics (`SharedStats`) at least once per
//! timer tick, before it sleeps, and when it exits. Any thread can read a
//! [`CoreStats`] snapshot through [`crate::ReactorHandle::stats`]; each
//! field is individually exact as of the last publication, but fields are
//! not read atomically as a group (a snapshot may mix two publications).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters of one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CoreStats {
    /// Core index.
    pub core: usize,
    /// CPU the core thread is pinned to (now: a crowded core moves).
    pub cpu: usize,
    /// Loop iterations.
    pub loops: u64,
    /// Time spent in iterations that found work (messages, timers or a busy
    /// poller), in nanoseconds.
    pub busy_ns: u64,
    /// Time spent in iterations that found no work, including pauses and
    /// sleeps, in nanoseconds.
    pub idle_ns: u64,
    /// Closure messages executed on this core.
    pub messages_handled: u64,
    /// Closure messages this core sent (successfully queued) to any core.
    pub messages_sent: u64,
    /// Timer callbacks run.
    pub timers_fired: u64,
    /// Timers dropped unfired because shutdown began.
    pub timers_dropped: u64,
    /// Idle sleeps started (spin-then-sleep policy).
    pub sleeps: u64,
    /// Iterations that used pause hints (spin-then-pause policy).
    pub pauses: u64,
    /// Spin-then-wait: idle gaps ended by traffic while the core spun.
    pub spin_caught: u64,
    /// Spin-then-wait: gaps ended by traffic after the core gave up
    /// spinning, within `max_spin_us` (each grew the adaptive window).
    pub wait_short: u64,
    /// Spin-then-wait: gaps longer than `max_spin_us` (each halved it).
    pub wait_long: u64,
    /// Spin-then-wait: the adaptive spin window now, in microseconds.
    pub spin_window_us: u64,
    /// Spin-then-wait: times the core armed its wake-ups (each followed by
    /// a re-check, and a wait when that found nothing).
    pub arms: u64,
    /// Spin-then-wait: waits a poller's descriptor ended (a completion
    /// channel, a CM channel, a peer's doorbell).
    pub wakes_fd: u64,
    /// Spin-then-wait: waits the core's own doorbell ended (a message).
    pub wakes_bell: u64,
    /// Spin-then-wait: waits that ended with nothing ready (the timeout,
    /// the fallback slice of a poller that could not arm, or a signal).
    pub wakes_none: u64,
    /// Spin-then-wait: reads of the core's own doorbell (only after a wait
    /// that reported it ready).
    pub bell_clears: u64,
    /// Times the core was pinned to another CPU because its own was crowded
    /// (`crate::crowding`); counted by the watcher.
    pub crowd_moves: u64,
}

/// Atomic mirror of [`CoreStats`], written by its core only.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct SharedStats {
    loops: AtomicU64,
    busy_ns: AtomicU64,
    idle_ns: AtomicU64,
    messages_handled: AtomicU64,
    messages_sent: AtomicU64,
    timers_fired: AtomicU64,
    timers_dropped: AtomicU64,
    sleeps: AtomicU64,
    pauses: AtomicU64,
    spin_caught: AtomicU64,
    wait_short: AtomicU64,
    wait_long: AtomicU64,
    spin_window_us: AtomicU64,
    arms: AtomicU64,
    wakes_fd: AtomicU64,
    wakes_bell: AtomicU64,
    wakes_none: AtomicU64,
    bell_clears: AtomicU64,
}

impl SharedStats {
    /// Publishes the owner's counters. Relaxed: readers want recent values,
    /// not a happens-before edge (no other data is published with them).
    /// Only the owning core thread calls this.
    pub(crate) fn publish(&self, s: &CoreStats) {
        self.loops.store(s.loops, Ordering::Relaxed);
        self.busy_ns.store(s.busy_ns, Ordering::Relaxed);
        self.idle_ns.store(s.idle_ns, Ordering::Relaxed);
        self.messages_handled.store(s.messages_handled, Ordering::Relaxed);
        self.messages_sent.store(s.messages_sent, Ordering::Relaxed);
        self.timers_fired.store(s.timers_fired, Ordering::Relaxed);
        self.timers_dropped.store(s.timers_dropped, Ordering::Relaxed);
        self.sleeps.store(s.sleeps, Ordering::Relaxed);
        self.pauses.store(s.pauses, Ordering::Relaxed);
        self.spin_caught.store(s.spin_caught, Ordering::Relaxed);
        self.wait_short.store(s.wait_short, Ordering::Relaxed);
        self.wait_long.store(s.wait_long, Ordering::Relaxed);
        self.spin_window_us.store(s.spin_window_us, Ordering::Relaxed);
        self.arms.store(s.arms, Ordering::Relaxed);
        self.wakes_fd.store(s.wakes_fd, Ordering::Relaxed);
        self.wakes_bell.store(s.wakes_bell, Ordering::Relaxed);
        self.wakes_none.store(s.wakes_none, Ordering::Relaxed);
        self.bell_clears.store(s.bell_clears, Ordering::Relaxed);
    }

    /// Reads the last published counters. Any thread.
    pub(crate) fn snapshot(&self, core: usize, cpu: usize) -> CoreStats {
        CoreStats {
            core,
            cpu,
            loops: self.loops.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            idle_ns: self.idle_ns.load(Ordering::Relaxed),
            messages_handled: self.messages_handled.load(Ordering::Relaxed),
            messages_sent: self.messages_sent.load(Ordering::Relaxed),
            timers_fired: self.timers_fired.load(Ordering::Relaxed),
            timers_dropped: self.timers_dropped.load(Ordering::Relaxed),
            sleeps: self.sleeps.load(Ordering::Relaxed),
            pauses: self.pauses.load(Ordering::Relaxed),
            spin_caught: self.spin_caught.load(Ordering::Relaxed),
            wait_short: self.wait_short.load(Ordering::Relaxed),
            wait_long: self.wait_long.load(Ordering::Relaxed),
            spin_window_us: self.spin_window_us.load(Ordering::Relaxed),
            arms: self.arms.load(Ordering::Relaxed),
            wakes_fd: self.wakes_fd.load(Ordering::Relaxed),
            wakes_bell: self.wakes_bell.load(Ordering::Relaxed),
            wakes_none: self.wakes_none.load(Ordering::Relaxed),
            bell_clears: self.bell_clears.load(Ordering::Relaxed),
            // Filled by the caller from the core slot (the watcher counts
            // them, not the core).
            crowd_moves: 0,
        }
    }
}
