//! The simulator's pseudo-random number generator: xoshiro256** seeded through
//! SplitMix64, written here so that a seed means the same sequence on every
//! build (no dependency on another crate's algorithm choice or version).
//!
//! Not cryptographic. Any thread may own a [`SimRng`]; it has no shared state.

/// One step of SplitMix64: advances `state` and returns the next output.
/// Used to expand a 64-bit seed into the 256-bit xoshiro state.
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic generator (xoshiro256**). The same seed always gives
/// the same sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimRng {
    s: [u64; 4],
}

impl SimRng {
    /// A generator whose whole sequence is a function of `seed`.
    pub fn new(seed: u64) -> SimRng {
        let mut sm = seed;
        let mut s = [0u64; 4];
        for w in &mut s {
            *w = splitmix64(&mut sm);
        }
        // SplitMix64 never yields four zero words from one seed (it is a
        // bijection of a counter), but xoshiro must never be all-zero: assert.
        debug_assert!(s.iter().any(|&w| w != 0));
        SimRng { s }
    }

    /// A second, independent stream derived from this one (consumes one output).
    pub fn fork(&mut self) -> SimRng {
        SimRng::new(self.next_u64())
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (0 when `n` is 0), without modulo bias (multiply-shift
    /// with rejection of the short low range).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    #[inline]
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// Uniform index into a collection of `len` elements (`len` > 0).
    #[inline]
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `p` (false for `p <= 0` or NaN, true for `p >= 1`).
    /// Draws nothing when `p <= 0`, so a zero probability leaves the sequence
    /// of every other draw unchanged.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits → a uniform double in [0, 1).
        let u = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        u < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_different_seed_different() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        let mut c = SimRng::new(43);
        let va: Vec<u64> = (0..64).map(|_| a.next_u64()).collect();
        let vb: Vec<u64> = (0..64).map(|_| b.next_u64()).collect();
        let vc: Vec<u64> = (0..64).map(|_| c.next_u64()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = SimRng::new(7);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let x = r.below(10);
            assert!(x < 10);
            seen[x as usize] += 1;
        }
        // Each bucket expects 1000; a fair generator lands well inside 800..1200.
        for (i, &n) in seen.iter().enumerate() {
            assert!((800..1200).contains(&n), "bucket {i}: {n}");
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range_inclusive(5, 5), 5);
        assert_eq!(r.range_inclusive(9, 3), 9);
        for _ in 0..1000 {
            let x = r.range_inclusive(3, 9);
            assert!((3..=9).contains(&x));
        }
    }

    #[test]
    fn chance_respects_edges_and_rate() {
        let mut r = SimRng::new(1);
        let before = r.clone();
        assert!(!r.chance(0.0));
        assert!(!r.chance(f64::NAN));
        assert_eq!(r, before, "p = 0 must not draw");
        assert!(r.chance(1.0));
        let hits = (0..20_000).filter(|_| r.chance(0.25)).count();
        assert!((4_500..5_500).contains(&hits), "{hits}");
    }
}
