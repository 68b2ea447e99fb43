//! Spin-then-wait's adaptive spin (issue 24 item 1): a core stops blocking
//! between Calls that come back within `max_spin_us`, and blocks again once
//! they stop. Its own test binary: `tests/wake.rs` measures the CPU of the
//! thread named `reactor-core-0`, which a reactor here would also start.

use std::sync::mpsc;
use std::time::Duration;

use reactor::{Arm, CoreCtx, IdlePolicy, PollStatus, Poller, Reactor, ReactorOptions};

/// Adaptive spin (issue 24 item 1): Calls (here, messages) that come every
/// ~2 ms, longer than `spin_us` but within `max_spin_us`, stop making the
/// core block between them after the first few; once they stop, the core
/// blocks again within its window (no spinning while idle). With a fixed
/// 20 µs spin every one of these gaps is a wait.
#[test]
fn spin_then_wait_adaptive_spin_stops_blocking_between_close_calls() {
    let mut o = ReactorOptions::new(&[0]);
    o.pin_threads = false;
    o.idle = IdlePolicy::SpinThenWait {
        spin_us: 20,
        // Far above the gaps, so that a host too busy to keep them near
        // 2 ms still sees them within the ceiling.
        max_spin_us: 300_000,
        max_wait_ms: 10_000,
        fallback_sleep_us: 100,
    };
    // A poller that never has work and can arm (as an idle engine): a core
    // without pollers never spins.
    struct Nothing;
    impl Poller for Nothing {
        fn poll(&mut self, _ctx: &mut CoreCtx) -> PollStatus {
            PollStatus::Idle
        }
        fn arm(&mut self, _ctx: &mut CoreCtx) -> Arm {
            Arm::Armed
        }
    }
    let r = Reactor::builder(o).poller(0, Nothing).start().unwrap();
    let h = r.handle();
    let (tx, rx) = mpsc::channel::<u32>();
    let round = |i: u32| {
        std::thread::sleep(Duration::from_millis(2));
        let tx = tx.clone();
        h.send(0, move |_ctx: &mut CoreCtx| {
            let _ = tx.send(i);
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).expect("message not run"), i);
    };
    for i in 0..10 {
        round(i);
    }
    // Stats are published once per timer tick (1 ms) while the core runs.
    std::thread::sleep(Duration::from_millis(3));
    let a = h.stats(0).unwrap();
    let rounds = 50u32;
    for i in 0..rounds {
        round(100 + i);
    }
    std::thread::sleep(Duration::from_millis(3));
    let b = h.stats(0).unwrap();
    let sleeps = b.sleeps - a.sleeps;
    let caught = b.spin_caught - a.spin_caught;
    assert!(
        sleeps <= u64::from(rounds) / 4 && caught >= u64::from(rounds) * 3 / 4,
        "over {rounds} gaps of ~2 ms the core blocked {sleeps} times and spun through {caught} (window {} us)",
        b.spin_window_us
    );
    assert!((2_000..=300_000).contains(&b.spin_window_us), "{b:?}");
    // Idle: after at most one window the core blocks for good.
    std::thread::sleep(Duration::from_millis(500));
    let c = h.stats(0).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let d = h.stats(0).unwrap();
    assert!(
        d.loops - c.loops < 100 && d.sleeps > b.sleeps,
        "idle core still loops: {} loops in 500 ms ({c:?} -> {d:?})",
        d.loops - c.loops
    );
    r.shutdown().unwrap();
}
