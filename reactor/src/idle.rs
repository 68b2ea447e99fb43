//! What a core does when a loop iteration found no work.
//!
//! The loop always busy-polls while there is work. After `idle_loops`
//! consecutive idle iterations the policy decides how to wait before the
//! next iteration: not at all ([`IdlePolicy::Spin`]), a burst of CPU pause
//! hints ([`IdlePolicy::SpinThenPause`]) or a bounded sleep
//! ([`IdlePolicy::SpinThenSleep`]). A sleeping core is woken early by a
//! message sent to it, and never sleeps past its next timer tick, so sleeping
//! costs latency only on the first message after an idle period. The sleep
//! policy keeps a small host (2 cores) usable for other processes; the spin
//! policies give the lowest latency on dedicated cores.
//!
//! [`IdlePolicy::SpinThenWait`] is the hybrid of the two: the core spins for
//! `spin_us` after its last work, then *arms* every wake-up source it has
//! (its message ring's doorbell, each poller's completion channel, event
//! channel or doorbell, see [`crate::Poller::arm`]), polls everything once
//! more (work that arrived before a source was armed is found there, work
//! after it rings the source), and blocks in its one `epoll` until a source
//! fires, its next timer tick is due, or `max_wait_ms` passed. Senders ring a
//! doorbell only while the receiver says it sleeps, so two busy cores make no
//! system call per message. A core whose pollers cannot all arm (a fabric
//! without a notification channel) falls back to sleeps of `fallback_sleep_us`.
//!
//! # Adaptive spin (`max_spin_us`)
//!
//! Blocking is cheap only where a wake-up is cheap. Under virtualisation
//! (the Soft-RoCE guests of `tests/kernel/`) a core that blocks lets its vCPU
//! halt, and the next completion has to bring the vCPU back through the
//! hypervisor and the host's scheduler: milliseconds in an emulated guest on
//! a busy host, paid by every Call of a client whose next Call comes a little
//! after the core blocked. So the spin time adapts, the way KVM's halt
//! polling and the guest `cpuidle-haltpoll` governor adapt theirs: each core
//! keeps a *spin window*, at least `spin_us` and at most `max_spin_us`, and
//! learns from every idle gap that ended with traffic (a message or a busy
//! poller; timers alone teach nothing):
//! - the work came while the core still spun: the window served; unchanged;
//! - it came after the core gave up spinning, within `max_spin_us` of the
//!   last work: a longer spin would have caught it; the window grows to 1.5
//!   times that gap (at most `max_spin_us`);
//! - it came later than `max_spin_us`: spinning could not have helped; the
//!   window halves (not below `spin_us`).
//!
//! Beyond `spin_us` the spin is *polite*: each idle iteration yields the
//! CPU (`sched_yield`) before polling again, so that a thread the I/O itself
//! needs and that shares the core's CPU (the kernel's softirq thread or
//! completion worker for a software RDMA device, the client of a small
//! guest) runs at once instead of waiting out the spinner's time slice; with
//! nothing else runnable the yield returns at once. The core still never
//! blocks during the window, so it pays no wake-up.
//!
//! An idle core therefore spins at most one window after its last work and
//! then blocks for good (its idle CPU does not depend on the window), a core
//! whose traffic has gaps longer than `max_spin_us` spins only `spin_us`
//! after each Call, and a core whose clients send again within `max_spin_us`
//! stops blocking between their Calls, at the price of spinning through the
//! gaps (up to one CPU under steady light load). After timer-only work the
//! core spins `spin_us`, never the window. `max_spin_us` at or below
//! `spin_us` is a fixed spin.
//!
//! Under [`IdlePolicy::SpinThenSleep`], a core with no pollers (only
//! messages and timers, like the target's admin core) skips the spinning and
//! the slices: it sleeps until a message, its next timer tick or at most
//! 100 ms, so it does not take its CPU from whatever shares it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Idle policy of every core of a reactor.
///
/// JSON form (in `cores.json`, `$.reactor.idle`):
/// `{"policy": "spin"}`,
/// `{"policy": "spin_then_pause", "idle_loops": 64, "pause_spins": 32}`,
/// `{"policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100}` or
/// `{"policy": "spin_then_wait", "spin_us": 50, "max_spin_us": 5000, "max_wait_ms": 1000, "fallback_sleep_us": 100}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum IdlePolicy {
    /// Poll again immediately, forever. Lowest latency; the core shows 100 %
    /// CPU even when idle.
    Spin,
    /// After `idle_loops` consecutive idle iterations, run
    /// `std::hint::spin_loop()` `pause_spins` times before each further
    /// iteration (saves power and yields pipeline resources to an SMT
    /// sibling; the core still never leaves the CPU).
    SpinThenPause {
        /// Consecutive idle iterations before pausing starts.
        idle_loops: u32,
        /// Pause hints executed per idle iteration once pausing.
        pause_spins: u32,
    },
    /// After `idle_loops` consecutive idle iterations, sleep up to
    /// `max_sleep_us` microseconds per further idle iteration. The sleep is
    /// cut short by an incoming message and by the next timer tick.
    SpinThenSleep {
        /// Consecutive idle iterations before sleeping starts.
        idle_loops: u32,
        /// Upper bound of one sleep, in microseconds (at least 1).
        max_sleep_us: u32,
    },
    /// After `spin_us` microseconds without work, arm every wake-up source
    /// and block in the core's `epoll` until one fires (or the next timer
    /// tick, or `max_wait_ms`). See the module documentation.
    SpinThenWait {
        /// Microseconds of spinning after the last work before waiting
        /// (0..=[`MAX_SPIN_US`]); the adaptive window's floor.
        spin_us: u32,
        /// Ceiling of the adaptive spin window in microseconds
        /// (0..=[`MAX_SPIN_US`]); at or below `spin_us` the spin is fixed.
        /// See the module documentation. Absent in JSON: the shipped
        /// default's.
        #[serde(default = "default_max_spin_us")]
        max_spin_us: u32,
        /// Longest single wait in milliseconds (1..=[`MAX_WAIT_MS`]): a
        /// safety net for sources nothing rings (a peer process that died).
        max_wait_ms: u32,
        /// Sleep bound in microseconds (1..=[`MAX_SLEEP_US`]) while some
        /// poller cannot arm a wake-up.
        fallback_sleep_us: u32,
    },
}

