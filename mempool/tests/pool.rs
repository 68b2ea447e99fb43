//! Pool behaviour: accounting under concurrency, exhaustion, high-water
//! marks, registration and translation, owned buffers, debug canaries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use mempool::pool::{BufRef, ClassId, Keys, Mempool, PoolPlan, GUARD_BYTES};
use mempool::region::{RegionBacking, RegionConfig};
use mempool::{BufError, MempoolError};

const NO_BUF: BufRef = BufRef {
    region: 0,
    class: 0,
    index: 0,
};

fn pool(cores: usize, buf_size: usize, cache: u32, reserve: u64) -> (Mempool, ClassId) {
    let mut plan = PoolPlan::new(cores);
    let c = plan.add_class("test", buf_size, cache).unwrap();
    plan.reserve("tester", c, reserve);
    (Mempool::new(&plan, &RegionConfig::default()).unwrap(), c)
}

#[test]
fn fallback_pool_works_and_warns_once() {
    let mut plan = PoolPlan::new(2);
    let small = plan.add_class("inline", 1024, 8).unwrap();
    let big = plan.add_class("64k", 64 << 10, 2).unwrap();
    plan.reserve("receive", small, 64).reserve("ddp", big, 8);
    let p = Mempool::new(&plan, &RegionConfig::default()).unwrap();
    assert_eq!(p.regions().len(), 2);
    let fell_back = p
        .regions()
        .iter()
        .any(|r| matches!(r.backing(), RegionBacking::NormalPages { .. }));
    assert_eq!(fell_back, !p.all_hugepages());
    if fell_back {
        let w = p.warning().expect("fallback must produce a warning");
        // One message, not one per region.
        assert_eq!(w.matches("mempool:").count(), 1, "{w}");
        assert_eq!(w.matches("vm.nr_hugepages").count(), 1, "{w}");
        assert!(w.contains("2 of 2 regions"), "{w}");
    }
    // The pool works on whatever backing it got.
    let mut cache = p.cache(small, 0).unwrap();
    let mut b = cache.get().unwrap();
    b.as_mut_slice().fill(0xAB);
    assert!(b.as_slice().iter().all(|&x| x == 0xAB));
    assert_eq!(b.len(), 1024);
    cache.put(b).unwrap();
}

#[test]
fn buffers_are_disjoint_and_inside_their_region() {
    let (p, c) = pool(1, 1000, 0, 50);
    let info = p.class_info(c).unwrap();
    assert_eq!(info.count, 50);
    assert!(info.stride >= 1000 + GUARD_BYTES);
    let reg = p
        .register_all(|r| {
            Ok::<_, ()>(Keys {
                lkey: 100 + u32::from(r.id()),
                rkey: 200,
            })
        })
        .unwrap();
    let region = p.region(info.region).unwrap();
    let base = region.as_ptr() as u64;
    let mut prev_end = base;
    for index in 0..info.count {
        let b = BufRef {
            region: info.region,
            class: c.get(),
            index,
        };
        let s = p.segment(&reg, b).unwrap();
        assert_eq!(s.addr, base + s.offset);
        assert_eq!(s.offset as usize, p.offset(b).unwrap());
        assert_eq!(s.len, 1000);
        assert_eq!(s.keys, Keys { lkey: 100, rkey: 200 });
        assert_eq!(s.addr % 64, 0, "buffers are cache-line aligned");
        assert!(s.addr >= prev_end, "buffer {index} overlaps its predecessor");
        prev_end = s.addr + u64::from(s.len) + GUARD_BYTES as u64;
        assert!(prev_end <= base + region.len() as u64);
    }
    // Foreign handles translate to nothing.
    let bad = BufRef {
        region: info.region,
        class: c.get(),
        index: info.count,
    };
    assert_eq!(p.segment(&reg, bad), None);
    assert_eq!(p.offset(BufRef { class: 9, ..bad }), None);
    assert_eq!(
        p.buf_ptr(BufRef {
            region: 5,
            index: 0,
            ..bad
        }),
        None
    );
}

