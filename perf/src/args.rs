//! Parsing helpers for the command line. Pure functions; any thread.

use std::time::Duration;

/// A byte count: a number with an optional binary suffix (`k`/`K`/`KiB` =
/// 1024, `m`/`M`/`MiB`, `g`/`G`/`GiB`; `B` alone is bytes). `"4k"`,
/// `"64KiB"`, `"1M"`, `"512"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("{s:?}: expected a number with an optional k/M/G suffix"));
    }
    let n: u64 = num.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let mult: u64 = match unit.trim() {
        "" | "b" | "B" => 1,
        "k" | "K" | "KiB" | "KB" | "kB" | "kiB" => 1 << 10,
        "m" | "M" | "MiB" | "MB" => 1 << 20,
        "g" | "G" | "GiB" | "GB" => 1 << 30,
        u => return Err(format!("{s:?}: unknown unit {u:?} (k, M, G are powers of 1024)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?}: too large"))
}

/// A list of CPU ids: `"0"`, `"0,2"`, `"0-3"`, `"0-1,4"`. Duplicates are
/// refused (one thread per core).
pub fn parse_cores(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: usize = a.parse().map_err(|e| format!("{part:?}: {e}"))?;
        let b: usize = b.parse().map_err(|e| format!("{part:?}: {e}"))?;
        if a > b || b - a > 4096 {
            return Err(format!("{part:?}: bad range"));
        }
        for c in a..=b {
            if out.contains(&c) {
                return Err(format!("CPU {c} listed twice"));
            }
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(out)
}

/// A duration: seconds with an optional fraction (`"5"`, `"0.5"`), or a
/// number with a unit (`"500ms"`, `"2s"`, `"1m"`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        u => return Err(format!("{s:?}: unknown unit {u:?} (ms, s, m)")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Bytes as a short human string (`4KiB`, `1MiB`, `100B`).
pub fn size_label(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}KiB", n >> 10)
    } else {
        format!("{n}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("7B"), Ok(7));
        assert!(parse_size("k").is_err());
        assert!(parse_size("4q").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert!(parse_size("17179869184G").is_err(), "overflow");
    }

    #[test]
    fn cores() {
        assert_eq!(parse_cores("0"), Ok(vec![0]));
        assert_eq!(parse_cores("0,2"), Ok(vec![0, 2]));
        assert_eq!(parse_cores("1-3,5"), Ok(vec![1, 2, 3, 5]));
        assert!(parse_cores("0,0").is_err());
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("").is_err());
        assert!(parse_cores("x").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(4096), "4KiB");
        assert_eq!(size_label(1 << 20), "1MiB");
        assert_eq!(size_label(100), "100B");
        assert_eq!(size_label(1536), "1536B");
    }
}
