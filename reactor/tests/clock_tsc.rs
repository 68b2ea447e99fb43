//! The core loop on the time-stamp counter clock (`RPCRDMA_CLOCK=tsc`, the
//! choice made on hosts whose OS clock has no vDSO path, see
//! `reactor::clock`): its accounting, timers and `CoreCtx::now` stay true to
//! `Instant`. One test in its own binary, so the process-wide choice is the
//! counter's from the first read.

mod common;
use common::wait_until;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reactor::clock::{self, Source};
use reactor::idle::SPIN_THEN_WAIT;
use reactor::{CoreCtx, IdlePolicy, Reactor, ReactorOptions};

#[test]
fn core_loop_on_the_counter_clock_keeps_time() {
    std::env::set_var("RPCRDMA_CLOCK", "tsc");
    if cfg!(target_arch = "x86_64") {
        assert!(matches!(clock::source(), Source::Tsc { .. }), "{:?}", clock::source());
    }
    // The wall clock on the counter agrees with the OS's, across its
    // re-readings (every 2 ms).
    assert_eq!(clock::source().to_string().split(' ').next(), Some("tsc"));
    for _ in 0..3 {
        let (w, sys) = (clock::wall_now(), std::time::SystemTime::now());
        let skew = w.duration_since(sys).unwrap_or_else(|e| e.duration());
        assert!(skew < Duration::from_millis(3), "wall_now {skew:?} off");
        std::thread::sleep(Duration::from_millis(3));
    }
    for policy in [
        SPIN_THEN_WAIT,
        IdlePolicy::SpinThenSleep {
            idle_loops: 100,
            max_sleep_us: 50,
        },
    ] {
        let mut o = ReactorOptions::new(&[0, 1]);
        o.idle = policy;
        let t_start = Instant::now();
        let t0 = t_start;
        let r = Reactor::start(o).unwrap();
        let h = r.handle();
        // The cores run once each (a pinned core thread of a loaded host may
        // start late; its accounting begins when it runs).
        let started = Arc::new(Mutex::new(Vec::new()));
        for c in 0..2 {
            let started = started.clone();
            h.send(c, move |_| started.lock().unwrap().push(Instant::now()))
                .unwrap();
        }
        wait_until("the cores", || started.lock().unwrap().len() == 2);
        let t0 = t0.max(*started.lock().unwrap().iter().max().unwrap());
        let done = Arc::new(AtomicUsize::new(0));
        // Per message: how far the core's iteration time was from
        // `Instant::now()` on the core (µs), and whether it went back.
        let skew = Arc::new(Mutex::new((0u128, false, None::<Instant>)));
        for _ in 0..40 {
            let (d, skew) = (done.clone(), skew.clone());
            h.send(1, move |ctx: &mut CoreCtx| {
                let (it, real) = (ctx.now(), Instant::now());
                let mut s = skew.lock().unwrap();
                s.0 = s.0.max(real.max(it).duration_since(real.min(it)).as_micros());
                s.1 |= s.2.is_some_and(|p| it < p);
                s.2 = Some(it);
                d.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
            std::thread::sleep(Duration::from_micros(700));
        }
        wait_until("the messages", || done.load(Ordering::SeqCst) == 40);
        // A 20 ms timer fires no earlier than 20 ms of real time (less one
        // 1 ms tick) and not much later.
        let fired = Arc::new(Mutex::new(None::<Duration>));
        let f = fired.clone();
        h.send(0, move |ctx: &mut CoreCtx| {
            let at = Instant::now();
            ctx.schedule_timer(Duration::from_millis(20), move |_| {
                *f.lock().unwrap() = Some(at.elapsed());
            })
            .unwrap();
        })
        .unwrap();
        wait_until("the timer", || fired.lock().unwrap().is_some());
        let stats = r.shutdown().unwrap();
        let wall_start_ns = t_start.elapsed().as_nanos() as u64;
        let wall_ns = t0.elapsed().as_nanos() as u64;
        let after = fired.lock().unwrap().unwrap();
        assert!(
            after >= Duration::from_millis(19) && after < Duration::from_secs(2),
            "{policy:?}: 20 ms timer after {after:?}"
        );
        let (skew_us, back, _) = *skew.lock().unwrap();
        assert!(!back, "{policy:?}: CoreCtx::now went back");
        // The iteration's time is at most one iteration old (a message's
        // closure runs right after it is taken), plus the map's error.
        assert!(skew_us < 2_000, "{policy:?}: CoreCtx::now {skew_us} µs off");
        for s in &stats {
            let total = s.busy_ns + s.idle_ns;
            // Accounted from the counter: at most the wall clock from the
            // start (plus 1 ms), at least half of it from the cores' first
            // run.
            assert!(
                total <= wall_start_ns + 1_000_000,
                "{policy:?} core {}: {total} ns accounted in {wall_start_ns}",
                s.core
            );
            assert!(
                total >= wall_ns / 2,
                "{policy:?} core {}: only {total} ns of {wall_ns} accounted",
                s.core
            );
        }
    }
}
