//! The core loop's clock: [`now`], a cheap read of monotonic time.
//!
//! A core reads the time once per loop iteration (its busy/idle accounting,
//! the idle policy's spin budget, timer ticks), and the target's statistics
//! read it per Call. Where the operating system's clock source has a vDSO
//! path (`tsc`, `kvm-clock`, ...), `Instant::now()` costs a few tens of
//! nanoseconds and [`now`] is exactly that. Where it has none (`hpet`,
//! `acpi_pm`: the emulated guests of `tests/kernel/` run on `hpet`), every
//! `Instant::now()` is a system call that reads an emulated device, several
//! microseconds, and a spinning core spent most of each idle iteration in it
//! (two such calls per NFS Call at queue depth 1, 7 to 11 on a busy host:
//! docs/BENCHMARKS.md, issue 24). There [`now`] reads the CPU's time-stamp
//! counter instead (x86_64 `rdtsc`, no system call) and converts it with a
//! per-thread linear map anchored on the OS clock:
//!
//! - the rate (nanoseconds per tick) is calibrated once per process against
//!   `Instant` (the median of five 500 µs samples), then refined on each
//!   re-anchoring (one eighth of the new sample; samples more than 25 % off
//!   are ignored: a counter that stopped or a thread that moved);
//! - a thread re-anchors on the OS clock once its anchor is [`RESYNC`] old
//!   (counted in ticks), whenever the counter reads lower than its anchor,
//!   and after every block ([`resync`]; the core loop calls it at the end of
//!   the first iteration after each of its waits and sleeps, so a counter
//!   that stops in deep idle states costs nothing): one system call per
//!   [`RESYNC`] of busy time instead of one per read, and the error between
//!   anchors is the rate's error over at most [`RESYNC`] (a few
//!   microseconds);
//! - right after a block, [`after_block`] gives the counter's time without
//!   re-anchoring however old the anchor is, until the next [`resync`]: the
//!   core loop reads no OS clock between a wake-up and the work that woke
//!   it (issue 24 item 1), and in that one iteration the time may be off by
//!   the rate's error over the block (tens of microseconds after a 1 s
//!   block at a rate 50 ppm off);
//! - values never go backwards on a thread (a read earlier than the last
//!   one returns the last one), and are `Instant`s comparable with
//!   `Instant::now()` on any thread within that error.
//!
//! [`wall_now`] is the wall clock the same way (a file's mtime and ctime on
//! each WRITE): `SystemTime::now()`, or the counter's time since a
//! wall-clock reading of this thread at most [`RESYNC`] old (taken by the
//! first `wall_now` after that, so threads that never ask read no wall
//! clock; a step of the wall clock shows within [`RESYNC`]).
//!
//! The counter's resolution keeps the busy/idle statistics as fine as
//! before. `RPCRDMA_CLOCK=os` forces `Instant::now()`, `RPCRDMA_CLOCK=tsc`
//! the counter (where it exists and the process may read it); unset or
//! anything else chooses by the clock source named in
//! `/sys/devices/system/clocksource/clocksource0/current_clocksource`.
//! The choice is made once per process, at the first read ([`source`]).

use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// How long a thread's anchor serves before [`now`] reads the OS clock
/// again.
pub const RESYNC: Duration = Duration::from_millis(2);

/// OS clock sources without a vDSO read: `clock_gettime` is a system call
/// there.
const SLOW_SOURCES: &[&str] = &["hpet", "acpi_pm", "jiffies", "refined-jiffies", "pit"];

/// Where [`now`] takes the time from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `Instant::now()` on every read.
    Os,
    /// The time-stamp counter at the calibrated rate `mult` (nanoseconds per
    /// tick, 32.32 fixed point), anchored per thread on the OS clock.
    Tsc {
        /// Nanoseconds per tick times 2^32.
        mult: u64,
    },
}

