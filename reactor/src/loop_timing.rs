//! Where a core's loop iterations spend their time: a diagnostic, compiled
//! in only with the `loop-timing` feature (off in every normal build; without
//! it [`LoopTiming`] is zero-sized and every call is empty).
//!
//! With the feature, a core stamps the time ([`crate::clock::now`]) after each
//! section of an iteration (timers, messages, each poller, the accounting,
//! the idle action, a block in `epoll`), keeps a histogram of iteration
//! lengths (powers of two in microseconds) and, for every iteration of
//! [`SLOW`] or more, which section was the longest and how long each
//! section took in them. The core prints the result to stderr when it exits
//! ([`LoopTiming::report`]), one line per core:
//!
//! ```text
//! loop-timing core 1: iterations by length <2us:181508 <4us:720279 ... <1024us:4848; iterations >=200us by longest section (count/total us in them) timers:17/14706us ... poller0:14593/8511664us ...
//! ```
//!
//! Found with it (issue 24, docs/BENCHMARKS.md): in the Soft-RoCE guest an
//! io core's iteration that answers a Call takes 250 µs to 1 ms, nearly all
//! of it in the fabric poller's post of the reply, where the kernel's
//! software RDMA device runs the transmission and the client's receive of
//! it inside the posting system call. Owning core only.

/// An iteration at least this long counts as slow (microseconds).
pub const SLOW_US: u64 = 200;

/// The parts of one loop iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Firing due timers (and publishing the core's statistics).
    Timers = 0,
    /// Running one batch of cross-core messages.
    Messages = 1,
    /// The first poller.
    Poller0 = 2,
    /// The second poller.
    Poller1 = 3,
    /// The third and later pollers.
    PollerRest = 4,
    /// Busy/idle accounting and the clock read.
    Accounting = 5,
    /// The idle policy's action (a yield, a sleep, arming) and the loop's
    /// own overhead.
    Idle = 6,
    /// A block in the core's `epoll` (spin-then-wait).
    Wait = 7,
}

#[cfg(feature = "loop-timing")]
const SECTIONS: usize = 8;
#[cfg(feature = "loop-timing")]
const NAMES: [&str; SECTIONS] = [
    "timers",
    "messages",
    "poller0",
    "poller1",
    "pollers2+",
    "accounting",
    "idle",
    "wait",
];

impl Section {
    /// The section of the poller at index `i` of the core's list.
    #[inline(always)]
    pub fn poller(i: usize) -> Section {
        match i {
            0 => Section::Poller0,
            1 => Section::Poller1,
            _ => Section::PollerRest,
        }
    }
}

/// What a core's iterations cost, section by section (see the module
/// documentation). Owned by one core thread.
#[cfg(feature = "loop-timing")]
#[derive(Debug, Clone)]
pub struct LoopTiming {
    last: std::time::Instant,
    /// This iteration's time per section, nanoseconds.
    cur: [u64; SECTIONS],
    /// Iterations by length: bucket `b` holds lengths below `2^b` µs.
    hist: [u64; 24],
    /// Slow iterations by their longest section.
    slow: [u64; SECTIONS],
    /// Time per section summed over the slow iterations, nanoseconds.
    slow_ns: [u64; SECTIONS],
}

#[cfg(feature = "loop-timing")]
impl Default for LoopTiming {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "loop-timing")]
impl LoopTiming {
    /// Starts timing now.
    pub fn new() -> Self {
        LoopTiming {
            last: crate::clock::now(),
            cur: [0; SECTIONS],
            hist: [0; 24],
            slow: [0; SECTIONS],
            slow_ns: [0; SECTIONS],
        }
    }

    /// The time since the last lap belongs to `s`.
    #[inline]
    pub fn lap(&mut self, s: Section) {
        let t = crate::clock::now();
        self.cur[s as usize] += crate::shared::duration_ns(t.saturating_duration_since(self.last));
        self.last = t;
    }

    /// The iteration ended: count it.
    pub fn finish(&mut self) {
        let total_us = self.cur.iter().sum::<u64>() / 1000;
        let b = (64 - total_us.leading_zeros() as usize).min(self.hist.len() - 1);
        self.hist[b] += 1;
        if total_us >= SLOW_US {
            let longest = (0..SECTIONS).max_by_key(|&i| self.cur[i]).unwrap_or(0);
            self.slow[longest] += 1;
            for (acc, v) in self.slow_ns.iter_mut().zip(self.cur) {
                *acc += v;
            }
        }
        self.cur = [0; SECTIONS];
    }

    /// Slow iterations whose longest section was `s`, and the time of `s`
    /// summed over all slow iterations (nanoseconds).
    pub fn slow(&self, s: Section) -> (u64, u64) {
        (self.slow[s as usize], self.slow_ns[s as usize])
    }

    /// Iterations counted so far.
    pub fn iterations(&self) -> u64 {
        self.hist.iter().sum()
    }

    /// The one-line summary (module documentation).
    pub fn summary(&self, core: usize) -> String {
        use std::fmt::Write;
        let mut out = format!("loop-timing core {core}: iterations by length");
        for (b, n) in self.hist.iter().enumerate().filter(|(_, n)| **n > 0) {
            let _ = write!(out, " <{}us:{n}", 1u64 << b);
        }
        let _ = write!(
            out,
            "; iterations >={SLOW_US}us by longest section (count/total us in them)"
        );
        for (i, name) in NAMES.iter().enumerate() {
            let _ = write!(out, " {name}:{}/{}us", self.slow[i], self.slow_ns[i] / 1000);
        }
        out
    }

    /// Prints [`LoopTiming::summary`] to stderr (at the core's exit).
    pub fn report(&self, core: usize) {
        eprintln!("{}", self.summary(core));
    }
}

/// Without the `loop-timing` feature: nothing.
#[cfg(not(feature = "loop-timing"))]
#[derive(Debug, Clone, Copy, Default)]
pub struct LoopTiming;

#[cfg(not(feature = "loop-timing"))]
impl LoopTiming {
    /// Nothing.
    #[inline(always)]
    pub fn new() -> Self {
        LoopTiming
    }
    /// Nothing.
    #[inline(always)]
    pub fn lap(&mut self, _s: Section) {}
    /// Nothing.
    #[inline(always)]
    pub fn finish(&mut self) {}
    /// Nothing.
    #[inline(always)]
    pub fn report(&self, _core: usize) {}
}

#[cfg(all(test, feature = "loop-timing"))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_long_poller_section_is_named_for_the_slow_iteration() {
        let mut lt = LoopTiming::new();
        // A fast iteration.
        lt.lap(Section::Timers);
        lt.lap(Section::Poller0);
        lt.finish();
        // A slow one: the second poller holds it 300 us.
        lt.lap(Section::Messages);
        std::thread::sleep(Duration::from_micros(300));
        lt.lap(Section::Poller1);
        lt.lap(Section::Idle);
        lt.finish();
        assert_eq!(lt.iterations(), 2);
        let (n, ns) = lt.slow(Section::Poller1);
        assert_eq!(n, 1);
        assert!(ns >= 300_000, "{ns}");
        assert_eq!(lt.slow(Section::Poller0).0, 0);
        let line = lt.summary(3);
        assert!(line.starts_with("loop-timing core 3: "), "{line}");
        assert!(line.contains(" poller1:1/"), "{line}");
    }
}
