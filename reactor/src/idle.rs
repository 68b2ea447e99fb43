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
/// `{"policy": "spin_then_wait", "spin_us": 50, "max_wait_ms": 1000, "fallback_sleep_us": 100}`.
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
        /// (0..=[`MAX_SPIN_US`]).
        spin_us: u32,
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
/// last work, then wait (at most 1 s at a time; 100 µs sleeps while a
/// poller cannot arm).
pub const SPIN_THEN_WAIT: IdlePolicy = IdlePolicy::SpinThenWait {
    spin_us: 50,
    max_wait_ms: 1000,
    fallback_sleep_us: 100,
};

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
                max_wait_ms,
                fallback_sleep_us,
            } => {
                if spin_us > MAX_SPIN_US {
                    Err(format!("spin_us must be in 0..={MAX_SPIN_US}, found {spin_us}"))
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
}

/// Per-core idle bookkeeping: counts consecutive idle iterations and turns
/// the policy into an [`IdleAction`]. Owned by one core thread.
#[derive(Debug, Clone)]
pub struct IdleState {
    policy: IdlePolicy,
    idle_streak: u32,
    /// When the current idle streak began (spin-then-wait).
    idle_since: Option<std::time::Instant>,
}

impl IdleState {
    /// Fresh state (no idle streak).
    pub fn new(policy: IdlePolicy) -> Self {
        IdleState {
            policy,
            idle_streak: 0,
            idle_since: None,
        }
    }

    /// Consecutive idle iterations so far (saturating).
    pub fn idle_streak(&self) -> u32 {
        self.idle_streak
    }

    /// Records the outcome of one iteration and returns what to do before
    /// the next one. A busy iteration resets the streak; once the streak has
    /// reached the policy's `idle_loops`, every further idle iteration pauses
    /// or sleeps until work shows up again.
    pub fn after_iteration(&mut self, busy: bool) -> IdleAction {
        self.after_iteration_at(busy, std::time::Instant::now())
    }

    /// [`IdleState::after_iteration`] with the time of the iteration's end
    /// (only [`IdlePolicy::SpinThenWait`] reads it).
    pub fn after_iteration_at(&mut self, busy: bool, now: std::time::Instant) -> IdleAction {
        if busy {
            self.idle_streak = 0;
            self.idle_since = None;
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
            IdlePolicy::SpinThenWait { spin_us, .. } => {
                let since = *self.idle_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= Duration::from_micros(u64::from(spin_us)) {
                    IdleAction::Wait
                } else {
                    IdleAction::Continue
                }
            }
        }
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
                max_wait_ms: 1,
                fallback_sleep_us: 1,
            },
            IdlePolicy::SpinThenWait {
                spin_us: 0,
                max_wait_ms: 0,
                fallback_sleep_us: 1,
            },
            IdlePolicy::SpinThenWait {
                spin_us: 0,
                max_wait_ms: 1,
                fallback_sleep_us: 0,
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
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
        // serde's derive ignores unknown fields next to the tag of a unit
        // variant (`{"policy":"spin","x":1}`); the config loader's own walker
        // rejects those. Struct variants are strict:
        assert!(serde_json::from_str::<IdlePolicy>(
            r#"{"policy":"spin_then_sleep","idle_loops":5,"max_sleep_us":9,"x":1}"#
        )
        .is_err());
    }
}