#[test]
fn registration_errors_propagate_and_keys_are_indexed() {
    let mut plan = PoolPlan::new(1);
    for name in ["a", "b", "c"] {
        let c = plan.add_class(name, 64, 0).unwrap();
        plan.reserve("x", c, 1);
    }
    let p = Mempool::new(&plan, &RegionConfig::default()).unwrap();
    let mut calls = 0;
    let err = p.register_all(|r| {
        calls += 1;
        if r.id() == 1 {
            Err("device refused")
        } else {
            Ok(Keys::default())
        }
    });
    assert_eq!(err, Err("device refused"));
    assert_eq!(calls, 2);
    let reg = p
        .register_all(|r| {
            Ok::<_, ()>(Keys {
                lkey: u32::from(r.id()) * 7,
                rkey: !0,
            })
        })
        .unwrap();
    assert_eq!(reg.len(), 3);
    assert_eq!(reg.keys(2), Some(Keys { lkey: 14, rkey: !0 }));
    assert_eq!(reg.keys(3), None);
}

#[test]
fn exhaustion_is_a_short_count_not_a_panic() {
    let (p, c) = pool(1, 64, 4, 12); // 12 + 1 * 4 = 16 buffers
    assert_eq!(p.class_info(c).unwrap().count, 16);
    let mut cache = p.cache(c, 0).unwrap();
    let mut out = [NO_BUF; 40];
    assert_eq!(cache.get_bulk(&mut out), 16);
    assert_eq!(cache.stats().exhausted, 1);
    assert!(cache.get().is_none());
    assert_eq!(cache.get_bulk(&mut out[16..20]), 0);
    assert_eq!(cache.stats().exhausted, 3);
    let st = p.stats(c).unwrap();
    assert_eq!(st.exhausted, 3);
    assert_eq!(st.in_use, 16);
    assert_eq!(st.free_in_ring, 0);
    // Empty request is not exhaustion.
    assert_eq!(cache.get_bulk(&mut []), 0);
    assert_eq!(cache.stats().exhausted, 3);
    // SAFETY: we hold all 16 and list each once.
    unsafe { cache.put_bulk(&out[..16]).unwrap() };
    assert_eq!(cache.get_bulk(&mut out[..16]), 16);
}

#[test]
fn every_cache_size_cycles_the_whole_pool() {
    // 0 = no cache (ring only, batched puts), 1 and 2 = degenerate flushes,
    // 64 = larger than the whole class.
    for cache_size in [0u32, 1, 2, 7, 64] {
        let (p, c) = pool(1, 64, cache_size, 70);
        let total = p.class_info(c).unwrap().count as usize;
        let mut cache = p.cache(c, 0).unwrap();
        for round in 0..3 {
            let mut all = vec![NO_BUF; total + 5];
            assert_eq!(cache.get_bulk(&mut all), total, "cache {cache_size} round {round}");
            let mut idx: Vec<u32> = all[..total].iter().map(|b| b.index).collect();
            idx.sort_unstable();
            idx.dedup();
            assert_eq!(idx.len(), total, "cache {cache_size}: duplicate handed out");
            // Return in two uneven bulks to cross flush boundaries.
            // SAFETY: we hold all of them, each listed once.
            unsafe {
                cache.put_bulk(&all[..total / 3]).unwrap();
                cache.put_bulk(&all[total / 3..total]).unwrap();
            }
            let st = p.stats(c).unwrap();
            assert_eq!(st.in_use, 0);
            assert_eq!(st.cached + st.free_in_ring, total as u64);
            assert!(st.cached <= u64::from(cache_size));
        }
    }
}

