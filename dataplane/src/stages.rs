//! Stage timing: where the nanoseconds of one Call go inside an engine, for
//! hosts where no hardware counter can be read (this project's VMs: `perf
//! stat` reports cycles as "not supported") and where callgrind's instruction
//! counts do not show what waits on memory.
//!
//! An engine stamps an *origin* (a responder: the poll that delivered the
//! Call; a requester: the moment the application took a call buffer, or the
//! poll that delivered the Reply) and then *laps*: each lap records the time
//! since the origin into that lap's histogram. The histograms print to
//! standard error every [`report_every`] samples, one line per lap, as the
//! 10th, 50th and 90th percentiles in nanoseconds.
//!
//! Everything here is compiled in only with the `stage-timing` feature
//! (`scripts/stage-timing.sh` builds it into its own target directory). Without
//! it a [`Stamp`] is a zero-sized value and every function is an empty inline
//! function, so the engines carry no cost.
//!
//! The clock is the time-stamp counter on x86-64 (its rate is calibrated
//! against `Instant` once, when the first [`StageTimer`] is made) and
//! `Instant` elsewhere. Each lap costs one counter read and one histogram
//! increment, a few nanoseconds that the laps after it include.
//!
//! A timer belongs to one engine, on the core that owns it.

/// A point in time as the stage clock reads it (a zero-sized value without the
/// `stage-timing` feature).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp(#[cfg(feature = "stage-timing")] u64);

/// How many samples of one lap are collected before its line is printed (and
/// its histogram cleared): `RPCRDMA_STAGE_EVERY`, default 100,000.
pub fn report_every() -> u64 {
    std::env::var("RPCRDMA_STAGE_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(100_000)
}

/// Whether stage timing is compiled in.
pub const ENABLED: bool = cfg!(feature = "stage-timing");

#[cfg(feature = "stage-timing")]
mod imp {
    use super::Stamp;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Histogram buckets: one per clock tick up to this many ticks (about
    /// 1.5 µs at 2.6 GHz); longer spans land in the last bucket.
    pub const BUCKETS: usize = 4096;

    #[inline(always)]
    pub fn ticks() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: RDTSC has no preconditions; it only reads a counter.
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            static BASE: OnceLock<Instant> = OnceLock::new();
            BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
        }
    }

    /// Nanoseconds per tick, measured once against `Instant` over 20 ms.
    pub fn ns_per_tick() -> f64 {
        static RATE: OnceLock<f64> = OnceLock::new();
        *RATE.get_or_init(|| {
            let (i0, t0) = (Instant::now(), ticks());
            while i0.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            let (ns, dt) = (i0.elapsed().as_nanos() as f64, ticks().wrapping_sub(t0) as f64);
            if dt > 0.0 {
                ns / dt
            } else {
                1.0
            }
        })
    }

    #[inline(always)]
    pub fn now() -> Stamp {
        Stamp(ticks())
    }

    /// The histograms of one timer.
    pub struct Hists {
        pub names: Vec<&'static str>,
        pub counts: Vec<Box<[u32; BUCKETS]>>,
        pub samples: Vec<u64>,
        pub every: u64,
        pub ns_per_tick: f64,
        pub label: &'static str,
    }
}

/// The lap histograms of one engine (empty without the `stage-timing`
/// feature).
pub struct StageTimer {
    #[cfg(feature = "stage-timing")]
    h: imp::Hists,
}

impl std::fmt::Debug for StageTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageTimer").field("enabled", &ENABLED).finish()
    }
}

/// One lap's percentiles, in nanoseconds since the origin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LapSummary {
    pub name: &'static str,
    pub samples: u64,
    pub p10_ns: f64,
    pub p50_ns: f64,
    pub p90_ns: f64,
}

