//! Behaviour of the running reactor: cross-core messages, shutdown draining,
//! timers, idle policies, statistics and start-up errors. Runs on the
//! 2-CPU CI machine: every reactor uses CPUs 0 and 1.

mod common;
use common::wait_until;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reactor::{CoreCtx, IdlePolicy, PollStatus, Poller, Reactor, ReactorError, ReactorOptions, SendError, TimerError};

fn opts() -> ReactorOptions {
    let mut o = ReactorOptions::new(&[0, 1]);
    o.idle = IdlePolicy::SpinThenSleep {
        idle_loops: 200,
        max_sleep_us: 200,
    };
    o
}

/// Polls `cond` until true or 10 s pass.

#[test]
fn closures_from_many_senders_all_run_in_per_sender_order() {
    let r = Reactor::start(opts()).unwrap();
    /// (sender, sequence number, core that ran it), per destination core.
    type Log = Arc<[Mutex<Vec<(usize, usize, usize)>>; 2]>;
    let log: Log = Arc::new([Mutex::new(Vec::new()), Mutex::new(Vec::new())]);
    const SENDERS: usize = 3;
    const PER_SENDER: usize = 2000;
    let threads: Vec<_> = (0..SENDERS)
        .map(|s| {
            let h = r.handle();
            let log = log.clone();
            std::thread::spawn(move || {
                for seq in 0..PER_SENDER {
                    let dst = seq % 2;
                    loop {
                        let log = log.clone();
                        let res = h.send(dst, move |ctx: &mut CoreCtx| {
                            log[ctx.core()].lock().unwrap().push((s, seq, ctx.core()));
                        });
                        match res {
                            Ok(()) => break,
                            Err(SendError::Full { core }) => {
                                assert_eq!(core, dst);
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("unexpected send error {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = r.shutdown().unwrap();
    let mut total = 0;
    for (core, entries) in log.iter().enumerate() {
        let entries = entries.lock().unwrap();
        total += entries.len();
        for s in 0..SENDERS {
            let seqs: Vec<usize> = entries
                .iter()
                .filter(|e| e.0 == s)
                .map(|e| {
                    assert_eq!(e.2, core, "ran on the wrong core");
                    e.1
                })
                .collect();
            let expected: Vec<usize> = (0..PER_SENDER).filter(|q| q % 2 == core).collect();
            assert_eq!(seqs, expected, "sender {s} to core {core}: lost or reordered");
        }
        assert_eq!(stats[core].messages_handled as usize, entries.len());
    }
    assert_eq!(total, SENDERS * PER_SENDER);
}

#[test]
fn cores_send_to_each_other() {
    let r = Reactor::start(opts()).unwrap();
    let hops = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // A message that bounces between the two cores `left` more times.
    fn bounce(ctx: &mut CoreCtx, left: u32, hops: Arc<AtomicUsize>, done: Arc<AtomicBool>) {
        hops.fetch_add(1, Ordering::SeqCst);
        if left == 0 {
            done.store(true, Ordering::SeqCst);
            return;
        }
        let other = 1 - ctx.core();
        ctx.send(other, move |ctx| {
            assert_eq!(ctx.core(), other);
            bounce(ctx, left - 1, hops, done)
        })
        .unwrap();
    }
    let (h2, d2) = (hops.clone(), done.clone());
    r.handle().send(0, move |ctx| bounce(ctx, 999, h2, d2)).unwrap();
    wait_until("the bounce chain", || done.load(Ordering::SeqCst));
    let stats = r.shutdown().unwrap();
    assert_eq!(hops.load(Ordering::SeqCst), 1000);
    assert_eq!(stats[0].messages_handled, 500);
    assert_eq!(stats[1].messages_handled, 500);
}

#[test]
fn send_errors_full_no_such_core_and_try_send_returns_closure() {
    let mut o = opts();
    o.ring_capacity = 4;
    o.message_batch = 1;
    let r = Reactor::start(o).unwrap();
    let h = r.handle();
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let (s2, r2) = (started.clone(), release.clone());
    h.send(0, move |_| {
        s2.store(true, Ordering::SeqCst);
        while !r2.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
    })
    .unwrap();
    wait_until("the blocking message to start", || started.load(Ordering::SeqCst));
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..4 {
        let ran = ran.clone();
        h.send(0, move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    assert_eq!(h.queued(0), Some(4));
    let ran5 = ran.clone();
    let err = h.send(0, move |_| {
        ran5.fetch_add(100, Ordering::SeqCst);
    });
    assert_eq!(err, Err(SendError::Full { core: 0 }));
    let marker = Arc::new(7u32);
    let m2 = marker.clone();
    let back = h
        .try_send(0, move |_| {
            assert_eq!(*m2, 7);
        })
        .unwrap_err();
    assert_eq!(back.error, SendError::Full { core: 0 });
    assert_eq!(Arc::strong_count(&marker), 2, "closure handed back, not dropped");
    drop(back);
    assert_eq!(Arc::strong_count(&marker), 1);
    assert_eq!(h.send(2, |_| {}), Err(SendError::NoSuchCore { core: 2, cores: 2 }));
    release.store(true, Ordering::SeqCst);
    r.shutdown().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 4, "the rejected closure must not run");
}

/// A poller with `in_flight` units of work; each drain call finishes one
/// and, for the first few, sends a message to the other core that itself
/// sends one back.
struct Flushing {
    in_flight: u32,
    drained_calls: Arc<AtomicU64>,
    left_at_exit: Arc<AtomicU64>,
    echoes: Arc<AtomicU64>,
}

impl Poller for Flushing {
    fn poll(&mut self, _ctx: &mut CoreCtx) -> PollStatus {
        PollStatus::Idle
    }

    fn drain(&mut self, ctx: &mut CoreCtx) -> PollStatus {
        self.drained_calls.fetch_add(1, Ordering::SeqCst);
        if self.in_flight == 0 {
            return PollStatus::Idle;
        }
        self.in_flight -= 1;
        let echoes = self.echoes.clone();
        let me = ctx.core();
        ctx.send(1 - me, move |ctx| {
            ctx.send(me, move |_| {
                echoes.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        })
        .unwrap();
        PollStatus::Busy
    }
}

impl Drop for Flushing {
    fn drop(&mut self) {
        self.left_at_exit.store(u64::from(self.in_flight), Ordering::SeqCst);
    }
}

#[test]
fn shutdown_runs_queued_messages_and_drains_pollers() {
    let drained_calls = Arc::new(AtomicU64::new(0));
    let left = Arc::new(AtomicU64::new(u64::MAX));
    let echoes = Arc::new(AtomicU64::new(0));
    let r = Reactor::builder(opts())
        .poller(
            0,
            Flushing {
                in_flight: 50,
                drained_calls: drained_calls.clone(),
                left_at_exit: left.clone(),
                echoes: echoes.clone(),
            },
        )
        .start()
        .unwrap();
    let h = r.handle();
    // Queue messages to core 1 behind a slow one, plus a chain that keeps
    // sending during the drain.
    let ran = Arc::new(AtomicU64::new(0));
    h.send(1, |_| std::thread::sleep(Duration::from_millis(20))).unwrap();
    for _ in 0..300 {
        let ran = ran.clone();
        h.send(1, move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    fn chain(ctx: &mut CoreCtx, left: u32, count: Arc<AtomicU64>) {
        count.fetch_add(1, Ordering::SeqCst);
        if left > 0 {
            // From a core thread the send goes through even while draining.
            let h = ctx.handle();
            let other = 1 - ctx.core();
            h.send(other, move |ctx| chain(ctx, left - 1, count)).unwrap();
        }
    }
    let chained = Arc::new(AtomicU64::new(0));
    let c2 = chained.clone();
    h.send(1, move |ctx| chain(ctx, 199, c2)).unwrap();
    let stats = r.shutdown().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 300);
    assert_eq!(chained.load(Ordering::SeqCst), 200);
    assert_eq!(left.load(Ordering::SeqCst), 0, "poller drained before drop");
    assert_eq!(echoes.load(Ordering::SeqCst), 50);
    assert!(drained_calls.load(Ordering::SeqCst) >= 51);
    let handled: u64 = stats.iter().map(|s| s.messages_handled).sum();
    assert_eq!(handled, 1 + 300 + 200 + 2 * 50);
    // After shutdown a handle can no longer send.
    assert_eq!(h.send(0, |_| {}), Err(SendError::ShuttingDown));
}

#[test]
fn external_sends_are_refused_once_stopping() {
    let r = Reactor::start(opts()).unwrap();
    let h = r.handle();
    h.request_stop();
    assert!(h.is_stopping());
    assert_eq!(h.send(0, |_| {}), Err(SendError::ShuttingDown));
    // Still the same answer once every core has drained and exited (the
    // race CI once lost: the core stopped before the send looked).
    let stats = r.join().unwrap();
    assert_eq!(stats.len(), 2);
    assert_eq!(h.send(0, |_| {}), Err(SendError::ShuttingDown));
    assert_eq!(h.send(1, |_| {}), Err(SendError::ShuttingDown));
}

#[test]
fn drain_timeout_is_reported() {
    let mut o = opts();
    o.drain_timeout = Duration::from_millis(50);
    struct Stuck;
    impl Poller for Stuck {
        fn poll(&mut self, _: &mut CoreCtx) -> PollStatus {
            PollStatus::Idle
        }
        fn drain(&mut self, _: &mut CoreCtx) -> PollStatus {
            PollStatus::Busy
        }
    }
    let r = Reactor::builder(o).poller(1, Stuck).start().unwrap();
    match r.shutdown() {
        Err(ReactorError::DrainTimeout { core, timeout_ms }) => {
            assert_eq!(core, 1);
            assert_eq!(timeout_ms, 50);
        }
        other => panic!("expected a drain timeout, got {other:?}"),
    }
}

#[test]
fn panic_in_a_message_is_reported_and_the_core_refuses_messages() {
    let r = Reactor::start(opts()).unwrap();
    let h = r.handle();
    h.send(1, |_| panic!("boom in a message")).unwrap();
    wait_until("core 1 to stop", || {
        h.send(1, |_| {}) == Err(SendError::CoreStopped { core: 1 })
    });
    match r.shutdown() {
        Err(ReactorError::CorePanicked { core, cpu, message }) => {
            assert_eq!((core, cpu), (1, 1));
            assert!(message.contains("boom in a message"), "{message}");
        }
        other => panic!("expected a panic report, got {other:?}"),
    }
}

#[test]
fn one_shot_timer_fires_no_earlier_than_its_delay() {
    let r = Reactor::start(opts()).unwrap();
    let fired_after = Arc::new(Mutex::new(None::<Duration>));
    let f2 = fired_after.clone();
    r.handle()
        .send(0, move |ctx| {
            let t0 = Instant::now();
            ctx.schedule_timer(Duration::from_millis(5), move |ctx| {
                assert_eq!(ctx.core(), 0);
                *f2.lock().unwrap() = Some(t0.elapsed());
            })
            .unwrap();
        })
        .unwrap();
    wait_until("the timer", || fired_after.lock().unwrap().is_some());
    let after = fired_after.lock().unwrap().unwrap();
    assert!(after >= Duration::from_millis(5), "fired after {after:?}");
    let stats = r.shutdown().unwrap();
    assert_eq!(stats[0].timers_fired, 1);
    assert_eq!(stats[1].timers_fired, 0);
}

#[test]
fn periodic_timer_repeats_until_cancelled_and_cancel_prevents_firing() {
    let r = Reactor::start(opts()).unwrap();
    let h = r.handle();
    let ticks = Arc::new(AtomicU64::new(0));
    let never = Arc::new(AtomicBool::new(false));
    let id = Arc::new(Mutex::new(None));
    let (t2, n2, id2) = (ticks.clone(), never.clone(), id.clone());
    h.send(1, move |ctx| {
        let pid = ctx
            .schedule_periodic(Duration::from_millis(2), move |_| {
                t2.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        *id2.lock().unwrap() = Some(pid);
        let victim = ctx
            .schedule_timer(Duration::from_millis(3), move |_| {
                n2.store(true, Ordering::SeqCst);
            })
            .unwrap();
        assert!(ctx.cancel_timer(victim));
        assert!(!ctx.cancel_timer(victim));
        assert_eq!(ctx.timers_pending(), 1);
        assert_eq!(
            ctx.schedule_periodic(Duration::ZERO, |_| {}),
            Err(TimerError::ZeroPeriod)
        );
    })
    .unwrap();
    wait_until("three periodic ticks", || ticks.load(Ordering::SeqCst) >= 3);
    let cancelled = Arc::new(AtomicBool::new(false));
    let (c2, id3, t3) = (cancelled.clone(), id.clone(), ticks.clone());
    let at_cancel = Arc::new(AtomicU64::new(0));
    let a2 = at_cancel.clone();
    h.send(1, move |ctx| {
        let pid = id3.lock().unwrap().unwrap();
        assert!(ctx.cancel_timer(pid));
        a2.store(t3.load(Ordering::SeqCst), Ordering::SeqCst);
        assert_eq!(ctx.timers_pending(), 0);
        c2.store(true, Ordering::SeqCst);
    })
    .unwrap();
    wait_until("the cancel", || cancelled.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(ticks.load(Ordering::SeqCst), at_cancel.load(Ordering::SeqCst));
    let stats = r.shutdown().unwrap();
    assert!(!never.load(Ordering::SeqCst), "cancelled timer fired");
    assert_eq!(stats[1].timers_fired, ticks.load(Ordering::SeqCst));
}

#[test]
fn pending_timers_are_dropped_at_shutdown_and_cannot_be_scheduled_while_draining() {
    let ran = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicBool::new(false));
    struct TryScheduleWhileDraining(Arc<AtomicBool>);
    impl Poller for TryScheduleWhileDraining {
        fn poll(&mut self, _: &mut CoreCtx) -> PollStatus {
            PollStatus::Idle
        }
        fn drain(&mut self, ctx: &mut CoreCtx) -> PollStatus {
            assert!(ctx.is_draining());
            if ctx.schedule_timer(Duration::from_millis(1), |_| {}) == Err(TimerError::ShuttingDown) {
                self.0.store(true, Ordering::SeqCst);
            }
            PollStatus::Idle
        }
    }
    let r = Reactor::builder(opts())
        .poller(0, TryScheduleWhileDraining(refused.clone()))
        .start()
        .unwrap();
    let (r2, scheduled) = (ran.clone(), Arc::new(AtomicBool::new(false)));
    let s2 = scheduled.clone();
    r.handle()
        .send(0, move |ctx| {
            ctx.schedule_timer(Duration::from_secs(3600), move |_| {
                r2.store(true, Ordering::SeqCst);
            })
            .unwrap();
            s2.store(true, Ordering::SeqCst);
        })
        .unwrap();
    wait_until("the timer to be scheduled", || scheduled.load(Ordering::SeqCst));
    let stats = r.shutdown().unwrap();
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(stats[0].timers_dropped, 1);
    assert!(refused.load(Ordering::SeqCst));
}

fn idle_run(policy: IdlePolicy) -> reactor::CoreStats {
    let mut o = opts();
    o.idle = policy;
    let r = Reactor::start(o).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let mut stats = r.shutdown().unwrap();
    stats.remove(0)
}

#[test]
fn idle_policy_spin_never_sleeps_or_pauses() {
    let s = idle_run(IdlePolicy::Spin);
    assert_eq!(s.sleeps, 0);
    assert_eq!(s.pauses, 0);
    assert!(s.loops > 1000, "a spinning core loops a lot: {}", s.loops);
    assert!(s.idle_ns > s.busy_ns);
}

/// Busy and idle time add up to the cores' running time although idle
/// iterations are not timed one by one, under each idle policy, with work
/// (messages) coming now and then; work shows as busy time.
#[test]
fn busy_and_idle_time_add_up() {
    for policy in [
        IdlePolicy::Spin,
        IdlePolicy::SpinThenPause {
            idle_loops: 10,
            pause_spins: 16,
        },
        IdlePolicy::SpinThenSleep {
            idle_loops: 100,
            max_sleep_us: 50,
        },
    ] {
        let mut o = opts();
        o.idle = policy;
        let t0 = Instant::now();
        let r = Reactor::start(o).unwrap();
        // The cores run (and account their time) at least from here until
        // shutdown is asked for; thread start and exit may take long on a
        // loaded host, so they bound only the total from above.
        let t_started = Instant::now();
        let h = r.handle();
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..50 {
            let d = done.clone();
            h.send(1, move |_| {
                // Some work: about 20 µs.
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(20) {
                    std::hint::spin_loop();
                }
                d.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
            std::thread::sleep(Duration::from_micros(300));
        }
        wait_until("the messages", || done.load(Ordering::SeqCst) == 50);
        let running_ns = t_started.elapsed().as_nanos() as u64;
        let stats = r.shutdown().unwrap();
        let wall_ns = t0.elapsed().as_nanos() as u64;
        for s in &stats {
            let total = s.busy_ns + s.idle_ns;
            assert!(
                total <= wall_ns,
                "{policy:?} core {}: {total} ns accounted in {wall_ns}",
                s.core
            );
            assert!(
                total >= running_ns / 2,
                "{policy:?} core {}: only {total} ns accounted while it ran for at least {running_ns}",
                s.core
            );
            assert!(s.idle_ns > 0, "{policy:?} core {}", s.core);
        }
        assert!(
            stats[1].busy_ns >= 50 * 20_000,
            "{policy:?}: busy {} ns",
            stats[1].busy_ns
        );
        // Not asserted: idle > busy. An iteration's whole wall time counts
        // as busy when it did work, so a core thread preempted inside its
        // 20 us messages (a nice-19 test beside a nice-0 VM: 77 ms busy
        // against 2.6 ms idle) shows mostly busy time; the bounds above hold
        // whatever the scheduler does.
    }
}

/// A reactor whose cores sleep after 10 idle iterations, up to a second at a
/// time (only a message or a timer tick wakes them sooner).
fn sleepy_reactor() -> Reactor {
    let mut o = opts();
    o.idle = IdlePolicy::SpinThenSleep {
        idle_loops: 10,
        max_sleep_us: 1_000_000,
    };
    Reactor::start(o).unwrap()
}

/// A sleep that a message cuts short is idle time, not part of the busy
/// iteration the message starts: a core that sleeps between rare, tiny
/// messages is almost all idle.
#[test]
fn a_sleep_woken_by_a_message_is_idle_time() {
    let r = sleepy_reactor();
    let h = r.handle();
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..20 {
        wait_until("core 1 to sleep", || h.stats(1).unwrap().sleeps > 0);
        std::thread::sleep(Duration::from_millis(5));
        let d = done.clone();
        h.send(1, move |_| {
            d.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    wait_until("the messages", || done.load(Ordering::SeqCst) == 20);
    let stats = r.shutdown().unwrap();
    let s = &stats[1];
    assert!(
        s.busy_ns * 10 < s.idle_ns,
        "busy {} ns against idle {} ns: sleeps were counted as busy",
        s.busy_ns,
        s.idle_ns
    );
}

#[test]
fn idle_policy_pause_pauses_without_sleeping() {
    let s = idle_run(IdlePolicy::SpinThenPause {
        idle_loops: 10,
        pause_spins: 16,
    });
    assert_eq!(s.sleeps, 0);
    assert!(s.pauses > 0);
    assert_eq!(s.pauses, s.loops.saturating_sub(10).min(s.pauses));
}

#[test]
fn idle_policy_sleep_sleeps_and_messages_wake_the_core() {
    // One-second sleeps: a message must wake the core, not wait them out.
    let r = sleepy_reactor();
    let h = r.handle();
    wait_until("core 0 to sleep", || h.stats(0).unwrap().sleeps > 0);
    std::thread::sleep(Duration::from_millis(5));
    let t0 = Instant::now();
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    h.send(0, move |_| r2.store(true, Ordering::SeqCst)).unwrap();
    wait_until("the message", || ran.load(Ordering::SeqCst));
    let latency = t0.elapsed();
    assert!(
        latency < Duration::from_millis(500),
        "a sleeping core was not woken by a message ({latency:?})"
    );
    let stats = r.shutdown().unwrap();
    assert!(stats[0].sleeps > 0 && stats[1].sleeps > 0);
    assert!(stats[0].loops < 100_000, "a sleeping core should not spin");
}

#[test]
fn a_core_without_pollers_sleeps_until_woken_and_a_polling_core_in_slices() {
    let mut o = opts();
    o.idle = IdlePolicy::SpinThenSleep {
        idle_loops: 10,
        max_sleep_us: 50,
    };
    // Core 1 polls (always idle); core 0 has nothing to poll.
    let r = Reactor::builder(o)
        .poller(1, |_: &mut CoreCtx| PollStatus::Idle)
        .start()
        .unwrap();
    let h = r.handle();
    std::thread::sleep(Duration::from_millis(300));
    let mid = [h.stats(0).unwrap(), h.stats(1).unwrap()];
    // 300 ms in 50 us slices is thousands of sleeps for the polling core;
    // the pollerless core waits in sleeps of up to 100 ms and does not spin
    // before them. Judged per sleep, not by count: on a loaded host the
    // test thread's 300 ms can last many seconds (once 14.8 s: 149 sleeps
    // of ~100 ms each, all as designed).
    assert!(mid[1].sleeps > 50, "polling core: {:?}", mid[1]);
    assert!(mid[0].sleeps >= 1, "pollerless core never slept: {:?}", mid[0]);
    let mean_sleep_ns = mid[0].idle_ns / mid[0].sleeps;
    assert!(
        mean_sleep_ns >= 20_000_000,
        "pollerless core woke in slices ({mean_sleep_ns} ns a sleep): {:?}",
        mid[0]
    );
    assert!(
        mid[0].loops <= 2 * mid[0].sleeps + 10,
        "pollerless core spun: {:?}",
        mid[0]
    );
    // A message still wakes it at once. Without the wake-up a message waits
    // out the rest of a sleep of up to 100 ms (a uniform 0-100 ms); the
    // median of 7 under 10 ms needs 4 of 7 in the first tenth (p < 0.003).
    // The median, not each, so that a stalled test thread does not fail it.
    let mut waits = Vec::new();
    for k in 0..7u64 {
        // Let the core go back to sleep, at a different point of its sleep
        // each time.
        std::thread::sleep(Duration::from_millis(15 + 7 * k));
        let ran = Arc::new(AtomicBool::new(false));
        let r2 = ran.clone();
        let t0 = Instant::now();
        h.send(0, move |_| r2.store(true, Ordering::SeqCst)).unwrap();
        wait_until("the message", || ran.load(Ordering::SeqCst));
        waits.push(t0.elapsed());
    }
    waits.sort();
    assert!(waits[3] < Duration::from_millis(10), "not woken: {waits:?}");
    r.shutdown().unwrap();
}

#[test]
fn stats_are_readable_while_running() {
    let r = Reactor::start(opts()).unwrap();
    let h = r.handle();
    for _ in 0..100 {
        h.send(1, |_| {}).unwrap();
    }
    wait_until("published stats", || h.stats(1).unwrap().messages_handled == 100);
    let s = h.stats(1).unwrap();
    assert_eq!((s.core, s.cpu), (1, 1));
    assert!(s.loops > 0);
    assert_eq!(h.stats(2), None);
    let all = h.all_stats();
    assert_eq!(all.len(), 2);
    let last = r.shutdown().unwrap();
    assert_eq!(last[1].messages_handled, 100);
    assert!(last[1].loops >= s.loops);
    // Final stats are also published.
    assert_eq!(h.stats(1).unwrap(), last[1]);
}

#[test]
fn pollers_added_and_removed_at_run_time_with_core_locals() {
    struct Counter(u64);
    let r = Reactor::builder(opts())
        .on_core_start(|ctx| {
            ctx.insert_local(Counter(0));
        })
        .start()
        .unwrap();
    let h = r.handle();
    let polls = Arc::new(AtomicU64::new(0));
    let p2 = polls.clone();
    let id = Arc::new(Mutex::new(None));
    let id2 = id.clone();
    h.send(0, move |ctx| {
        let pid = ctx.add_poller(Box::new(move |ctx: &mut CoreCtx| {
            ctx.local_mut::<Counter>().unwrap().0 += 1;
            p2.fetch_add(1, Ordering::SeqCst);
            PollStatus::Idle
        }));
        *id2.lock().unwrap() = Some(pid);
    })
    .unwrap();
    wait_until("the poller to run", || polls.load(Ordering::SeqCst) > 10);
    let removed = Arc::new(AtomicBool::new(false));
    let (rm, id3) = (removed.clone(), id.clone());
    let local_count = Arc::new(AtomicU64::new(0));
    let lc = local_count.clone();
    h.send(0, move |ctx| {
        ctx.remove_poller(id3.lock().unwrap().unwrap());
        lc.store(ctx.local::<Counter>().unwrap().0, Ordering::SeqCst);
        rm.store(true, Ordering::SeqCst);
    })
    .unwrap();
    wait_until("the removal", || removed.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(2));
    let after = polls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(polls.load(Ordering::SeqCst), after, "removed poller still polled");
    assert!(local_count.load(Ordering::SeqCst) > 10);
    r.shutdown().unwrap();
}

#[test]
fn start_errors() {
    match Reactor::start(ReactorOptions::new(&[0, 9999])) {
        Err(ReactorError::CpuUnavailable { core, cpu, available }) => {
            assert_eq!((core, cpu), (1, 9999));
            assert!(available.contains(&0));
        }
        other => panic!("expected CpuUnavailable, got {:?}", other.map(|_| ())),
    }
    match Reactor::start(ReactorOptions::new(&[1, 0, 1])) {
        Err(ReactorError::DuplicateCpu { cpu, first, second }) => {
            assert_eq!((cpu, first, second), (1, 0, 2));
        }
        other => panic!("expected DuplicateCpu, got {:?}", other.map(|_| ())),
    }
    let mut o = ReactorOptions::new(&[0]);
    o.ring_capacity = 1000;
    assert!(matches!(Reactor::start(o), Err(ReactorError::InvalidOptions(_))));
    assert!(matches!(
        Reactor::start(ReactorOptions::new(&[])),
        Err(ReactorError::InvalidOptions(_))
    ));
    // A panicking start-up hook fails the start and stops the other cores.
    let r = Reactor::builder(opts())
        .on_core_start(|ctx| {
            if ctx.core() == 1 {
                panic!("hook failed");
            }
        })
        .start();
    match r {
        Err(ReactorError::CorePanicked { core, message, .. }) => {
            assert_eq!(core, 1);
            assert!(message.contains("hook failed"));
        }
        other => panic!("expected CorePanicked, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn threads_are_pinned_to_their_cpus() {
    let r = Reactor::start(opts()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for core in 0..2 {
        let seen = seen.clone();
        r.handle()
            .send(core, move |ctx| {
                // SAFETY: sched_getcpu has no preconditions.
                let cpu = unsafe { libc_sched_getcpu() };
                seen.lock().unwrap().push((ctx.core(), ctx.cpu(), cpu));
            })
            .unwrap();
    }
    r.shutdown().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, vec![(0, 0, 0), (1, 1, 1)]);
}

extern "C" {
    #[link_name = "sched_getcpu"]
    fn libc_sched_getcpu() -> i32;
}
