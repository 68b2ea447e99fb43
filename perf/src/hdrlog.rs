//! HdrHistogram interval logs (`--hdr-log FILE`): one histogram per second of
//! the measured time, V2-deflate encoded, as the Java `HistogramLogWriter`
//! writes them (readable by `HistogramLogProcessor` and HdrHistogram log
//! analyzers). Values are **nanoseconds**; the `Interval_Max` column is divided
//! by 1000 (microseconds, `#[MaxValueDivisor: 1000.000]`). Timestamps are
//! seconds since `BaseTime`, the start of the measured time. Main thread, after
//! a run.

use std::io::Write;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;

use crate::stats::LatencyHist;
use crate::PerfError;

/// One interval of a run.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Start, relative to the start of the measured time.
    pub start: Duration,
    pub length: Duration,
    pub hist: LatencyHist,
}

/// Write `intervals` as an interval log; `base` is the wall-clock time the
/// measured time started; `comment` a first comment line (the command).
pub fn write_log<W: Write>(
    out: &mut W,
    base: SystemTime,
    comment: &str,
    intervals: &[Interval],
) -> Result<(), PerfError> {
    let mut ser = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment(comment)
        .add_comment("values in nanoseconds; Interval_Max in microseconds")
        .with_start_time(base)
        .with_base_time(base)
        .with_max_value_divisor(1000.0);
    let io = |e: std::io::Error| PerfError::io("writing the interval log", e);
    let mut w = builder.begin_log_with(out, &mut ser).map_err(io)?;
    w.write_comment("\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"")
        .map_err(io)?;
    for iv in intervals {
        w.write_histogram(&iv.hist, iv.start, iv.length, None)
            .map_err(|e| PerfError::Other(format!("writing the interval log: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{new_hist, record};
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn intervals_round_trip() {
        let mut ivs = Vec::new();
        for k in 0..3u64 {
            let mut h = new_hist();
            for i in 0..(100 * (k + 1)) {
                record(&mut h, 1000 + i);
            }
            ivs.push(Interval {
                start: Duration::from_secs(k),
                length: Duration::from_secs(1),
                hist: h,
            });
        }
        let mut buf = Vec::new();
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        write_log(&mut buf, base, "perf read", &ivs).unwrap();
        let text = String::from_utf8(buf.clone()).unwrap();
        assert!(text.contains("#perf read"), "{text}");
        assert!(text.contains("#[BaseTime: 1700000000.000"), "{text}");
        assert!(text.contains("#[MaxValueDivisor: 1000.000]"), "{text}");
        let mut seen = Vec::new();
        for e in IntervalLogIterator::new(&buf) {
            if let Ok(LogEntry::Interval(iv)) = e {
                let bytes = base64_decode(iv.encoded_histogram());
                let h: hdrhistogram::Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
                seen.push((iv.start_timestamp(), h.len(), iv.max()));
            }
        }
        assert_eq!(seen.len(), 3);
        for (k, (ts, n, max)) in seen.into_iter().enumerate() {
            assert_eq!(ts, Duration::from_secs(k as u64));
            assert_eq!(n, 100 * (k as u64 + 1));
            // max 1000 + 100(k+1) - 1 ns, in microseconds
            assert!(
                (max - (1000.0 + 100.0 * (k as f64 + 1.0) - 1.0) / 1000.0).abs() < 0.01,
                "{max}"
            );
        }
    }

    /// Standard base64 (the log's histogram encoding), for the test only.
    fn base64_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 {c}"),
        };
        let b: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
        let mut out = Vec::new();
        for ch in b.chunks(4) {
            let mut acc = 0u32;
            for (i, &c) in ch.iter().enumerate() {
                acc |= (val(c) as u32) << (18 - 6 * i);
            }
            let n = ch.len() * 6 / 8;
            for i in 0..n {
                out.push((acc >> (16 - 8 * i)) as u8);
            }
        }
        out
    }
}
