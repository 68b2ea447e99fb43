//! Latency histograms, the result record written by `--json`, the fio-like
//! summary, and the `compare` table. Pure; any thread.
//!
//! Latencies are recorded in **nanoseconds** in an HdrHistogram with three
//! significant digits (1 ns to one hour) and reported in **microseconds**.
//! `mb_per_s` counts 10^6 bytes per second of payload (the I/O size; 0 for
//! NULL), as fio's "MB/s".

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::PerfError;

/// Highest latency the histograms hold (one hour, in ns); above it values are
/// clamped.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// A latency histogram in nanoseconds.
pub type LatencyHist = Histogram<u64>;

/// An empty latency histogram (1 ns .. [`MAX_LATENCY_NS`], 3 digits).
pub fn new_hist() -> LatencyHist {
    // Bounds are constants that satisfy the constructor's rules.
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Record one latency (clamped to the histogram's range).
#[inline]
pub fn record(h: &mut LatencyHist, ns: u64) {
    h.saturating_record(ns.clamp(1, MAX_LATENCY_NS));
}

/// The latency summary, in microseconds (`latency_us` in the JSON file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyUs {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

/// Round to 3 decimals (nanosecond resolution in microseconds).
fn us(ns: f64) -> f64 {
    (ns / 1e3 * 1e3).round() / 1e3
}

impl LatencyUs {
    /// The summary of a histogram in nanoseconds; all zero when it is empty.
    pub fn from_hist(h: &LatencyHist) -> Self {
        if h.is_empty() {
            return LatencyUs::default();
        }
        let q = |p: f64| us(h.value_at_quantile(p) as f64);
        LatencyUs {
            min: us(h.min() as f64),
            mean: us(h.mean()),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: us(h.max() as f64),
        }
    }

    /// `(quantile, value)` pairs, min as quantile 0 and max as quantile 1.
    pub fn points(&self) -> [(f64, f64); 7] {
        [
            (0.0, self.min),
            (0.5, self.p50),
            (0.9, self.p90),
            (0.99, self.p99),
            (0.999, self.p999),
            (0.9999, self.p9999),
            (1.0, self.max),
        ]
    }
}

/// The result of one run, as written by `--json`: exactly these keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    /// `null`, `read`, `write`, `mixed` or `raw`.
    pub op: String,
    /// `shm`, `verbs`, or `tcp` (`--transport tcp`).
    pub fabric: String,
    /// Negotiated RPC-over-RDMA version (1 or 2); 0 for `raw` and `tcp`,
    /// which have no RPC-over-RDMA header.
    pub version: u32,
    /// I/O size (READ/WRITE data, raw message size); 0 for NULL.
    pub size_bytes: u64,
    /// Calls outstanding per connection at most.
    pub queue_depth: u32,
    pub connections: u32,
    /// Measured time (after warm-up).
    pub duration_s: f64,
    /// Operations completed successfully in the measured time.
    pub ops: u64,
    /// Operations that failed (transport error, RPC or NFS error, data
    /// mismatch, connection lost).
    pub errors: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub latency_us: LatencyUs,
    /// CPU used by perf and the target over the measured time (RPC runs;
    /// the target's with `--target-pid`). Absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::cpu::CpuUse>,
    /// Closed-loop RPC runs over a fabric: the share of the offered load
    /// (queue depth x connections x measured time) that perf could not keep
    /// outstanding, by reason. Absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_back_pct: Option<HeldBackPct>,
}

/// [`RunResult::held_back_pct`]: percent of queue depth x connections x
/// measured time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldBackPct {
    /// No credit left: as many Calls outstanding as the server granted.
    pub credits: f64,
    /// Every Call slot in use.
    pub slots: f64,
    /// Anything else (between a reply and the next Call's submission, no
    /// buffer, the link not ready).
    pub other: f64,
}

