//! Cross-core message round trip: a poller on core 0 sends a closure to
//! core 1, which sends a closure back to core 0; the next ping leaves when
//! the pong has run. Reports time per round trip. Uses the pure-spin idle
//! policy (both cores busy-poll); on a 2-CPU host the benchmark thread
//! itself blocks on a channel while the cores run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use reactor::{CoreCtx, IdlePolicy, PollStatus, Poller, Reactor, ReactorOptions};

/// Set by the pong closure on core 0.
struct PongArrived(bool);

struct Pinger {
    request: Arc<AtomicU64>,
    done: mpsc::Sender<Duration>,
    remaining: u64,
    start: Instant,
    boxed: bool,
}

fn ping(ctx: &CoreCtx, boxed: bool) {
    if boxed {
        // 64 bytes of captures: too big for the inline payload, so both
        // messages of the round trip are boxed.
        let pad = [1u64; 8];
        ctx.send(1, move |ctx| {
            let pad2 = pad;
            ctx.send(0, move |ctx| {
                std::hint::black_box(pad2);
                ctx.local_mut::<PongArrived>().unwrap().0 = true;
            })
            .unwrap();
        })
        .unwrap();
    } else {
        ctx.send(1, |ctx| {
            ctx.send(0, |ctx| ctx.local_mut::<PongArrived>().unwrap().0 = true)
                .unwrap();
        })
        .unwrap();
    }
}

impl Poller for Pinger {
    fn poll(&mut self, ctx: &mut CoreCtx) -> PollStatus {
        if self.remaining == 0 {
            let n = self.request.swap(0, Ordering::Acquire);
            if n == 0 {
                return PollStatus::Idle;
            }
            self.remaining = n;
            self.start = Instant::now();
            ping(ctx, self.boxed);
            return PollStatus::Busy;
        }
        let arrived = ctx.local_mut::<PongArrived>().unwrap();
        if !arrived.0 {
            return PollStatus::Idle;
        }
        arrived.0 = false;
        self.remaining -= 1;
        if self.remaining == 0 {
            let _ = self.done.send(self.start.elapsed());
        } else {
            ping(ctx, self.boxed);
        }
        PollStatus::Busy
    }
}

fn round_trip(c: &mut Criterion, name: &str, boxed: bool) {
    let mut opts = ReactorOptions::new(&[0, 1]);
    opts.idle = IdlePolicy::Spin;
    let request = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let reactor = Reactor::builder(opts)
        .poller(
            0,
            Pinger {
                request: request.clone(),
                done: tx,
                remaining: 0,
                start: Instant::now(),
                boxed,
            },
        )
        .on_core_start(|ctx| {
            ctx.insert_local(PongArrived(false));
        })
        .start()
        .expect("start reactor on cpus 0 and 1");
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            request.store(iters.max(1), Ordering::Release);
            rx.recv().expect("pinger result")
        })
    });
    let stats = reactor.shutdown().expect("shutdown");
    assert!(stats[1].messages_handled > 0);
}

fn benches(c: &mut Criterion) {
    round_trip(c, "cross_core_round_trip_inline", false);
    round_trip(c, "cross_core_round_trip_boxed", true);
}

criterion_group!(reactor_benches, benches);
criterion_main!(reactor_benches);
