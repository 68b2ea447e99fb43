//! Criterion benches for the ring and the pool fast paths.
//!
//! Per-item cost = reported time / items per iteration (criterion's
//! `Throughput::Elements` prints it as elements/s as well).
//!
//! Every bench runs twice: `wall/...` measures wall-clock time (criterion's
//! default), `cpu/...` measures this thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the thread spent
//! descheduled. On a shared, oversubscribed machine the `cpu/` numbers are
//! the meaningful ones; on a quiet, pinned core the two agree.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use mempool::pool::{BufRef, Mempool, PoolPlan};
use mempool::region::RegionConfig;
use mempool::ring::{spsc, Ring};

const BURST: usize = 32;

/// Criterion measurement: CPU time of the calling thread, in nanoseconds.
struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always available
    // on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Values are nanoseconds, exactly like wall time: reuse its units.
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn ring_benches<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    let mut g = c.benchmark_group(format!("{prefix}/ring"));
    g.throughput(Throughput::Elements(BURST as u64));

    let ring = Ring::<u64>::new(1024).unwrap();
    let items: [u64; BURST] = core::array::from_fn(|i| i as u64);
    let mut out = [0u64; BURST];
    g.bench_function(BenchmarkId::new("mpmc_enq_deq_burst", BURST), |b| {
        b.iter(|| {
            let n = ring.enqueue_burst(black_box(&items));
            let m = ring.dequeue_burst(black_box(&mut out));
            debug_assert_eq!(n, m);
            black_box(m)
        })
    });

    let (mut p, mut cns) = spsc::<u64>(1024).unwrap();
    g.bench_function(BenchmarkId::new("spsc_enq_deq_burst", BURST), |b| {
        b.iter(|| {
            let n = p.enqueue_burst(black_box(&items));
            let m = cns.dequeue_burst(black_box(&mut out));
            debug_assert_eq!(n, m);
            black_box(m)
        })
    });

    g.throughput(Throughput::Elements(1));
    g.bench_function("mpmc_enq_deq_single", |b| {
        b.iter(|| {
            ring.enqueue(black_box(7u64)).unwrap();
            black_box(ring.dequeue())
        })
    });
    g.finish();
}

fn pool_benches<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    let mut plan = PoolPlan::new(1);
    let class = plan.add_class("4k", 4096, 256).unwrap();
    plan.reserve("bench", class, 4096);
    // No cache: every get and put goes to the shared ring (the slow path's
    // cost, paid by a cache on refill and flush).
    let direct = plan.add_class("direct", 4096, 0).unwrap();
    plan.reserve("bench", direct, 256);
    let pool = Mempool::new(&plan, &RegionConfig::default()).unwrap();
    if let Some(w) = pool.warning() {
        eprintln!("{w}");
    }
    let mut cache = pool.cache(class, 0).unwrap();
    let mut nocache = pool.cache(direct, 0).unwrap();
    let mut bufs = [BufRef {
        region: 0,
        class: 0,
        index: 0,
    }; BURST];

    let mut g = c.benchmark_group(format!("{prefix}/pool"));
    g.throughput(Throughput::Elements(BURST as u64));
    g.bench_function(BenchmarkId::new("cache_get_put_bulk", BURST), |b| {
        b.iter(|| {
            let n = cache.get_bulk(black_box(&mut bufs));
            // SAFETY: we hold the `n` buffers just handed out.
            unsafe { cache.put_bulk(black_box(&bufs[..n])).unwrap() };
            n
        })
    });
    g.bench_function(BenchmarkId::new("ring_only_get_put_bulk", BURST), |b| {
        b.iter(|| {
            let n = nocache.get_bulk(black_box(&mut bufs));
            // SAFETY: we hold the `n` buffers just handed out.
            unsafe { nocache.put_bulk(black_box(&bufs[..n])).unwrap() };
            n
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("cache_get_put_single", |b| {
        b.iter(|| {
            let buf = cache.get().unwrap();
            cache.put(black_box(buf)).unwrap();
        })
    });
    g.finish();
}

fn wall(c: &mut Criterion) {
    ring_benches(c, "wall");
    pool_benches(c, "wall");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    ring_benches(c, "cpu");
    pool_benches(c, "cpu");
}

criterion_group!(wall_benches, wall);
criterion_group! {
    name = cpu_benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}
criterion_main!(wall_benches, cpu_benches);