impl HeldBackPct {
    /// From Call-nanoseconds by reason (`engine::HeldBack` order) over
    /// `qd` x `conns` x `duration_s`; `None` for an empty run.
    pub fn of(held_ns: [u64; 3], qd: u32, conns: u32, duration_s: f64) -> Option<HeldBackPct> {
        let whole = f64::from(qd) * f64::from(conns) * duration_s * 1e9;
        if whole <= 0.0 {
            return None;
        }
        let pct = |ns: u64| (ns as f64 / whole * 1e4).round() / 100.0;
        Some(HeldBackPct {
            credits: pct(held_ns[0]),
            slots: pct(held_ns[1]),
            other: pct(held_ns[2]),
        })
    }
}

impl RunResult {
    /// Build a result from counts, time and the latency histogram.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        op: &str,
        fabric: &str,
        version: u32,
        size_bytes: u64,
        queue_depth: u32,
        connections: u32,
        duration_s: f64,
        ops: u64,
        errors: u64,
        hist: &LatencyHist,
    ) -> Self {
        let (iops, mb_per_s) = rates(ops, size_bytes, duration_s);
        RunResult {
            op: op.into(),
            fabric: fabric.into(),
            version,
            size_bytes,
            queue_depth,
            connections,
            duration_s: (duration_s * 1e6).round() / 1e6,
            ops,
            errors,
            iops,
            mb_per_s,
            latency_us: LatencyUs::from_hist(hist),
            cpu: None,
            held_back_pct: None,
        }
    }

    /// The JSON text (pretty, one key per line).
    pub fn to_json(&self) -> String {
        // A struct of numbers and strings always serializes.
        serde_json::to_string_pretty(self).expect("serializable") + "\n"
    }

    /// Parse a result file's text; unknown or missing keys are errors.
    pub fn from_json(text: &str) -> Result<Self, PerfError> {
        serde_json::from_str(text).map_err(|e| PerfError::Other(format!("result file: {e}")))
    }

    /// The fio-like text summary.
    pub fn summary(&self, cores: &[usize]) -> String {
        let l = &self.latency_us;
        let cores = cores.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        let vers = if self.op == "raw" {
            String::new()
        } else if self.fabric == "tcp" {
            " transport=tcp".to_string()
        } else {
            format!(" rpcrdma=v{}", self.version)
        };
        format!(
            "{op}: fabric={fabric}{vers} size={size} qd={qd} conns={conns} cores={cores}\n  \
             ops={ops} errors={errors} time={dur:.3}s\n  \
             iops={iops:.1} bw={mb:.2}MB/s\n  \
             lat (usec): min={min:.2}, mean={mean:.2}, max={max:.2}\n  \
             percentiles (usec): p50={p50:.2}, p90={p90:.2}, p99={p99:.2}, p99.9={p999:.2}, p99.99={p9999:.2}\n",
            op = self.op,
            fabric = self.fabric,
            size = crate::args::size_label(self.size_bytes),
            qd = self.queue_depth,
            conns = self.connections,
            ops = self.ops,
            errors = self.errors,
            dur = self.duration_s,
            iops = self.iops,
            mb = self.mb_per_s,
            min = l.min,
            mean = l.mean,
            max = l.max,
            p50 = l.p50,
            p90 = l.p90,
            p99 = l.p99,
            p999 = l.p999,
            p9999 = l.p9999,
        ) + &self.cpu.as_ref().map(|c| c.line()).unwrap_or_default()
    }
}

/// IOPS and MB/s (10^6 bytes) of `ops` operations of `size` bytes in `secs`.
pub fn rates(ops: u64, size: u64, secs: f64) -> (f64, f64) {
    if secs <= 0.0 {
        return (0.0, 0.0);
    }
    let iops = ops as f64 / secs;
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    (round(iops), round(iops * size as f64 / 1e6))
}

/// One row of the comparison: a label and each file's value.
enum Cell {
    Text(String),
    Num(f64),
}