#[test]
fn high_water_marks_follow_the_peak() {
    // No cache: "taken from the ring" equals "in use".
    let (p, c) = pool(1, 64, 0, 32);
    let mut cache = p.cache(c, 0).unwrap();
    let mut out = [NO_BUF; 32];
    assert_eq!(cache.get_bulk(&mut out[..10]), 10);
    // SAFETY: we hold out[..10] and list each once.
    unsafe { cache.put_bulk(&out[5..10]).unwrap() };
    assert_eq!(cache.get_bulk(&mut out[5..8]), 3);
    let s = cache.stats();
    assert_eq!((s.in_use, s.high_water), (8, 10));
    let st = p.stats(c).unwrap();
    assert_eq!((st.in_use, st.taken_high_water, st.cached), (8, 10, 0));
    assert_eq!(st.free_in_ring, 24);

    // With a cache the pool's mark also counts parked buffers, bounded by
    // the cache size.
    let (p, c) = pool(1, 64, 8, 32);
    let mut cache = p.cache(c, 0).unwrap();
    assert_eq!(cache.get_bulk(&mut out[..10]), 10);
    let st = p.stats(c).unwrap();
    assert!(st.taken_high_water >= 10 && st.taken_high_water <= 10 + 8, "{st:?}");
    assert_eq!(st.in_use + st.cached + st.free_in_ring, u64::from(st.total));
    assert_eq!(cache.stats().high_water, 10);
}

#[test]
fn cache_slots_are_exclusive_and_counters_survive_reclaim() {
    let (p, c) = pool(2, 64, 4, 16);
    let mut a = p.cache(c, 0).unwrap();
    assert!(matches!(
        p.cache(c, 0),
        Err(MempoolError::CacheSlot {
            reason: "already claimed",
            ..
        })
    ));
    assert!(matches!(
        p.cache(c, 2),
        Err(MempoolError::CacheSlot {
            reason: "out of range",
            ..
        })
    ));
    assert!(matches!(
        p.cache(ClassId::new(5), 0),
        Err(MempoolError::UnknownClass(_))
    ));
    let mut out = [NO_BUF; 3];
    assert_eq!(a.get_bulk(&mut out), 3);
    drop(a); // flushes parked buffers, keeps the 3 in use
    let st = p.stats(c).unwrap();
    assert_eq!((st.in_use, st.cached), (3, 0));
    assert_eq!(st.free_in_ring, u64::from(st.total) - 3);
    let a = p.cache(c, 0).unwrap();
    assert_eq!(a.stats().gets, 3);
    // Freed on another core: that core's cache goes negative, totals agree.
    let mut b = p.cache(c, 1).unwrap();
    // SAFETY: we hold the 3 buffers.
    unsafe { b.put_bulk(&out).unwrap() };
    assert_eq!(b.stats().in_use, -3);
    assert_eq!(p.stats(c).unwrap().in_use, 0);
    assert_eq!(a.stats().in_use, 3);
}

#[test]
fn foreign_handles_are_rejected_and_the_rest_freed() {
    // Declared first so its buffers outlive the caches of `p` below.
    let (other, oc) = pool(1, 64, 0, 1);
    let mut plan = PoolPlan::new(1);
    let x = plan.add_class("x", 64, 4).unwrap();
    let y = plan.add_class("y", 128, 4).unwrap();
    plan.reserve("t", x, 8).reserve("t", y, 8);
    let p = Mempool::new(&plan, &RegionConfig::default()).unwrap();
    let mut cx = p.cache(x, 0).unwrap();
    let mut cy = p.cache(y, 0).unwrap();
    let mut bx = [NO_BUF; 2];
    let mut by = [NO_BUF; 1];
    assert_eq!(cx.get_bulk(&mut bx), 2);
    assert_eq!(cy.get_bulk(&mut by), 1);
    let out_of_range = BufRef { index: 1_000, ..bx[0] };
    // SAFETY: we hold bx and by; the foreign ones are rejected before use.
    let r = unsafe { cx.put_bulk(&[bx[0], by[0], out_of_range, bx[1]]) };
    assert_eq!(r, Err(BufError::Foreign(by[0])));
    assert_eq!(cx.stats().in_use, 0);
    // A Buf of another pool is refused by `put`.
    let mut ocache = other.cache(oc, 0).unwrap();
    let foreign = ocache.get().unwrap();
    let fref = foreign.buf_ref();
    assert_eq!(cx.put(foreign), Err(BufError::Foreign(fref)));
    // The per-core set dispatches by class.
    drop((cx, cy));
    let mut all = p.core_caches(0).unwrap();
    // SAFETY: we still hold by[0].
    unsafe { all.put_bulk(&by).unwrap() };
    assert_eq!(p.stats(y).unwrap().in_use, 0);
}

