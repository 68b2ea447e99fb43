//! CPU time used over the measured window, by perf itself (`getrusage`) and
//! by the target process (`/proc/<pid>/stat` utime + stime, every thread
//! of the process including those that ended), as the seed paper ("NFS over
//! RDMA", 2003) compared transports: CPU per operation next to throughput.
//! Main thread.

use serde::{Deserialize, Serialize};

/// CPU seconds (user + system) used so far by this process, all threads.
pub fn self_cpu_s() -> f64 {
    // SAFETY: rusage is plain data; getrusage fills it for RUSAGE_SELF.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of `/proc/<pid>/stat`'s text, in clock ticks (fields 14
/// and 15, counted after the command name, which may hold spaces and
/// parentheses: the fields start after its last `)`).
pub fn parse_proc_stat_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    // rest starts with " state ..." = field 3.
    let mut f = rest.split_ascii_whitespace();
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds (user + system) process `pid` has used so far; `None` when
/// it cannot be read (no such process, another user's under hidepid).
pub fn pid_cpu_s(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat_ticks(&text).map(|t| t as f64 / clk_tck())
}

/// One reading of both sides.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuSample {
    pub at: Option<std::time::Instant>,
    pub client_s: f64,
    pub target_s: Option<f64>,
}

impl CpuSample {
    /// Read now; `target`: the target's pid.
    pub fn now(target: Option<u32>) -> Self {
        CpuSample {
            at: Some(std::time::Instant::now()),
            client_s: self_cpu_s(),
            target_s: target.and_then(pid_cpu_s),
        }
    }
}

/// CPU used over the measured time, in the result record (`--json` key
/// `cpu`, present when measured).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuUse {
    /// Wall time between the two readings.
    pub wall_s: f64,
    /// perf's CPU seconds (every thread, user + system).
    pub client_s: f64,
    /// perf's CPU per operation, microseconds.
    pub client_us_per_op: f64,
    /// The target's CPU seconds (`--target-pid`), when read.
    pub target_s: Option<f64>,
    /// The target's CPU per operation, microseconds.
    pub target_us_per_op: Option<f64>,
}

impl CpuUse {
    /// From the readings at the start and the end of the measured time and
    /// the operations completed in it; `None` without both readings or
    /// operations.
    pub fn between(a: &CpuSample, b: &CpuSample, ops: u64) -> Option<CpuUse> {
        let (ta, tb) = (a.at?, b.at?);
        if ops == 0 {
            return None;
        }
        let per = |s: f64| (s * 1e6 / ops as f64 * 1000.0).round() / 1000.0;
        let r3 = |x: f64| (x * 1e6).round() / 1e6;
        let client_s = (b.client_s - a.client_s).max(0.0);
        let target_s = match (a.target_s, b.target_s) {
            (Some(x), Some(y)) => Some((y - x).max(0.0)),
            _ => None,
        };
        Some(CpuUse {
            wall_s: r3(tb.duration_since(ta).as_secs_f64()),
            client_s: r3(client_s),
            client_us_per_op: per(client_s),
            target_s: target_s.map(r3),
            target_us_per_op: target_s.map(per),
        })
    }

    /// The summary line.
    pub fn line(&self) -> String {
        let pct = |s: f64| {
            if self.wall_s > 0.0 {
                100.0 * s / self.wall_s
            } else {
                0.0
            }
        };
        let mut out = format!(
            "  cpu: client={:.2}us/op ({:.0}% of a CPU)",
            self.client_us_per_op,
            pct(self.client_s)
        );
        match (self.target_s, self.target_us_per_op) {
            (Some(s), Some(u)) => out += &format!(" target={u:.2}us/op ({:.0}% of a CPU)", pct(s)),
            _ => out += " target=- (no --target-pid)",
        }
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_after_the_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let s = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0";
        assert_eq!(parse_proc_stat_ticks(s), Some(333));
        assert_eq!(parse_proc_stat_ticks("1 (x) S 1 2"), None);
        let own = pid_cpu_s(std::process::id()).expect("own /proc stat");
        assert!(own >= 0.0);
    }

    #[test]
    fn per_operation() {
        let t = std::time::Instant::now();
        let a = CpuSample {
            at: Some(t),
            client_s: 1.0,
            target_s: Some(10.0),
        };
        let b = CpuSample {
            at: Some(t + std::time::Duration::from_secs(2)),
            client_s: 2.0,
            target_s: Some(12.0),
        };
        let u = CpuUse::between(&a, &b, 100_000).unwrap();
        assert_eq!((u.client_us_per_op, u.target_us_per_op), (10.0, Some(20.0)));
        assert!(u.line().contains("50% of a CPU"), "{}", u.line());
        assert!(CpuUse::between(&a, &b, 0).is_none());
        assert!(CpuUse::between(&CpuSample::default(), &b, 1).is_none());
    }
}
