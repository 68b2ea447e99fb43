//! Helpers shared by the reactor's integration tests.

use std::time::{Duration, Instant};

/// Polls `cond` every millisecond until it holds; panics naming `what`
/// after 10 s.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