impl StageTimer {
    /// A timer named `label` (it starts each printed line) with one histogram
    /// per name in `laps`, lap `k` being `laps[k]`. Allocates at start-up
    /// only (and only with the feature).
    pub fn new(label: &'static str, laps: &[&'static str]) -> Self {
        Self::with_every(label, laps, if ENABLED { report_every() } else { 0 })
    }

    /// [`StageTimer::new`] printing every `every` samples of a lap.
    pub fn with_every(label: &'static str, laps: &[&'static str], every: u64) -> Self {
        #[cfg(feature = "stage-timing")]
        {
            StageTimer {
                h: imp::Hists {
                    names: laps.to_vec(),
                    counts: laps.iter().map(|_| Box::new([0u32; imp::BUCKETS])).collect(),
                    samples: vec![0; laps.len()],
                    every: every.max(1),
                    ns_per_tick: imp::ns_per_tick(),
                    label,
                },
            }
        }
        #[cfg(not(feature = "stage-timing"))]
        {
            let _ = (label, laps, every);
            StageTimer {}
        }
    }

    /// The stage clock now: an origin for later laps.
    #[inline(always)]
    pub fn now() -> Stamp {
        #[cfg(feature = "stage-timing")]
        {
            imp::now()
        }
        #[cfg(not(feature = "stage-timing"))]
        {
            Stamp()
        }
    }

    /// Record lap `k`: the time from `origin` to now. An origin of
    /// `Stamp::default()` (never stamped) records nothing.
    #[inline(always)]
    pub fn lap(&mut self, k: usize, origin: Stamp) {
        self.interval(k, origin, Self::now());
    }

    /// Record lap `k` as the time from `from` to `to` (two stamps taken
    /// earlier); nothing if either was never stamped.
    #[inline(always)]
    pub fn interval(&mut self, k: usize, from: Stamp, to: Stamp) {
        #[cfg(feature = "stage-timing")]
        {
            if from.0 != 0 && to.0 != 0 {
                self.record(k, to.0.wrapping_sub(from.0));
            }
        }
        #[cfg(not(feature = "stage-timing"))]
        {
            let _ = (k, from, to);
        }
    }

    /// Record `ticks` as a sample of lap `k`; print and clear the lap's
    /// histogram every `report_every` samples.
    #[cfg(feature = "stage-timing")]
    #[inline(never)]
    fn record(&mut self, k: usize, ticks: u64) {
        let h = &mut self.h;
        let (Some(c), Some(n)) = (h.counts.get_mut(k), h.samples.get_mut(k)) else {
            return;
        };
        c[(ticks as usize).min(imp::BUCKETS - 1)] += 1;
        *n += 1;
        if *n >= h.every {
            if let Some(s) = self.summary(k) {
                eprintln!(
                    "stage {} {}: p10 {:.0} p50 {:.0} p90 {:.0} ns ({} samples)",
                    self.h.label, s.name, s.p10_ns, s.p50_ns, s.p90_ns, s.samples
                );
            }
            self.h.counts[k].fill(0);
            self.h.samples[k] = 0;
        }
    }

    /// Lap `k`'s percentiles so far (`None` without samples or without the
    /// feature).
    pub fn summary(&self, k: usize) -> Option<LapSummary> {
        #[cfg(feature = "stage-timing")]
        {
            let h = &self.h;
            let (c, &n) = (h.counts.get(k)?, h.samples.get(k)?);
            if n == 0 {
                return None;
            }
            let mut q = [0usize; 3];
            let want = [n.div_ceil(10), n.div_ceil(2), (n * 9).div_ceil(10)];
            let (mut acc, mut w) = (0u64, 0);
            for (t, &x) in c.iter().enumerate() {
                acc += u64::from(x);
                while w < 3 && acc >= want[w] {
                    q[w] = t;
                    w += 1;
                }
            }
            let ns = |t: usize| t as f64 * h.ns_per_tick;
            Some(LapSummary {
                name: h.names[k],
                samples: n,
                p10_ns: ns(q[0]),
                p50_ns: ns(q[1]),
                p90_ns: ns(q[2]),
            })
        }
        #[cfg(not(feature = "stage-timing"))]
        {
            let _ = k;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_a_stamp_is_free_and_nothing_is_recorded() {
        if ENABLED {
            return;
        }
        assert_eq!(std::mem::size_of::<Stamp>(), 0);
        let mut t = StageTimer::new("test", &["a"]);
        t.lap(0, StageTimer::now());
        assert_eq!(t.summary(0), None);
    }

    #[cfg(feature = "stage-timing")]
    #[test]
    fn laps_are_measured_from_their_origin_in_order() {
        let mut t = StageTimer::new("test", &["short", "long", "never"]);
        for _ in 0..200 {
            let o = StageTimer::now();
            t.lap(0, o);
            let until = std::time::Instant::now() + std::time::Duration::from_micros(2);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            t.lap(1, o);
        }
        let (a, b) = (t.summary(0).unwrap(), t.summary(1).unwrap());
        assert_eq!((a.samples, b.samples), (200, 200));
        assert!(a.p10_ns <= a.p50_ns && a.p50_ns <= a.p90_ns);
        // The long lap waited 2 µs past its origin; the short one did not.
        assert!(b.p50_ns >= 1_500.0, "{b:?}");
        assert!(a.p50_ns < 1_000.0, "{a:?}");
        assert_eq!(t.summary(2), None);
        // A never-stamped origin records nothing; an unknown lap is ignored.
        t.lap(2, Stamp::default());
        t.lap(7, StageTimer::now());
        assert_eq!(t.summary(2), None);
    }

    #[cfg(feature = "stage-timing")]
    #[test]
    fn a_histogram_is_cleared_after_its_report() {
        let mut t = StageTimer::with_every("test", &["x"], 50);
        for _ in 0..49 {
            t.lap(0, StageTimer::now());
        }
        assert_eq!(t.summary(0).map(|s| s.samples), Some(49));
        t.lap(0, StageTimer::now());
        assert_eq!(t.summary(0), None);
    }
}
