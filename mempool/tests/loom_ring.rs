//! Loom model of the ring: every interleaving (up to loom's preemption
//! bound) of small producer/consumer programs delivers each item exactly
//! once and, per producer, in order.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p rpcrdma-mempool --test loom_ring --release`
//! (only this test file; the rest of the crate's tests use real threads).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use mempool::ring::{spsc, Ring};

/// Explores interleavings with at most `LOOM_MAX_PREEMPTIONS` (default 2)
/// preemptions; the ring's retry and wait loops need a raised branch limit.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = 100_000;
    b.check(f);
}

/// Everything still in the ring, once all other threads are joined.
fn rest(r: &Ring<u32>) -> Vec<u32> {
    let mut got = Vec::new();
    while let Some(v) = r.dequeue() {
        got.push(v);
    }
    got
}

// The threads below make a bounded number of attempts instead of spinning
// until they succeed: loom explores every outcome of every attempt, and
// unbounded retry loops would make that space infinite. The ring's own
// "wait for the predecessor's publication" loops remain and are explored.

#[test]
fn two_producers_one_consumer() {
    model(|| {
        let r = Arc::new(Ring::<u32>::new(2).unwrap());
        let p: Vec<_> = (0..2u32)
            .map(|i| {
                let r = r.clone();
                thread::spawn(move || assert_eq!(r.enqueue(10 + i), Ok(())))
            })
            .collect();
        // Races with the producers: sees nothing, 10, 11, or both.
        let mut got: Vec<u32> = (0..2).filter_map(|_| r.dequeue()).collect();
        for h in p {
            h.join().unwrap();
        }
        got.extend(rest(&r));
        got.sort_unstable();
        assert_eq!(got, vec![10, 11]);
        assert!(r.is_empty());
    });
}

#[test]
fn one_producer_two_consumers_full_ring() {
    model(|| {
        // Capacity 2, three items: the third fits only after a consumer has
        // released a slot (cons.tail Release -> producer Acquire).
        let r = Arc::new(Ring::<u32>::new(2).unwrap());
        let c: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                thread::spawn(move || r.dequeue())
            })
            .collect();
        // Consumers only take, so the ring is empty here: two fit.
        assert_eq!(r.enqueue_burst(&[1, 2, 3]), 2);
        let third_in = r.enqueue(3).is_ok();
        let mut got: Vec<u32> = c.into_iter().filter_map(|h| h.join().unwrap()).collect();
        got.extend(rest(&r));
        if !third_in {
            assert_eq!(r.enqueue(3), Ok(()));
            got.extend(rest(&r));
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2, 3]);
    });
}

#[test]
fn concurrent_bursts_stay_contiguous() {
    model(|| {
        // Two producers each publish a burst of 2 into a ring of 4; the
        // consumer must see each burst's items in order.
        let r = Arc::new(Ring::<u32>::new(4).unwrap());
        let p: Vec<_> = [[1u32, 2], [3, 4]]
            .into_iter()
            .map(|burst| {
                let r = r.clone();
                thread::spawn(move || assert_eq!(r.enqueue_burst(&burst), 2))
            })
            .collect();
        let mut out = [0u32; 4];
        let n = r.dequeue_burst(&mut out);
        let mut got = out[..n].to_vec();
        for h in p {
            h.join().unwrap();
        }
        got.extend(rest(&r));
        assert_eq!(got.len(), 4);
        let pos = |v: u32| got.iter().position(|&x| x == v).unwrap();
        assert!(pos(1) < pos(2) && pos(3) < pos(4), "{got:?}");
    });
}

#[test]
fn spsc_in_order() {
    model(|| {
        let (mut tx, mut rx) = spsc::<u32>(2).unwrap();
        let t = thread::spawn(move || {
            let sent = tx.enqueue_burst(&[1, 2, 3]);
            // A third item fits only if the consumer already took one.
            let third = sent == 2 && tx.enqueue(3).is_ok();
            (sent, third, tx)
        });
        let mut got: Vec<u32> = (0..2).filter_map(|_| rx.dequeue()).collect();
        let (sent, third, mut tx) = t.join().unwrap();
        assert_eq!(sent, 2);
        while let Some(v) = rx.dequeue() {
            got.push(v);
        }
        if !third {
            assert_eq!(tx.enqueue(3), Ok(()));
            got.push(rx.dequeue().unwrap());
        }
        assert_eq!(got, vec![1, 2, 3]);
    });
}