impl Source {
    /// The counter's frequency in MHz (`None` for [`Source::Os`]).
    pub fn tsc_mhz(self) -> Option<u64> {
        match self {
            Source::Os => None,
            Source::Tsc { mult } => Some(((1u128 << 32) * 1000 / u128::from(mult.max(1))) as u64),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tsc_mhz() {
            None => write!(f, "os"),
            Some(mhz) => write!(f, "tsc ({mhz} MHz)"),
        }
    }
}

/// The OS clock source's name (Linux sysfs), if known.
pub fn os_clock_source() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

/// The source this process uses (chosen at the first call; see the module
/// documentation).
pub fn source() -> Source {
    static SOURCE: OnceLock<Source> = OnceLock::new();
    *SOURCE.get_or_init(select)
}

thread_local! {
    static ANCHOR: RefCell<Option<Anchored>> = const { RefCell::new(None) };
    static OS_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How often this thread read the OS clock for the counter's map (anchoring
/// and re-anchoring; 0 on [`Source::Os`], where every [`now`] is one).
/// Diagnostics and tests.
pub fn os_reads() -> u64 {
    OS_READS.with(|c| c.get())
}

/// The current time: `Instant::now()`, or the counter's reading mapped onto
/// it (see the module documentation). Monotonic on each thread.
#[inline]
pub fn now() -> Instant {
    match source() {
        Source::Os => Instant::now(),
        Source::Tsc { mult } => ANCHOR.with(|a| {
            let mut a = a.borrow_mut();
            let a = a.get_or_insert_with(|| Anchored::from_os(mult));
            a.at(ticks(), os_pair)
        }),
    }
}

/// The current time read from the OS clock, re-anchoring this thread's
/// counter map on it: after a block, and wherever the time must not be up
/// to [`RESYNC`] stale in its rate. Monotonic with [`now`] on this thread.
pub fn resync() -> Instant {
    match source() {
        Source::Os => Instant::now(),
        Source::Tsc { mult } => ANCHOR.with(|a| {
            let mut a = a.borrow_mut();
            match a.as_mut() {
                Some(a) => {
                    let (i, t) = os_pair();
                    a.reanchor(i, t);
                    a.stamp(i)
                }
                None => a.insert(Anchored::from_os(mult)).last,
            }
        }),
    }
}

/// The current time right after the calling thread blocked, without an OS
/// clock read: [`now`], except that on the counter the anchor serves however
/// old it is until this thread's next [`resync`] (which the caller must
/// make soon: the core loop does at the end of its next iteration). So the
/// way from a wake-up to the work that caused it makes no system call in a
/// guest whose clock has no vDSO path. `Instant::now()` on [`Source::Os`].
pub fn after_block() -> Instant {
    match source() {
        Source::Os => Instant::now(),
        Source::Tsc { mult } => ANCHOR.with(|a| {
            let mut a = a.borrow_mut();
            let a = a.get_or_insert_with(|| Anchored::from_os(mult));
            a.deferred = true;
            a.at(ticks(), os_pair)
        }),
    }
}

/// The wall clock now: `SystemTime::now()`, or on the counter the wall
/// time of this thread's anchor plus the counter's time since (see the
/// module documentation). Nanosecond resolution either way; not monotonic
/// where the wall clock is not.
#[inline]
pub fn wall_now() -> SystemTime {
    match source() {
        Source::Os => SystemTime::now(),
        Source::Tsc { mult } => ANCHOR.with(|a| {
            let mut a = a.borrow_mut();
            let a = a.get_or_insert_with(|| Anchored::from_os(mult));
            let t = a.at(ticks(), os_pair);
            a.wall_at(t, SystemTime::now)
        }),
    }
}

fn select() -> Source {
    match std::env::var("RPCRDMA_CLOCK").as_deref() {
        Ok("os") => Source::Os,
        Ok("tsc") => tsc_source().unwrap_or(Source::Os),
        _ => {
            let slow = os_clock_source().is_some_and(|s| SLOW_SOURCES.contains(&s.as_str()));
            if slow {
                tsc_source().unwrap_or(Source::Os)
            } else {
                Source::Os
            }
        }
    }
}

/// The counter, if this process may read it and its rate is plausible.
fn tsc_source() -> Option<Source> {
    if !tsc_readable() {
        return None;
    }
    calibrate(ticks, Instant::now, Duration::from_micros(500), 5).map(|mult| Source::Tsc { mult })
}

#[cfg(target_arch = "x86_64")]
fn tsc_readable() -> bool {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer, which points
    // at a live local.
    let rc = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    // A kernel without PR_GET_TSC lets every process read the counter.
    rc != 0 || state == libc::PR_TSC_ENABLE
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_readable() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn ticks() -> u64 {
    // SAFETY: `rdtsc` reads a register; every x86_64 CPU has it, and
    // `tsc_readable` checked that the kernel lets this process use it
    // before the counter is chosen.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Never called: no counter is chosen on other architectures.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn ticks() -> u64 {
    0
}

/// One OS clock reading with the counter's value at (about) the same
/// moment: the middle of two counter reads around it.
fn os_pair() -> (Instant, u64) {
    OS_READS.with(|c| c.set(c.get() + 1));
    let a = ticks();
    let i = Instant::now();
    let b = ticks();
    (i, a / 2 + b / 2 + (a & b & 1))
}

/// The counter's rate as nanoseconds per tick times 2^32: the median of
/// `samples` measurements over `span` each of `counter` against `clock`.
/// `None` when the counter does not advance or its rate lies outside
/// 50 MHz to 20 GHz.
fn calibrate(
    mut counter: impl FnMut() -> u64,
    mut clock: impl FnMut() -> Instant,
    span: Duration,
    samples: usize,
) -> Option<u64> {
    let mut mults = Vec::with_capacity(samples);
    for _ in 0..samples {
        let (i0, t0) = (clock(), counter());
        let (mut i1, mut t1) = (i0, t0);
        while i1.saturating_duration_since(i0) < span {
            (i1, t1) = (clock(), counter());
        }
        let dt = t1.checked_sub(t0).filter(|&d| d > 0)?;
        let ns = i1.saturating_duration_since(i0).as_nanos();
        mults.push(u64::try_from((ns << 32) / u128::from(dt)).ok()?);
    }
    mults.sort_unstable();
    let mult = *mults.get(samples / 2)?;
    // 20 GHz: 0.05 ns per tick; 50 MHz: 20 ns per tick.
    let plausible = (1u64 << 32) / 20..=(1u64 << 32) * 20;
    plausible.contains(&mult).then_some(mult)
}

/// One thread's map from counter values to `Instant`s.
#[derive(Debug, Clone)]
struct Anchored {
    /// Nanoseconds per tick times 2^32.
    mult: u64,
    /// The OS time of the anchor and the counter's value then.
    at: Instant,
    at_ticks: u64,
    /// [`RESYNC`] in ticks at `mult`.
    window_ticks: u64,
    /// A wall-clock reading and this map's time then ([`wall_now`]).
    wall: Option<(Instant, SystemTime)>,
    /// The latest time handed out.
    last: Instant,
    /// [`after_block`] was called and [`resync`] not yet: the anchor serves
    /// past its window.
    deferred: bool,
}

impl Anchored {
    fn new(mult: u64, at: Instant, at_ticks: u64) -> Self {
        Anchored {
            mult,
            at,
            at_ticks,
            window_ticks: window_ticks(mult),
            wall: None,
            last: at,
            deferred: false,
        }
    }

    fn from_os(mult: u64) -> Self {
        let (i, t) = os_pair();
        Anchored::new(mult, i, t)
    }

    /// The time at counter value `t`. Reads the OS clock through `os` (a
    /// time and the counter's value with it) when the anchor is older than
    /// the window or the counter went back.
    #[inline]
    fn at(&mut self, t: u64, os: impl FnOnce() -> (Instant, u64)) -> Instant {
        let d = t.wrapping_sub(self.at_ticks);
        // Deferred (after a block): any forward span is mapped; a counter
        // that went back still re-anchors.
        let within = d < self.window_ticks || (self.deferred && d < 1 << 62);
        let now = if within {
            self.at + Duration::from_nanos(((u128::from(d) * u128::from(self.mult)) >> 32) as u64)
        } else {
            let (i, t) = os();
            self.reanchor(i, t);
            i
        };
        self.stamp(now)
    }

    /// The wall clock at this map's time `t`: from the last wall-clock
    /// reading if it is less than [`RESYNC`] old, else from a new one
    /// (`read`).
    fn wall_at(&mut self, t: Instant, read: impl FnOnce() -> SystemTime) -> SystemTime {
        match self.wall {
            Some((at, wall)) if t >= at && t - at < RESYNC => wall + (t - at),
            _ => {
                let wall = read();
                self.wall = Some((t, wall));
                wall
            }
        }
    }

    /// `now`, or the last time handed out if that is later.
    #[inline]
    fn stamp(&mut self, now: Instant) -> Instant {
        if now > self.last {
            self.last = now;
        }
        self.last
    }

    /// Moves the anchor to (`i`, `t`), refining the rate from the span
    /// since the previous anchor when that span is usable.
    fn reanchor(&mut self, i: Instant, t: u64) {
        self.deferred = false;
        let dt = t.wrapping_sub(self.at_ticks);
        // Only forward spans of at least half a window (shorter ones carry
        // the reads' own jitter), and not absurdly long ones.
        if dt >= self.window_ticks / 2 && dt < 1 << 62 {
            let ns = i.saturating_duration_since(self.at).as_nanos();
            if let Ok(sample) = u64::try_from((ns << 32) / u128::from(dt)) {
                let off = sample.abs_diff(self.mult);
                if off <= self.mult / 4 {
                    self.mult = self.mult - self.mult / 8 + sample / 8;
                    self.window_ticks = window_ticks(self.mult);
                }
            }
        }
        self.at = i;
        self.at_ticks = t;
    }
}

/// [`RESYNC`] in ticks at `mult` nanoseconds per tick (times 2^32).
fn window_ticks(mult: u64) -> u64 {
    u64::try_from((RESYNC.as_nanos() << 32) / u128::from(mult.max(1))).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2.5 ticks per nanosecond (2.5 GHz).
    const MULT_2_5_GHZ: u64 = (1u64 << 32) * 2 / 5;

    #[test]
    fn conversion_follows_the_rate_within_a_window() {
        let t0 = Instant::now();
        let mut a = Anchored::new(MULT_2_5_GHZ, t0, 1_000);
        let no_os = || -> (Instant, u64) { panic!("no OS read inside the window") };
        assert_eq!(a.at(1_000, no_os), t0);
        // 2,500 ticks: 1 µs (within the fixed point's rounding).
        let d = a.at(3_500, no_os) - t0;
        assert!((999..=1_000).contains(&d.as_nanos()), "{d:?}");
        // 1 ms: 2.5 M ticks, still inside the 2 ms window.
        let d = a.at(1_000 + 2_500_000, no_os) - t0;
        assert!((999_990..=1_000_000).contains(&d.as_nanos()), "{d:?}");
        assert_eq!(window_ticks(MULT_2_5_GHZ), 5_000_000);
        assert_eq!(Source::Tsc { mult: MULT_2_5_GHZ }.tsc_mhz(), Some(2_500));
    }

    #[test]
    fn reads_past_the_window_reanchor_on_the_os_clock_and_refine_the_rate() {
        let t0 = Instant::now();
        // The calibration said 2.5 GHz; the counter really runs at 2.4 GHz
        // (the map runs 4 % slow).
        let mut a = Anchored::new(MULT_2_5_GHZ, t0, 0);
        let mut os_reads = 0;
        let mut tick = 0u64;
        let mut worst_ns = 0i128;
        for step in 1..=400u64 {
            // 0.5 ms of counter per step.
            tick += 1_200_000;
            let real = t0 + Duration::from_micros(500 * step);
            let got = a.at(tick, || {
                os_reads += 1;
                (real, tick)
            });
            if step > 200 {
                worst_ns = worst_ns.max((got.max(real) - got.min(real)).as_nanos() as i128);
            }
        }
        // One OS read per window (2 ms of map time: every 4 steps), not per
        // read.
        assert!((75..=105).contains(&os_reads), "{os_reads} OS reads");
        // The rate converged: after 200 steps the map is within 0.1 % of a
        // window of the real time.
        assert!(worst_ns <= 2_000, "error {worst_ns} ns");
        let mhz = Source::Tsc { mult: a.mult }.tsc_mhz().unwrap();
        assert!((2_398..=2_402).contains(&mhz), "{mhz} MHz");
    }

    #[test]
    fn time_never_goes_backwards_when_the_counter_or_the_os_clock_does() {
        let t0 = Instant::now();
        let mut a = Anchored::new(MULT_2_5_GHZ, t0, 10_000_000);
        let late = a.at(12_000_000, || unreachable!());
        // The counter reads lower (another CPU's counter): re-anchor, and
        // the OS clock says earlier than what was handed out.
        let back = a.at(9_000_000, || (t0 + Duration::from_micros(100), 9_000_000));
        assert_eq!(back, late, "clamped to the last time handed out");
        // A big backward jump of the counter is no rate sample.
        assert_eq!(a.mult, MULT_2_5_GHZ);
        // From the new anchor the time moves on, never below `late`.
        let next = a.at(9_000_000 + 2_500_000, || unreachable!());
        assert!(next >= late);
        let d = next - t0;
        assert!((1_099_999..=1_100_000).contains(&d.as_nanos()), "{d:?}");
    }

    #[test]
    fn after_a_block_the_anchor_serves_past_its_window_until_the_next_reanchor() {
        let t0 = Instant::now();
        let base = 100_000_000u64;
        let mut a = Anchored::new(MULT_2_5_GHZ, t0, base);
        a.deferred = true;
        // 10 ms of counter, five windows: mapped without an OS read.
        let t = a.at(base + 25_000_000, || panic!("no OS read while deferred"));
        assert!((9_999..=10_000).contains(&(t - t0).as_micros()), "{:?}", t - t0);
        // A counter that went back still re-anchors.
        let mut reads = 0;
        let back = a.at(1_000, || {
            reads += 1;
            (t0 + Duration::from_millis(11), 1_000)
        });
        assert_eq!((reads, back), (1, t0 + Duration::from_millis(11)));
        assert!(!a.deferred, "a re-anchoring ends the deferral");
        // Past the window again: the OS clock is read as usual.
        a.at(1_000 + 6_000_000, || {
            reads += 1;
            (t0 + Duration::from_millis(14), 1_000 + 6_000_000)
        });
        assert_eq!(reads, 2);
    }

    #[test]
    fn wild_rate_samples_are_ignored() {
        let t0 = Instant::now();
        let mut a = Anchored::new(MULT_2_5_GHZ, t0, 0);
        // The counter stood still while 10 ms passed (a deep idle state on
        // a CPU without a constant counter): 1 tick for 10 ms.
        a.reanchor(t0 + Duration::from_millis(10), 5_000_000);
        assert_eq!(a.mult, MULT_2_5_GHZ, "a 5x sample is not taken");
        a.reanchor(t0 + Duration::from_millis(12), 10_000_000);
        assert_eq!(a.mult, MULT_2_5_GHZ, "an exact sample keeps the rate");
    }

    #[test]
    fn calibration_measures_a_known_rate_and_rejects_a_stopped_counter() {
        // A fake counter at 3 GHz tied to a fake clock that advances 1 µs
        // per read.
        let base = Instant::now();
        let ns = std::cell::Cell::new(0u64);
        let clock = || {
            ns.set(ns.get() + 1_000);
            base + Duration::from_nanos(ns.get())
        };
        let counter = || ns.get() * 3;
        let mult = calibrate(counter, clock, Duration::from_micros(200), 5).unwrap();
        let mhz = Source::Tsc { mult }.tsc_mhz().unwrap();
        assert!((2_999..=3_001).contains(&mhz), "{mhz} MHz");
        assert_eq!(calibrate(|| 7, clock, Duration::from_micros(50), 3), None);
        // 1 GHz is plausible; 1 MHz is not.
        assert!(calibrate(|| ns.get(), clock, Duration::from_micros(50), 3).is_some());
        assert_eq!(calibrate(|| ns.get() / 1000, clock, Duration::from_micros(50), 3), None);
    }

    #[test]
    fn the_wall_clock_is_read_once_per_window_and_follows_the_map() {
        let t0 = Instant::now();
        let mut a = Anchored::new(MULT_2_5_GHZ, t0, 0);
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let no_read = || -> SystemTime { panic!("no wall-clock read within the window") };
        assert_eq!(a.wall_at(t0, || w0), w0);
        // 1 µs later on the map: 1 µs later on the wall, no read.
        let t = a.at(2_500, || unreachable!());
        let w = a.wall_at(t, no_read);
        assert!((999..=1_000).contains(&w.duration_since(w0).unwrap().as_nanos()));
        // A window later the wall clock is read again (and a step shows).
        let stepped = w0 + Duration::from_secs(60);
        let t = t0 + RESYNC;
        assert_eq!(a.wall_at(t, || stepped), stepped);
        assert_eq!(
            a.wall_at(t + Duration::from_micros(5), no_read),
            stepped + Duration::from_micros(5)
        );
    }

    /// The real counter (x86_64): calibrated and mapped, it keeps pace with
    /// `Instant` read by read (across re-anchoring and a sleep) and never
    /// goes back.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_real_counter_tracks_instant() {
        let Some(Source::Tsc { mult }) = tsc_source() else {
            panic!("no usable time-stamp counter on this x86_64 host");
        };
        let mut a = Anchored::from_os(mult);
        let mut prev = a.at(ticks(), os_pair);
        let (mut reads, mut far) = (0u32, 0u32);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            let t = a.at(ticks(), os_pair);
            let real = Instant::now();
            assert!(t >= prev, "went back at read {reads}");
            prev = t;
            reads += 1;
            // A preempted thread may read far apart now and then; a wrong
            // rate is far off for most of each 2 ms window.
            far += u32::from(real.max(t) - real.min(t) > Duration::from_micros(200));
            if reads == 1_000 {
                std::thread::sleep(Duration::from_millis(3));
            }
        }
        assert!(far * 10 < reads, "{far} of {reads} reads more than 200 µs off");
    }
}
