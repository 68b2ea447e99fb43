//! [`ReactorOptions`]: what a reactor is started with (cores and pinning,
//! idle policy, message rings, timer wheel, drain timeout), and the limits
//! they are checked against. Plain data; usable from any thread.

use std::time::Duration;

use crate::crowding::CrowdRule;
use crate::error::ReactorError;
use crate::idle::IdlePolicy;

/// Largest number of cores one reactor runs.
pub const MAX_CORES: usize = 1024;

/// Largest message batch drained per loop iteration.
pub const MAX_MESSAGE_BATCH: usize = 1024;

/// Options of a [`crate::Reactor`]. Build with [`ReactorOptions::new`] and adjust
/// fields, or from the reactor part of a `cores.json` with
/// [`crate::config::reactor_options`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReactorOptions {
    /// CPU of each core; core `i` runs on `cpus[i]`.
    pub cpus: Vec<usize>,
    /// Pin each core thread to its CPU (default `true`). When `false`, the
    /// CPU numbers are only labels (useful to run more cores than CPUs in a
    /// test).
    pub pin_threads: bool,
    /// The crowded-CPU move of pinned cores (`crate::crowding`): `Some`
    /// (the default, [`CrowdRule::default`]) starts a watcher thread that
    /// pins a core whose CPU others crowd to an idle CPU instead;
    /// `None` keeps every core on its CPU. Nothing without `pin_threads`.
    pub crowd_move: Option<CrowdRule>,
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
            crowd_move: Some(CrowdRule::default()),
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
    /// [`crate::ReactorBuilder::start`]).
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
        if let Some(r) = &self.crowd_move {
            let share = 0.0..=1.0;
            if r.window.is_zero() || !share.contains(&r.wait_min) || !share.contains(&r.idle_run_max) {
                return bad(format!("crowd_move: a non-zero window, shares in 0..=1; found {r:?}"));
            }
        }
        self.idle.check().map_err(ReactorError::InvalidOptions)
    }
}