impl Default for IdlePolicy {
    /// Spin for 1000 idle iterations, then sleep up to 100 µs at a time: the
    /// policy the tests and the quick start use.
    fn default() -> Self {
        IdlePolicy::SpinThenSleep {
            idle_loops: 1000,
            max_sleep_us: 100,
        }
    }
}

/// Largest sleep bound accepted (1 s): a longer sleep would make shutdown and
/// stats visibly sluggish.
pub const MAX_SLEEP_US: u32 = 1_000_000;

/// Largest spin time of [`IdlePolicy::SpinThenWait`] (1 s).
pub const MAX_SPIN_US: u32 = 1_000_000;

/// Largest single wait of [`IdlePolicy::SpinThenWait`] (10 s).
pub const MAX_WAIT_MS: u32 = 10_000;

/// The hybrid policy the shipped configurations use: spin 50 µs after the
/// last work, longer (politely, up to 5 ms) while the clients' recent gaps
/// between Calls say a longer spin would catch the next one, then wait (at
/// most 1 s at a time; 100 µs sleeps while a poller cannot arm). In the
/// Soft-RoCE guest of `tests/kernel/`, measured with the host otherwise
/// quiet, the adaptive window took 42 of 50 ratios against the Linux server
/// to 1.0x or more, against 26 for a fixed 50 µs spin (docs/BENCHMARKS.md,
/// "Adaptive spin on a quiet host"). The fields a configuration leaves out
/// take these values.
pub const SPIN_THEN_WAIT: IdlePolicy = IdlePolicy::SpinThenWait {
    spin_us: 50,
    max_spin_us: 5000,
    max_wait_ms: 1000,
    fallback_sleep_us: 100,
};

