//! Multi-threaded ring stress: several producers and consumers, every item
//! delivered exactly once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use mempool::ring::{spsc, Ring};

/// Items are `producer << 32 | sequence`, so each consumer can check
/// per-producer FIFO order and the final tally can check exactly-once.
fn run_mpmc(producers: usize, consumers: usize, per_producer: u64, capacity: usize, burst: usize) {
    let ring = Arc::new(Ring::<u64>::new(capacity).unwrap());
    let done_producing = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(AtomicUsize::new(0));

    let prod_handles: Vec<_> = (0..producers)
        .map(|p| {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut next = 0u64;
                let mut batch = Vec::with_capacity(burst);
                while next < per_producer {
                    batch.clear();
                    let end = (next + burst as u64).min(per_producer);
                    batch.extend((next..end).map(|s| ((p as u64) << 32) | s));
                    let n = ring.enqueue_burst(&batch);
                    next += n as u64;
                    if n == 0 {
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();

    let cons_handles: Vec<_> = (0..consumers)
        .map(|_| {
            let ring = ring.clone();
            let done = done_producing.clone();
            let consumed = consumed.clone();
            thread::spawn(move || {
                let mut seen = Vec::new();
                let mut last_seq = vec![None::<u64>; producers];
                let mut out = vec![0u64; burst];
                loop {
                    // Read `done` before trying, so an empty ring after `done`
                    // really means everything was consumed.
                    let finished = done.load(Ordering::Acquire);
                    let n = ring.dequeue_burst(&mut out);
                    for &item in &out[..n] {
                        let p = (item >> 32) as usize;
                        let s = item & 0xffff_ffff;
                        // Within one consumer, items of one producer arrive in
                        // increasing order (the ring is FIFO).
                        if let Some(prev) = last_seq[p] {
                            assert!(s > prev, "producer {p}: {s} after {prev}");
                        }
                        last_seq[p] = Some(s);
                        seen.push(item);
                    }
                    consumed.fetch_add(n, Ordering::Relaxed);
                    if n == 0 {
                        if finished {
                            break;
                        }
                        thread::yield_now();
                    }
                }
                seen
            })
        })
        .collect();

    for h in prod_handles {
        h.join().unwrap();
    }
    done_producing.store(true, Ordering::Release);
    let mut counts = vec![0u8; producers * per_producer as usize];
    for h in cons_handles {
        for item in h.join().unwrap() {
            let p = (item >> 32) as usize;
            let s = (item & 0xffff_ffff) as usize;
            counts[p * per_producer as usize + s] += 1;
        }
    }
    let total = producers * per_producer as usize;
    assert_eq!(consumed.load(Ordering::Relaxed), total);
    if let Some(bad) = counts.iter().position(|&c| c != 1) {
        panic!("item {bad} delivered {} times", counts[bad]);
    }
    assert!(ring.is_empty());
}

#[test]
fn mpmc_4x4_small_ring_bursts() {
    run_mpmc(4, 4, 20_000, 64, 32);
}

#[test]
fn mpmc_3x2_single_items() {
    run_mpmc(3, 2, 10_000, 16, 1);
}

#[test]
fn mpmc_2x3_tiny_ring() {
    // Capacity 2 forces constant full/empty transitions and wrap-around.
    run_mpmc(2, 3, 10_000, 2, 4);
}

#[test]
fn spsc_delivers_in_order() {
    const N: u64 = 200_000;
    let (mut p, mut c) = spsc::<u64>(32).unwrap();
    let prod = thread::spawn(move || {
        let mut next = 0u64;
        let mut batch = [0u64; 8];
        while next < N {
            let k = 8.min((N - next) as usize);
            for (i, b) in batch[..k].iter_mut().enumerate() {
                *b = next + i as u64;
            }
            let n = p.enqueue_burst(&batch[..k]);
            next += n as u64;
            if n == 0 {
                thread::yield_now();
            }
        }
    });
    let mut expect = 0u64;
    let mut out = [0u64; 16];
    while expect < N {
        let n = c.dequeue_burst(&mut out);
        for &v in &out[..n] {
            assert_eq!(v, expect);
            expect += 1;
        }
        if n == 0 {
            thread::yield_now();
        }
    }
    prod.join().unwrap();
    assert_eq!(c.dequeue(), None);
}