fn rows(r: &RunResult) -> Vec<(&'static str, Cell)> {
    let l = &r.latency_us;
    vec![
        ("op", Cell::Text(r.op.clone())),
        ("fabric", Cell::Text(r.fabric.clone())),
        ("version", Cell::Text(r.version.to_string())),
        ("size_bytes", Cell::Text(r.size_bytes.to_string())),
        ("queue_depth", Cell::Text(r.queue_depth.to_string())),
        ("connections", Cell::Text(r.connections.to_string())),
        ("duration_s", Cell::Num(r.duration_s)),
        ("ops", Cell::Num(r.ops as f64)),
        ("errors", Cell::Num(r.errors as f64)),
        ("iops", Cell::Num(r.iops)),
        ("mb_per_s", Cell::Num(r.mb_per_s)),
        ("lat min (us)", Cell::Num(l.min)),
        ("lat mean (us)", Cell::Num(l.mean)),
        ("lat p50 (us)", Cell::Num(l.p50)),
        ("lat p90 (us)", Cell::Num(l.p90)),
        ("lat p99 (us)", Cell::Num(l.p99)),
        ("lat p99.9 (us)", Cell::Num(l.p999)),
        ("lat p99.99 (us)", Cell::Num(l.p9999)),
        ("lat max (us)", Cell::Num(l.max)),
        (
            "cpu client (us/op)",
            r.cpu
                .as_ref()
                .map_or(Cell::Text("-".into()), |c| Cell::Num(c.client_us_per_op)),
        ),
        (
            "cpu target (us/op)",
            r.cpu
                .as_ref()
                .and_then(|c| c.target_us_per_op)
                .map_or(Cell::Text("-".into()), Cell::Num),
        ),
    ]
}

