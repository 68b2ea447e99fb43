//! Criterion benches for the ring and the pool fast paths.
//!
//! Per-item cost = reported time / items per iteration (criterion's
//! `Throughput::Elements` prints it as elements/s as well).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use mempool::pool::{BufRef, Mempool, PoolPlan};
use mempool::region::RegionConfig;
use mempool::ring::{spsc, Ring};

const BURST: usize = 32;

fn ring_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring");
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

fn pool_benches(c: &mut Criterion) {
    let mut plan = PoolPlan::new(1);
    let class = plan.add_class("4k", 4096, 256).unwrap();
    plan.reserve("bench", class, 4096);
    let pool = Mempool::new(&plan, &RegionConfig::default()).unwrap();
    if let Some(w) = pool.warning() {
        eprintln!("{w}");
    }
    let mut cache = pool.cache(class, 0).unwrap();
    let mut bufs = [BufRef {
        region: 0,
        class: 0,
        index: 0,
    }; BURST];

    let mut g = c.benchmark_group("pool");
    g.throughput(Throughput::Elements(BURST as u64));
    g.bench_function(BenchmarkId::new("cache_get_put_bulk", BURST), |b| {
        b.iter(|| {
            let n = cache.get_bulk(black_box(&mut bufs));
            // SAFETY: we hold the `n` buffers just handed out.
            unsafe { cache.put_bulk(black_box(&bufs[..n])).unwrap() };
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

criterion_group!(benches, ring_benches, pool_benches);
criterion_main!(benches);
