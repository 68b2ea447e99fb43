//! Running a test body once per seed, and reporting the seed that failed.
//!
//! `SIM_SEED=<n>` runs only seed `n`; `SIM_SEEDS=<count>` changes how many seeds
//! run (starting at the range's start). Both accept decimal or `0x` hex. Called
//! from test threads; each call is independent.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A seed whose run failed, and why (the `Err` text or the panic message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedFailure {
    pub seed: u64,
    pub message: String,
}

impl std::fmt::Display for SeedFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sim failure: seed={} (reproduce with SIM_SEED={}): {}",
            self.seed, self.seed, self.message
        )
    }
}

fn parse_u64(name: &str, v: &str) -> Result<u64, String> {
    let t = v.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    r.map_err(|e| format!("{name}={v:?} is not a u64: {e}"))
}

/// The seeds to run: `SIM_SEED=n` → `n..n+1`; else `SIM_SEEDS=k` →
/// `default.start..default.start+k`; else `default`. A malformed variable is an
/// error (so a typo does not silently run the default set).
pub fn seeds_from_env(default: Range<u64>) -> Result<Range<u64>, String> {
    if let Ok(v) = std::env::var("SIM_SEED") {
        let s = parse_u64("SIM_SEED", &v)?;
        return Ok(s..s.saturating_add(1));
    }
    if let Ok(v) = std::env::var("SIM_SEEDS") {
        let k = parse_u64("SIM_SEEDS", &v)?;
        return Ok(default.start..default.start.saturating_add(k));
    }
    Ok(default)
}

/// Run `f` for each seed in order until one fails (returns `Err` or panics).
/// Returns how many seeds passed, or the first failure. Does not read the
/// environment (see [`check_seeds`]).
pub fn run_seeds<I, F>(seeds: I, mut f: F) -> Result<u64, SeedFailure>
where
    I: IntoIterator<Item = u64>,
    F: FnMut(u64) -> Result<(), String>,
{
    let mut passed = 0;
    for seed in seeds {
        // The closure's state is not used after a panic except to run the next
        // seed, which the caller accepts by passing an FnMut (every seed builds
        // its own network).
        match catch_unwind(AssertUnwindSafe(|| f(seed))) {
            Ok(Ok(())) => passed += 1,
            Ok(Err(message)) => return Err(SeedFailure { seed, message }),
            Err(payload) => {
                let message = if let Some(s) = payload.downcast_ref::<&str>() {
                    format!("panic: {s}")
                } else if let Some(s) = payload.downcast_ref::<String>() {
                    format!("panic: {s}")
                } else {
                    "panic with a non-string payload".to_string()
                };
                return Err(SeedFailure { seed, message });
            }
        }
    }
    Ok(passed)
}

/// Run `f` for every seed of `default` (or what `SIM_SEED` / `SIM_SEEDS` say).
/// On the first failure, print `sim failure: seed=<n> (reproduce with
/// SIM_SEED=<n>)` with the reason to stderr and panic with the same text, failing
/// the test.
pub fn check_seeds<F>(default: Range<u64>, f: F)
where
    F: FnMut(u64) -> Result<(), String>,
{
    let seeds = match seeds_from_env(default) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    if let Err(fail) = run_seeds(seeds, f) {
        eprintln!("{fail}");
        panic!("{fail}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_seeds_counts_and_reports_err_and_panic() {
        assert_eq!(run_seeds(0..5, |_| Ok(())), Ok(5));
        let e = run_seeds(10..20, |s| if s == 13 { Err("boom".into()) } else { Ok(()) }).unwrap_err();
        assert_eq!(e.seed, 13);
        assert_eq!(e.message, "boom");
        let e = run_seeds(0..3, |s| {
            assert!(s != 2, "seed two is bad");
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.seed, 2);
        assert!(e.message.contains("seed two is bad"), "{}", e.message);
        let text = e.to_string();
        assert!(
            text.starts_with("sim failure: seed=2 (reproduce with SIM_SEED=2)"),
            "{text}"
        );
    }

    #[test]
    fn parse_accepts_decimal_and_hex() {
        assert_eq!(parse_u64("X", "42"), Ok(42));
        assert_eq!(parse_u64("X", " 0x2a "), Ok(42));
        assert!(parse_u64("X", "forty").is_err());
    }
}