fn num(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e15 {
        format!("{x:.0}")
    } else if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// `value / base`, or `None` when the base is zero or either is not finite.
pub fn ratio(value: f64, base: f64) -> Option<f64> {
    (base != 0.0 && base.is_finite() && value.is_finite()).then(|| value / base)
}

/// The `compare` table: one column per result, every key as a row, numeric
/// values after the first column followed by their ratio to the first
/// column's value (`x1.50` = 1.5 times the first).
pub fn compare_table(results: &[(String, RunResult)]) -> String {
    let Some((_, first)) = results.first() else {
        return String::new();
    };
    let base = rows(first);
    let cols: Vec<Vec<String>> = results
        .iter()
        .enumerate()
        .map(|(k, (_, r))| {
            rows(r)
                .into_iter()
                .zip(&base)
                .map(|((_, c), (_, b))| match (c, b) {
                    (Cell::Text(t), _) => t,
                    (Cell::Num(v), Cell::Num(b)) if k > 0 => match ratio(v, *b) {
                        Some(q) => format!("{} (x{q:.2})", num(v)),
                        None => format!("{} (-)", num(v)),
                    },
                    (Cell::Num(v), _) => num(v),
                })
                .collect()
        })
        .collect();
    let label_w = base.iter().map(|(l, _)| l.len()).max().unwrap_or(0).max(3);
    let widths: Vec<usize> = results
        .iter()
        .zip(&cols)
        .map(|((name, _), col)| col.iter().map(String::len).chain([name.len()]).max().unwrap_or(0))
        .collect();
    let mut out = format!("{:<label_w$}", "key");
    for ((name, _), w) in results.iter().zip(&widths) {
        out += &format!("  {name:>w$}");
    }
    out.push('\n');
    for (i, (label, _)) in base.iter().enumerate() {
        out += &format!("{label:<label_w$}");
        for (col, w) in cols.iter().zip(&widths) {
            out += &format!("  {:>w$}", col[i]);
        }
        out.push('\n');
    }
    out
}

/// The `compare --by-file` table: one row per result (for many files), with
/// the main figures and the ratios of mean and p50 latency and of IOPS to the
/// first file's.
pub fn compare_rows(results: &[(String, RunResult)]) -> String {
    let Some((_, first)) = results.first() else {
        return String::new();
    };
    let fmt_ratio = |v: f64, b: f64| ratio(v, b).map_or_else(|| "-".to_string(), |q| format!("x{q:.2}"));
    let header = [
        "file",
        "op",
        "fabric",
        "vers",
        "size",
        "qd",
        "conns",
        "iops",
        "MB/s",
        "mean_us",
        "p50_us",
        "p99_us",
        "p99.9_us",
        "max_us",
        "errors",
        "cli_us/op",
        "tgt_us/op",
        "mean/1st",
        "p50/1st",
        "iops/1st",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(name, r)| {
            let l = &r.latency_us;
            vec![
                name.clone(),
                r.op.clone(),
                r.fabric.clone(),
                r.version.to_string(),
                crate::args::size_label(r.size_bytes),
                r.queue_depth.to_string(),
                r.connections.to_string(),
                format!("{:.0}", r.iops),
                format!("{:.1}", r.mb_per_s),
                format!("{:.2}", l.mean),
                format!("{:.2}", l.p50),
                format!("{:.2}", l.p99),
                format!("{:.2}", l.p999),
                format!("{:.1}", l.max),
                r.errors.to_string(),
                r.cpu
                    .as_ref()
                    .map_or_else(|| "-".into(), |c| format!("{:.2}", c.client_us_per_op)),
                r.cpu
                    .as_ref()
                    .and_then(|c| c.target_us_per_op)
                    .map_or_else(|| "-".into(), |u| format!("{u:.2}")),
                fmt_ratio(l.mean, first.latency_us.mean),
                fmt_ratio(l.p50, first.latency_us.p50),
                fmt_ratio(r.iops, first.iops),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                out += &format!("{c:<w$}");
            } else {
                out += &format!("  {c:>w$}");
            }
        }
        out + "\n"
    };
    let mut out = line(header.to_vec());
    for r in &rows {
        out += &line(r.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist_of(values_ns: &[u64]) -> LatencyHist {
        let mut h = new_hist();
        for &v in values_ns {
            record(&mut h, v);
        }
        h
    }

    #[test]
    fn summary_of_uniform_values() {
        // 1..=10000 us: quantiles are known to within the histogram's 3 digits.
        let v: Vec<u64> = (1..=10_000).map(|i| i * 1000).collect();
        let l = LatencyUs::from_hist(&hist_of(&v));
        let close = |a: f64, b: f64| (a - b).abs() <= b * 1e-3 + 1e-9;
        assert!(close(l.min, 1.0), "{l:?}");
        assert!(close(l.max, 10_000.0), "{l:?}");
        assert!(close(l.mean, 5000.5), "{l:?}");
        assert!(close(l.p50, 5000.0), "{l:?}");
        assert!(close(l.p90, 9000.0), "{l:?}");
        assert!(close(l.p99, 9900.0), "{l:?}");
        assert!(close(l.p999, 9990.0), "{l:?}");
        assert!(close(l.p9999, 9999.0), "{l:?}");
        let p = l.points();
        assert!(p.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn empty_histogram_is_zero_and_clamping() {
        assert_eq!(LatencyUs::from_hist(&new_hist()), LatencyUs::default());
        let h = hist_of(&[0, u64::MAX]);
        assert_eq!(h.len(), 2);
        assert_eq!(h.min(), 1);
        assert!(h.max() >= MAX_LATENCY_NS);
    }

    #[test]
    fn json_has_exactly_the_keys() {
        let h = hist_of(&[2000, 3000, 4000]);
        let r = RunResult::new("read", "shm", 2, 4096, 4, 1, 2.0, 1000, 3, &h);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let obj = v.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = vec![
            "op",
            "fabric",
            "version",
            "size_bytes",
            "queue_depth",
            "connections",
            "duration_s",
            "ops",
            "errors",
            "iops",
            "mb_per_s",
            "latency_us",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        let mut lk: Vec<&str> = obj["latency_us"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        lk.sort_unstable();
        let mut lw = vec!["min", "mean", "p50", "p90", "p99", "p999", "p9999", "max"];
        lw.sort_unstable();
        assert_eq!(lk, lw);
        assert_eq!(obj["iops"], 500.0);
        assert_eq!(obj["mb_per_s"], 2.048);
        assert_eq!(obj["op"], "read");
        assert_eq!(obj["latency_us"]["min"], 2.0);
        // Round trip, and refusal of extra or missing keys.
        assert_eq!(RunResult::from_json(&r.to_json()).unwrap(), r);
        let mut extra = v.clone();
        extra["bogus"] = 1.into();
        assert!(RunResult::from_json(&extra.to_string()).is_err());
        let mut missing = v.clone();
        missing.as_object_mut().unwrap().remove("ops");
        assert!(RunResult::from_json(&missing.to_string()).is_err());
        // The optional `cpu` record round-trips and shows in the summary.
        let mut with_cpu = r.clone();
        with_cpu.cpu = Some(crate::cpu::CpuUse {
            wall_s: 2.0,
            client_s: 1.0,
            client_us_per_op: 1000.0,
            target_s: None,
            target_us_per_op: None,
        });
        let text = with_cpu.to_json();
        assert!(text.contains("\"client_us_per_op\""), "{text}");
        assert_eq!(RunResult::from_json(&text).unwrap(), with_cpu);
        assert!(with_cpu.summary(&[0]).contains("cpu: client=1000.00us/op"));
    }

    #[test]
    fn rates_and_ratios() {
        assert_eq!(rates(1000, 4096, 0.5), (2000.0, 8.192));
        assert_eq!(rates(10, 0, 0.0), (0.0, 0.0));
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
    }

    #[test]
    fn compare_shows_ratios_against_the_first() {
        // Below 2048 ns the histogram holds values exactly.
        let a = RunResult::new("raw", "shm", 0, 64, 1, 1, 1.0, 1000, 0, &hist_of(&[1000; 10]));
        let b = RunResult::new("null", "shm", 2, 0, 1, 1, 1.0, 500, 0, &hist_of(&[1500; 10]));
        let t = compare_table(&[("raw.json".into(), a), ("null.json".into(), b)]);
        let line = |key: &str| t.lines().find(|l| l.starts_with(key)).unwrap().to_string();
        assert!(line("key").contains("raw.json") && line("key").contains("null.json"));
        assert!(line("iops ").ends_with("500 (x0.50)"), "{t}");
        assert!(line("lat p50 (us)").ends_with("1.500 (x1.50)"), "{t}");
        assert!(line("op ").ends_with("null"), "{t}");
        // Zero base: no ratio.
        assert!(line("errors").ends_with("0 (-)"), "{t}");
        assert_eq!(compare_table(&[]), "");
    }

    #[test]
    fn rows_table_has_one_line_per_file_and_ratios() {
        let a = RunResult::new("raw", "shm", 0, 64, 1, 1, 1.0, 1000, 0, &hist_of(&[1000; 10]));
        let b = RunResult::new("read", "shm", 1, 4096, 4, 1, 1.0, 250, 2, &hist_of(&[2000; 10]));
        let t = compare_rows(&[("raw".into(), a), ("read-4k".into(), b)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("file") && lines[0].ends_with("iops/1st"));
        assert!(lines[1].starts_with("raw ") && lines[1].ends_with("x1.00"), "{t}");
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&cells[..7], &["read-4k", "read", "shm", "1", "4KiB", "4", "1"]);
        assert_eq!(cells[7], "250");
        assert_eq!(cells[14], "2");
        // No CPU figures in these results.
        assert_eq!(&cells[15..17], &["-", "-"]);
        // p50 2000 ns (highest equivalent 2001) against 1000: about x2; IOPS x0.25.
        assert_eq!(&cells[18..], &["x2.00", "x0.25"]);
        assert_eq!(compare_rows(&[]), "");
    }

    #[test]
    fn summary_mentions_every_figure() {
        let r = RunResult::new("write", "shm", 1, 65536, 16, 2, 1.0, 100, 0, &hist_of(&[5000]));
        let s = r.summary(&[0, 1]);
        for want in [
            "write:",
            "rpcrdma=v1",
            "size=64KiB",
            "qd=16",
            "conns=2",
            "cores=0,1",
            "iops=100.0",
            "p99.99=5.00",
        ] {
            assert!(s.contains(want), "{want} missing in {s}");
        }
    }
}
