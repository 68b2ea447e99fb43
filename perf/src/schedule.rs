//! Open-loop send times and I/O offsets. Owned by one worker thread.
//!
//! Open loop (`--rate N`): call `k` of a connection is *intended* at
//! `start + k / N` seconds whatever happened before it; a call that could not
//! be sent on time (queue full, no credit, a stall) is sent as soon as it can,
//! and its latency is measured from its intended time, so a stall shows up in
//! the latency of every call it delayed (no coordinated omission).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The send schedule of one connection at a fixed rate.
#[derive(Clone, Debug)]
pub struct OpenLoop {
    start_ns: u64,
    period_ns: f64,
    next: u64,
}

impl OpenLoop {
    /// A schedule of `rate` calls per second starting at `start_ns` (the
    /// caller's clock). `rate` must be positive and finite.
    pub fn new(start_ns: u64, rate: f64) -> Self {
        debug_assert!(rate > 0.0 && rate.is_finite());
        OpenLoop {
            start_ns,
            period_ns: 1e9 / rate,
            next: 0,
        }
    }

    /// Intended send time of call `k`.
    pub fn intended(&self, k: u64) -> u64 {
        self.start_ns + (k as f64 * self.period_ns).round() as u64
    }

    /// The intended time of the next call if it is due at `now_ns`.
    pub fn next_due(&self, now_ns: u64) -> Option<u64> {
        let t = self.intended(self.next);
        (t <= now_ns).then_some(t)
    }

    /// The next call was sent.
    pub fn advance(&mut self) {
        self.next += 1;
    }

    /// If the next call is due at `now_ns`, take it and return its intended
    /// time; otherwise `None`. Call again until `None` to catch up.
    pub fn take_due(&mut self, now_ns: u64) -> Option<u64> {
        let t = self.next_due(now_ns)?;
        self.advance();
        Some(t)
    }

    /// Calls due at `now_ns` and not taken yet (the backlog).
    pub fn backlog(&self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        let due = ((now_ns - self.start_ns) as f64 / self.period_ns).floor() as u64 + 1;
        due.saturating_sub(self.next)
    }

    /// Calls taken so far.
    pub fn taken(&self) -> u64 {
        self.next
    }
}

/// Offsets of a connection's I/O: multiples of the I/O size inside the file,
/// random (uniform) or sequential from a per-connection starting block.
#[derive(Debug, Clone)]
pub struct Offsets {
    io_size: u64,
    blocks: u64,
    seq: bool,
    cursor: u64,
    rng: SmallRng,
}

impl Offsets {
    /// `file_size` bytes in blocks of `io_size` (at least one block);
    /// connection `conn` of `conns` starts its sequential walk at
    /// `conn * blocks / conns`. `seed` makes runs repeatable.
    pub fn new(file_size: u64, io_size: u64, seq: bool, conn: u32, conns: u32, seed: u64) -> Self {
        let io_size = io_size.max(1);
        let blocks = (file_size / io_size).max(1);
        let cursor = blocks * conn as u64 / conns.max(1) as u64;
        Offsets {
            io_size,
            blocks,
            seq,
            cursor,
            rng: SmallRng::seed_from_u64(seed ^ (conn as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        }
    }

    /// Blocks in the file.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The next offset.
    pub fn next_offset(&mut self) -> u64 {
        let b = if self.seq {
            let b = self.cursor;
            self.cursor = (self.cursor + 1) % self.blocks;
            b
        } else {
            self.rng.gen_range(0..self.blocks)
        };
        b * self.io_size
    }

    /// `true` with probability `pct` percent (the read share of `mixed`).
    pub fn coin(&mut self, pct: u32) -> bool {
        self.rng.gen_range(0..100) < pct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_loop_times_do_not_drift() {
        let mut s = OpenLoop::new(1_000, 3.0); // period 333,333,333.3 ns
        assert_eq!(s.intended(0), 1_000);
        assert_eq!(s.intended(3), 1_000 + 1_000_000_000);
        // 3,000,000 calls at 3/s take 10^6 s = 10^15 ns.
        assert_eq!(s.intended(3_000_000), 1_000 + 1_000_000_000_000_000);
        assert_eq!(s.take_due(999), None);
        assert_eq!(s.take_due(1_000), Some(1_000));
        assert_eq!(s.take_due(1_000), None);
        assert_eq!(s.backlog(1_000), 0);
    }

    #[test]
    fn open_loop_catches_up_after_a_stall() {
        let mut s = OpenLoop::new(0, 1000.0); // every 1 ms
                                              // A 10 ms stall: calls 0..=10 are due, each with its own intended time.
        let now = 10_000_000;
        assert_eq!(s.backlog(now), 11);
        let mut got = Vec::new();
        while let Some(t) = s.take_due(now) {
            got.push(t);
        }
        assert_eq!(got, (0..=10).map(|k| k * 1_000_000).collect::<Vec<_>>());
        assert_eq!(s.backlog(now), 0);
        assert_eq!(s.taken(), 11);
        // Latency of the first call, measured from its intended time, includes
        // the whole stall: completion at `now` + 5 us.
        assert_eq!(now + 5_000 - got[0], 10_005_000);
    }

    #[test]
    fn offsets_are_aligned_and_in_range() {
        let mut o = Offsets::new(1 << 20, 4096, false, 0, 1, 7);
        assert_eq!(o.blocks(), 256);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let off = o.next_offset();
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= 1 << 20);
            seen.insert(off);
        }
        assert!(seen.len() > 200, "random offsets cover the file: {}", seen.len());
        // Same seed, same sequence.
        let a: Vec<u64> = {
            let mut o = Offsets::new(1 << 20, 4096, false, 1, 2, 9);
            (0..50).map(|_| o.next_offset()).collect()
        };
        let b: Vec<u64> = {
            let mut o = Offsets::new(1 << 20, 4096, false, 1, 2, 9);
            (0..50).map(|_| o.next_offset()).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn sequential_offsets_wrap_and_start_per_connection() {
        let mut o = Offsets::new(4 * 4096, 4096, true, 1, 2, 0);
        let v: Vec<u64> = (0..5).map(|_| o.next_offset()).collect();
        assert_eq!(v, vec![2 * 4096, 3 * 4096, 0, 4096, 2 * 4096]);
        // A file smaller than one I/O still has one block.
        let mut o = Offsets::new(100, 4096, true, 0, 1, 0);
        assert_eq!((o.blocks(), o.next_offset(), o.next_offset()), (1, 0, 0));
    }

    #[test]
    fn coin_share() {
        let mut o = Offsets::new(4096, 4096, false, 0, 1, 3);
        let n = (0..100_000).filter(|_| o.coin(70)).count();
        assert!((68_000..72_000).contains(&n), "{n}");
        assert!((0..1000).all(|_| !o.coin(0)));
        assert!((0..1000).all(|_| o.coin(100)));
    }
}