fn default_max_spin_us() -> u32 {
    match SPIN_THEN_WAIT {
        IdlePolicy::SpinThenWait { max_spin_us, .. } => max_spin_us,
        _ => 0,
    }
}

impl IdlePolicy {
    /// Checks the parameters; returns a description of the first problem.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            IdlePolicy::Spin | IdlePolicy::SpinThenPause { .. } => Ok(()),
            IdlePolicy::SpinThenSleep { max_sleep_us, .. } => {
                if max_sleep_us == 0 || max_sleep_us > MAX_SLEEP_US {
                    Err(format!(
                        "max_sleep_us must be in 1..={MAX_SLEEP_US}, found {max_sleep_us}"
                    ))
                } else {
                    Ok(())
                }
            }
            IdlePolicy::SpinThenWait {
                spin_us,
                max_spin_us,
                max_wait_ms,
                fallback_sleep_us,
            } => {
                if spin_us > MAX_SPIN_US {
                    Err(format!("spin_us must be in 0..={MAX_SPIN_US}, found {spin_us}"))
                } else if max_spin_us > MAX_SPIN_US {
                    Err(format!("max_spin_us must be in 0..={MAX_SPIN_US}, found {max_spin_us}"))
                } else if max_wait_ms == 0 || max_wait_ms > MAX_WAIT_MS {
                    Err(format!("max_wait_ms must be in 1..={MAX_WAIT_MS}, found {max_wait_ms}"))
                } else if fallback_sleep_us == 0 || fallback_sleep_us > MAX_SLEEP_US {
                    Err(format!(
                        "fallback_sleep_us must be in 1..={MAX_SLEEP_US}, found {fallback_sleep_us}"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Whether a core under this policy may sleep (and so senders must wake
    /// it).
    pub fn may_sleep(&self) -> bool {
        matches!(self, IdlePolicy::SpinThenSleep { .. } | IdlePolicy::SpinThenWait { .. })
    }

    /// Whether senders wake a sleeping core through its `epoll` doorbell
    /// (an eventfd) rather than by unparking its thread.
    pub fn waits_in_epoll(&self) -> bool {
        matches!(self, IdlePolicy::SpinThenWait { .. })
    }
}

/// What to do after one loop iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleAction {
    /// Run the next iteration now.
    Continue,
    /// Execute this many pause hints, then run the next iteration.
    Pause(u32),
    /// Sleep at most this long (woken early by a message), then run the next
    /// iteration.
    Sleep(Duration),
    /// Arm every wake-up source, poll once more, then block (spin-then-wait).
    Wait,
    /// Give the CPU to any other runnable thread (`sched_yield`), then run
    /// the next iteration: spin-then-wait's adaptive spin beyond `spin_us`.
    Yield,
}

/// What the adaptive spin of [`IdlePolicy::SpinThenWait`] learned, per core
/// (counters since start, and the current window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinCounts {
    /// Idle gaps that ended with traffic while the core still spun.
    pub spin_caught: u64,
    /// Gaps that ended after the core gave up spinning but within
    /// `max_spin_us` of its last work (each one grew the window).
    pub wait_short: u64,
    /// Gaps longer than `max_spin_us` that ended after a wait (each one
    /// halved the window).
    pub wait_long: u64,
    /// The current spin window, in microseconds.
    pub window_us: u64,
}

/// Per-core idle bookkeeping: counts consecutive idle iterations and turns
/// the policy into an [`IdleAction`]. Owned by one core thread.
#[derive(Debug, Clone)]
pub struct IdleState {
    policy: IdlePolicy,
    idle_streak: u32,
    /// When the current idle streak began (spin-then-wait).
    idle_since: Option<std::time::Instant>,
    /// Spin-then-wait: the spin time of the current streak (the adaptive
    /// window after traffic, `spin_us` after timer-only work).
    streak_spin: Duration,
    /// Spin-then-wait: the current streak reached its spin time (the core
    /// armed, and blocked unless its re-check found work).
    gave_up: bool,
    /// Spin-then-wait: the adaptive window, in `floor..=ceiling`.
    window: Duration,
    floor: Duration,
    ceiling: Duration,
    counts: SpinCounts,
}

impl IdleState {
    /// Fresh state (no idle streak; the spin window at `spin_us`).
    pub fn new(policy: IdlePolicy) -> Self {
        let (floor, ceiling) = match policy {
            IdlePolicy::SpinThenWait {
                spin_us, max_spin_us, ..
            } => (
                Duration::from_micros(u64::from(spin_us)),
                Duration::from_micros(u64::from(spin_us.max(max_spin_us))),
            ),
            _ => (Duration::ZERO, Duration::ZERO),
        };
        IdleState {
            policy,
            idle_streak: 0,
            idle_since: None,
            streak_spin: floor,
            gave_up: false,
            window: floor,
            floor,
            ceiling,
            counts: SpinCounts::default(),
        }
    }

    /// Consecutive idle iterations so far (saturating).
    pub fn idle_streak(&self) -> u32 {
        self.idle_streak
    }

    /// The adaptive spin's counters and current window.
    pub fn spin_counts(&self) -> SpinCounts {
        SpinCounts {
            window_us: self.window.as_micros() as u64,
            ..self.counts
        }
    }

    /// Records the outcome of one iteration and returns what to do before
    /// the next one. A busy iteration resets the streak; once the streak has
    /// reached the policy's `idle_loops`, every further idle iteration pauses
    /// or sleeps until work shows up again.
    pub fn after_iteration(&mut self, busy: bool) -> IdleAction {
        self.after_iteration_at(busy, crate::clock::now())
    }

    /// [`IdleState::after_iteration`] with the time of the iteration's end
    /// (only [`IdlePolicy::SpinThenWait`] reads it). Busy work counts as
    /// traffic (see [`IdleState::after_work_at`]).
    pub fn after_iteration_at(&mut self, busy: bool, now: std::time::Instant) -> IdleAction {
        self.after_work_at(busy, busy, now)
    }

    /// [`IdleState::after_iteration_at`], telling apart work that is
    /// traffic (`traffic`: a message or a busy poller) from timer-only work
    /// (`busy && !traffic`). Under spin-then-wait only traffic ends an idle
    /// gap the adaptive window learns from, and only traffic is followed by
    /// the window's spin; after timer-only work the core spins `spin_us`.
    pub fn after_work_at(&mut self, busy: bool, traffic: bool, now: std::time::Instant) -> IdleAction {
        debug_assert!(busy || !traffic, "traffic is work");
        if busy {
            if traffic {
                self.learn(now);
            }
            self.idle_streak = 0;
            self.idle_since = None;
            self.gave_up = false;
            self.streak_spin = if traffic { self.window } else { self.floor };
            return IdleAction::Continue;
        }
        self.idle_streak = self.idle_streak.saturating_add(1);
        match self.policy {
            IdlePolicy::Spin => IdleAction::Continue,
            IdlePolicy::SpinThenPause {
                idle_loops,
                pause_spins,
            } => {
                if self.idle_streak > idle_loops && pause_spins > 0 {
                    IdleAction::Pause(pause_spins)
                } else {
                    IdleAction::Continue
                }
            }
            IdlePolicy::SpinThenSleep {
                idle_loops,
                max_sleep_us,
            } => {
                if self.idle_streak > idle_loops {
                    IdleAction::Sleep(Duration::from_micros(u64::from(max_sleep_us.max(1))))
                } else {
                    IdleAction::Continue
                }
            }
            IdlePolicy::SpinThenWait { .. } => {
                let since = *self.idle_since.get_or_insert(now);
                let idle = now.saturating_duration_since(since);
                if idle >= self.streak_spin {
                    self.gave_up = true;
                    IdleAction::Wait
                } else if idle >= self.floor {
                    IdleAction::Yield
                } else {
                    IdleAction::Continue
                }
            }
        }
    }

    /// Spin-then-wait: traffic ended the current idle gap (if there was
    /// one); adapt the window (module documentation, "Adaptive spin").
    fn learn(&mut self, now: std::time::Instant) {
        let Some(since) = self.idle_since else {
            return;
        };
        if !matches!(self.policy, IdlePolicy::SpinThenWait { .. }) {
            return;
        }
        let gap = now.saturating_duration_since(since);
        if !self.gave_up {
            self.counts.spin_caught += 1;
        } else if gap <= self.ceiling {
            self.counts.wait_short += 1;
            self.window = (gap + gap / 2).clamp(self.window, self.ceiling);
        } else {
            self.counts.wait_long += 1;
            self.window = (self.window / 2).max(self.floor);
        }
        debug_assert!(self.floor <= self.window && self.window <= self.ceiling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_never_waits() {
        let mut s = IdleState::new(IdlePolicy::Spin);
        for _ in 0..10_000 {
            assert_eq!(s.after_iteration(false), IdleAction::Continue);
        }
        assert_eq!(s.idle_streak(), 10_000);
    }

    #[test]
    fn pause_starts_after_idle_loops_and_busy_resets() {
        let mut s = IdleState::new(IdlePolicy::SpinThenPause {
            idle_loops: 3,
            pause_spins: 7,
        });
        for _ in 0..3 {
            assert_eq!(s.after_iteration(false), IdleAction::Continue);
        }
        assert_eq!(s.after_iteration(false), IdleAction::Pause(7));
        assert_eq!(s.after_iteration(false), IdleAction::Pause(7));
        assert_eq!(s.after_iteration(true), IdleAction::Continue);
        assert_eq!(s.idle_streak(), 0);
        assert_eq!(s.after_iteration(false), IdleAction::Continue);
    }

    #[test]
    fn sleep_starts_after_idle_loops_with_bound() {
        let mut s = IdleState::new(IdlePolicy::SpinThenSleep {
            idle_loops: 2,
            max_sleep_us: 250,
        });
        assert_eq!(s.after_iteration(false), IdleAction::Continue);
        assert_eq!(s.after_iteration(false), IdleAction::Continue);
        assert_eq!(s.after_iteration(false), IdleAction::Sleep(Duration::from_micros(250)));
        assert_eq!(s.after_iteration(true), IdleAction::Continue);
        assert_eq!(s.after_iteration(false), IdleAction::Continue);
    }

    #[test]
    fn check_rejects_zero_and_huge_sleep() {
        assert!(IdlePolicy::SpinThenSleep {
            idle_loops: 1,
            max_sleep_us: 0
        }
        .check()
        .is_err());
        assert!(IdlePolicy::SpinThenSleep {
            idle_loops: 1,
            max_sleep_us: MAX_SLEEP_US + 1
        }
        .check()
        .is_err());
        assert!(IdlePolicy::default().check().is_ok());
        assert!(IdlePolicy::default().may_sleep());
        assert!(!IdlePolicy::Spin.may_sleep());
    }

    #[test]
    fn wait_starts_after_spin_time_and_busy_resets() {
        let mut s = IdleState::new(IdlePolicy::SpinThenWait {
            spin_us: 100,
            max_spin_us: 0,
            max_wait_ms: 1,
            fallback_sleep_us: 10,
        });
        let t0 = std::time::Instant::now();
        assert_eq!(s.after_iteration_at(false, t0), IdleAction::Continue);
        assert_eq!(
            s.after_iteration_at(false, t0 + Duration::from_micros(99)),
            IdleAction::Continue
        );
        assert_eq!(
            s.after_iteration_at(false, t0 + Duration::from_micros(100)),
            IdleAction::Wait
        );
        assert_eq!(
            s.after_iteration_at(true, t0 + Duration::from_micros(101)),
            IdleAction::Continue
        );
        // The spin time counts from the first idle iteration after work.
        assert_eq!(
            s.after_iteration_at(false, t0 + Duration::from_micros(150)),
            IdleAction::Continue
        );
        assert_eq!(
            s.after_iteration_at(false, t0 + Duration::from_micros(250)),
            IdleAction::Wait
        );
        assert!(SPIN_THEN_WAIT.check().is_ok() && SPIN_THEN_WAIT.may_sleep() && SPIN_THEN_WAIT.waits_in_epoll());
        for bad in [
            IdlePolicy::SpinThenWait {
                spin_us: MAX_SPIN_US + 1,
                max_spin_us: 0,
                max_wait_ms: 1,
                fallback_sleep_us: 1,
            },
            IdlePolicy::SpinThenWait {
                spin_us: 0,
                max_spin_us: MAX_SPIN_US + 1,
                max_wait_ms: 1,
                fallback_sleep_us: 1,
            },
            IdlePolicy::SpinThenWait {
                spin_us: 0,
                max_spin_us: 0,
                max_wait_ms: 0,
                fallback_sleep_us: 1,
            },
            IdlePolicy::SpinThenWait {
                spin_us: 0,
                max_spin_us: 0,
                max_wait_ms: 1,
                fallback_sleep_us: 0,
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    /// Adaptive spin: one idle gap, from traffic at `start` to traffic at
    /// `start + gap_us`, with idle iterations every microsecond in between
    /// (stopping at the first `Wait`, as a blocked core would). Returns
    /// whether the core gave up spinning during the gap.
    fn gap(s: &mut IdleState, start: std::time::Instant, gap_us: u64) -> bool {
        assert_eq!(s.after_work_at(true, true, start), IdleAction::Continue);
        let mut gave_up = false;
        for us in 1..gap_us {
            if s.after_work_at(false, false, start + Duration::from_micros(us)) == IdleAction::Wait {
                gave_up = true;
                break;
            }
        }
        let end = start + Duration::from_micros(gap_us);
        assert_eq!(s.after_work_at(true, true, end), IdleAction::Continue);
        gave_up
    }

    fn adaptive(spin_us: u32, max_spin_us: u32) -> IdleState {
        IdleState::new(IdlePolicy::SpinThenWait {
            spin_us,
            max_spin_us,
            max_wait_ms: 1000,
            fallback_sleep_us: 100,
        })
    }

    #[test]
    fn adaptive_spin_grows_to_cover_short_gaps_up_to_its_ceiling() {
        let mut s = adaptive(50, 5000);
        let t = std::time::Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        assert_eq!(s.spin_counts().window_us, 50);
        // A 2 ms gap: the 50 µs spin gives up; the next Call is 2 ms after
        // the last work, within the ceiling: the window grows to 3 ms.
        assert!(gap(&mut s, ms(0), 2000));
        assert!(!gap(&mut s, ms(10), 2000), "the second 2 ms gap is spun through");
        assert!(!gap(&mut s, ms(20), 2900));
        let c = s.spin_counts();
        assert_eq!((c.wait_short, c.spin_caught, c.wait_long), (1, 2, 0), "{c:?}");
        assert!((2900..=3100).contains(&c.window_us), "{c:?}");
        // A 4.9 ms gap outlasts the 3 ms window: it grows, capped at 5 ms.
        assert!(gap(&mut s, ms(30), 4900));
        assert_eq!(s.spin_counts().window_us, 5000);
        assert!(!gap(&mut s, ms(40), 4990));
        // Fixed spin: a ceiling at or below spin_us never grows.
        let mut f = adaptive(50, 0);
        assert!(gap(&mut f, ms(0), 2000));
        assert!(gap(&mut f, ms(10), 2000), "a fixed 50 µs spin gives up every time");
        assert_eq!(f.spin_counts().window_us, 50);
    }

    #[test]
    fn adaptive_spin_yields_the_cpu_beyond_spin_us() {
        let mut s = adaptive(50, 5000);
        let t = std::time::Instant::now();
        let us = |n: u64| t + Duration::from_micros(n);
        assert!(gap(&mut s, t, 2000));
        assert_eq!(s.spin_counts().window_us, 2998);
        // The next gap: a plain spin for spin_us, a polite one up to the
        // window, then the wait.
        s.after_work_at(true, true, us(10_000));
        let at = |n: u64| us(10_001 + n);
        assert_eq!(s.after_work_at(false, false, at(0)), IdleAction::Continue);
        assert_eq!(s.after_work_at(false, false, at(49)), IdleAction::Continue);
        assert_eq!(s.after_work_at(false, false, at(50)), IdleAction::Yield);
        assert_eq!(s.after_work_at(false, false, at(2997)), IdleAction::Yield);
        assert_eq!(s.after_work_at(false, false, at(2999)), IdleAction::Wait);
        // A fixed spin never yields.
        let mut f = adaptive(50, 0);
        f.after_work_at(true, true, t);
        assert_eq!(f.after_work_at(false, false, us(1)), IdleAction::Continue);
        assert_eq!(f.after_work_at(false, false, us(50)), IdleAction::Continue);
        assert_eq!(f.after_work_at(false, false, us(51)), IdleAction::Wait);
    }

    #[test]
    fn adaptive_spin_decays_to_spin_us_after_long_gaps_and_timers_spin_short() {
        let mut s = adaptive(50, 5000);
        let t = std::time::Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        assert!(gap(&mut s, ms(0), 4000));
        assert_eq!(s.spin_counts().window_us, 5000);
        // Timer-only work is followed by a `spin_us` spin, not the window,
        // and teaches nothing.
        s.after_work_at(true, true, ms(10));
        assert_eq!(s.after_work_at(true, false, ms(20)), IdleAction::Continue);
        assert_eq!(
            s.after_work_at(false, false, ms(20) + Duration::from_micros(10)),
            IdleAction::Continue
        );
        assert_eq!(
            s.after_work_at(false, false, ms(20) + Duration::from_micros(61)),
            IdleAction::Wait
        );
        assert_eq!(s.spin_counts().window_us, 5000);
        s.after_work_at(true, false, ms(21));
        // Gaps past the ceiling (an idle client): the window halves per gap,
        // down to spin_us and no further.
        let mut at = 100;
        let mut windows = Vec::new();
        for _ in 0..10 {
            assert!(gap(&mut s, ms(at), 50_000));
            windows.push(s.spin_counts().window_us);
            at += 100;
        }
        assert_eq!(&windows[..3], &[2500, 1250, 625]);
        assert_eq!(*windows.last().unwrap(), 50);
        assert_eq!(s.spin_counts().wait_long, 10);
        // Once the streak gave up it stays given up: a core that waited and
        // woke with nothing to do waits again at once.
        s.after_work_at(true, true, ms(5000));
        assert_eq!(s.after_work_at(false, false, ms(5001)), IdleAction::Continue);
        assert_eq!(s.after_work_at(false, false, ms(5002)), IdleAction::Wait);
        assert_eq!(s.after_work_at(false, false, ms(6002)), IdleAction::Wait);
    }

    #[test]
    fn serde_form() {
        let p: IdlePolicy =
            serde_json::from_str(r#"{"policy":"spin_then_sleep","idle_loops":5,"max_sleep_us":9}"#).unwrap();
        assert_eq!(
            p,
            IdlePolicy::SpinThenSleep {
                idle_loops: 5,
                max_sleep_us: 9
            }
        );
        let p: IdlePolicy = serde_json::from_str(r#"{"policy":"spin"}"#).unwrap();
        assert_eq!(p, IdlePolicy::Spin);
        // An absent max_spin_us takes the shipped default's.
        let p: IdlePolicy = serde_json::from_str(
            r#"{"policy":"spin_then_wait","spin_us":50,"max_wait_ms":1000,"fallback_sleep_us":100}"#,
        )
        .unwrap();
        assert_eq!(p, SPIN_THEN_WAIT);
        // serde's derive ignores unknown fields next to the tag of a unit
        // variant (`{"policy":"spin","x":1}`); the config loader's own walker
        // rejects those. Struct variants are strict:
        assert!(serde_json::from_str::<IdlePolicy>(
            r#"{"policy":"spin_then_sleep","idle_loops":5,"max_sleep_us":9,"x":1}"#
        )
        .is_err());
    }
}