#[test]
fn owned_buf_round_trips_through_raw_handles() {
    let (p, c) = pool(1, 256, 2, 4);
    let mut cache = p.cache(c, 0).unwrap();
    let mut b = cache.get().unwrap();
    b.as_mut_slice()[..5].copy_from_slice(b"hello");
    let raw = b.into_raw();
    // SAFETY: we hold `raw` and nothing else refers to its bytes.
    let back = unsafe { mempool::pool::Buf::from_raw(&p, raw) }.unwrap();
    assert_eq!(&back.as_slice()[..5], b"hello");
    // SAFETY: `back` was consumed into the handle; no other reference.
    assert_eq!(unsafe { p.bytes(back.buf_ref()) }.unwrap().len(), 256);
    cache.put(back).unwrap();
    assert_eq!(p.stats(c).unwrap().in_use, 0);
}

/// Several threads, each with its own cache, take and return buffers at
/// random. A shared "taken" flag per buffer proves no buffer is ever handed
/// out twice; at quiescence in_use + cached + free == total.
#[test]
fn concurrent_random_get_put_keeps_accounting() {
    const CORES: usize = 4;
    let mut plan = PoolPlan::new(CORES);
    let c = plan.add_class("mixed", 128, 8).unwrap();
    plan.reserve("workers", c, 64);
    let p = Mempool::new(&plan, &RegionConfig::default()).unwrap();
    let total = p.class_info(c).unwrap().count as usize;
    let taken: Vec<AtomicBool> = (0..total).map(|_| AtomicBool::new(false)).collect();

    let leftovers: Vec<Vec<BufRef>> = thread::scope(|s| {
        let handles: Vec<_> = (0..CORES)
            .map(|core| {
                let p = &p;
                let taken = &taken;
                s.spawn(move || {
                    let mut cache = p.cache(c, core).unwrap();
                    let mut rng = SmallRng::seed_from_u64(core as u64 + 1);
                    let mut held: Vec<BufRef> = Vec::new();
                    let mut out = [NO_BUF; 16];
                    let mut peak = 0i64;
                    for _ in 0..5_000 {
                        if held.is_empty() || rng.gen_bool(0.5) {
                            let k = rng.gen_range(1..=16);
                            let n = cache.get_bulk(&mut out[..k]);
                            for b in &out[..n] {
                                let was = taken[b.index as usize].swap(true, Ordering::AcqRel);
                                assert!(!was, "buffer {} handed out twice", b.index);
                                // Scribble the whole buffer: overlapping
                                // buffers would trip the debug guards.
                                // SAFETY: we hold `b` exclusively.
                                unsafe { p.bytes_mut(*b).unwrap().fill(core as u8) };
                            }
                            held.extend_from_slice(&out[..n]);
                        } else {
                            let k = rng.gen_range(1..=held.len().min(16));
                            let at = held.len() - k;
                            for b in &held[at..] {
                                // SAFETY: we hold `b` exclusively.
                                let bytes = unsafe { p.bytes(*b).unwrap() };
                                assert!(bytes.iter().all(|&x| x == core as u8));
                                taken[b.index as usize].store(false, Ordering::Release);
                            }
                            // SAFETY: we hold these, each listed once.
                            unsafe { cache.put_bulk(&held[at..]).unwrap() };
                            held.truncate(at);
                        }
                        peak = peak.max(held.len() as i64);
                        let st = cache.stats();
                        assert_eq!(st.in_use, held.len() as i64);
                        assert!(st.cached as usize <= p.class_info(c).unwrap().cache_size as usize);
                    }
                    assert_eq!(cache.stats().high_water, peak);
                    held
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    // Quiescent, caches dropped (flushed): in use + free == total.
    let held: usize = leftovers.iter().map(Vec::len).sum();
    let st = p.stats(c).unwrap();
    assert_eq!(st.cached, 0);
    assert_eq!(st.in_use as usize, held);
    assert_eq!(st.in_use as usize + st.free_in_ring as usize, total);
    assert!(st.taken_high_water as usize <= total);
    assert!(st.taken_high_water as usize >= leftovers.iter().map(Vec::len).max().unwrap());

    // Return everything through one core; the pool is whole again.
    let mut cache = p.cache(c, 0).unwrap();
    for h in &leftovers {
        // SAFETY: the workers are done; we hold their leftovers.
        unsafe { cache.put_bulk(h).unwrap() };
    }
    let st = p.stats(c).unwrap();
    assert_eq!(st.in_use, 0);
    assert_eq!(st.cached + st.free_in_ring, total as u64);
    let mut all = vec![NO_BUF; total + 1];
    assert_eq!(cache.get_bulk(&mut all), total);
    let mut idx: Vec<u32> = all[..total].iter().map(|b| b.index).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(idx.len(), total);
}

#[cfg(debug_assertions)]
mod canaries {
    use super::*;
    use mempool::pool::GUARD_PATTERN;

    #[test]
    fn double_free_is_caught() {
        let (p, c) = pool(1, 64, 4, 8);
        let mut cache = p.cache(c, 0).unwrap();
        let mut out = [NO_BUF; 2];
        assert_eq!(cache.get_bulk(&mut out), 2);
        // SAFETY: deliberately violating the contract is the point of this
        // test; the debug bitmap must catch it before anything is corrupted.
        unsafe {
            cache.put_bulk(&out[..1]).unwrap();
            assert_eq!(cache.put_bulk(&out[..1]), Err(BufError::DoubleFree(out[0])));
            // Listing a buffer twice in one call is a double free too.
            assert_eq!(cache.put_bulk(&[out[1], out[1]]), Err(BufError::DoubleFree(out[1])));
        }
        let st = cache.stats();
        assert_eq!((st.gets, st.puts, st.in_use), (2, 2, 0));
        // The pool still holds each buffer exactly once.
        let mut all = [NO_BUF; 13];
        assert_eq!(cache.get_bulk(&mut all), 12);
        let mut idx: Vec<u32> = all[..12].iter().map(|b| b.index).collect();
        idx.sort_unstable();
        idx.dedup();
        assert_eq!(idx.len(), 12);
    }

    #[test]
    fn overrun_is_caught_and_guard_restored() {
        let (p, c) = pool(1, 100, 0, 4);
        let mut cache = p.cache(c, 0).unwrap();
        let b = cache.get().unwrap().into_raw();
        let (ptr, len) = p.buf_ptr(b).unwrap();
        assert_eq!(len, 100);
        // SAFETY: simulating a buggy writer one byte past the end; the byte
        // is a guard byte inside our mapping.
        unsafe { ptr.as_ptr().add(len).write(0) };
        // SAFETY: we hold `b`.
        assert_eq!(unsafe { cache.put_bulk(&[b]) }, Err(BufError::Overrun(b)));
        // Freed anyway, guard repaired: a clean cycle passes.
        assert_eq!(p.stats(c).unwrap().in_use, 0);
        // SAFETY: reading the guard byte of a free buffer nobody holds.
        assert_eq!(unsafe { ptr.as_ptr().add(len).read() }, GUARD_PATTERN);
        let mut all = [NO_BUF; 4];
        assert_eq!(cache.get_bulk(&mut all), 4);
        assert!(all.contains(&b));
        // SAFETY: we hold all four.
        unsafe { cache.put_bulk(&all).unwrap() };
        // Writing the last usable byte is fine.
        let mut last = cache.get().unwrap();
        last.as_mut_slice()[99] = 1;
        cache.put(last).unwrap();
    }
}
