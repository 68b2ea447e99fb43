//! Accounting counters (credits, receives posted, work requests and
//! Read slots outstanding, requests per connection): one less, never below
//! zero. A counter that would go below zero is an accounting bug: a debug
//! build (every test) fails at once, naming the counter, instead of
//! absorbing it as `saturating_sub` would; a release build keeps the
//! counter at zero.

/// One less of accounting counter `n` (`what` names it in the failure).
#[inline(always)]
#[track_caller]
pub(crate) fn dec(n: &mut u32, what: &'static str) {
    debug_assert!(*n > 0, "accounting: {what} would go below zero");
    *n = n.checked_sub(1).unwrap_or(0);
}

#[cfg(test)]
mod tests {
    use super::dec;

    #[test]
    fn dec_counts_down_to_zero() {
        let mut n = 2;
        dec(&mut n, "n");
        dec(&mut n, "n");
        assert_eq!(n, 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "accounting: n would go below zero")]
    fn dec_below_zero_fails_a_debug_build() {
        let mut n = 0;
        dec(&mut n, "n");
    }
}
