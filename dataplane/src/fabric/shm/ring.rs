//! A single-producer single-consumer ring laid out inside a shared mapping
//! (DPDK `rte_ring` style, cut down to SPSC), for the queues the two processes
//! of an shm connection share.
//!
//! # Layout
//!
//! At a 128-byte aligned offset of a [`SharedFile`]:
//!
//! ```text
//! +0    producer index (u32, free-running)   -- its own 128-byte block
//! +128  consumer index (u32, free-running)   -- its own 128-byte block
//! +256  cap slots of W little u64 words each
//! ```
//!
//! Everything is addressed by offsets from the mapping's base, never by
//! pointers, so each process can map the file anywhere. The two indices sit in
//! separate 128-byte blocks (two cache lines, against the adjacent-line
//! prefetcher) so that the producer's and the consumer's stores do not
//! false-share. Indices are `u32` and free-running: slot = index & mask, used
//! = prod - cons (wrapping); `cap` is a power of two no larger than 2^30, so
//! the wrapping difference is always meaningful.
//!
//! # Trust
//!
//! The other side of the ring is another process, which may be buggy or
//! hostile. So:
//!
//! - each side keeps its own index in local memory (the shadow in
//!   [`Producer`] / [`Consumer`]) and only *stores* it to the shared word; it
//!   never reads its own index back from shared memory;
//! - an index read from the peer is checked (`prod - cons <= cap`) and a
//!   violation is reported as [`RingCorrupt`], never trusted;
//! - slots are arrays of `AtomicU64` read and written with `Relaxed`
//!   operations, so a peer racing on a slot yields odd values (which the
//!   caller validates), never undefined behaviour.
//!
//! # Memory ordering
//!
//! Two pairings, as in `rte_ring`:
//!
//! 1. producer's `Release` store of `prod` (publish) → consumer's `Acquire`
//!    load of `prod`: the consumer sees the slot words written before the
//!    publication (and, for the shm fabric, every byte the producer copied into
//!    the peer's buffers before it).
//! 2. consumer's `Release` store of `cons` (release slots) → producer's
//!    `Acquire` load of `cons`: the producer overwrites a slot only after the
//!    consumer's reads of it happened.
//!
//! A [`Producer`] or [`Consumer`] is used by one thread at a time (methods take
//! `&mut self`); both are `Send`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::mapping::SharedFile;

/// Size of one index block: two cache lines, so that neither the line itself
/// nor its prefetch partner is shared with the other side's index.
pub const INDEX_BLOCK: usize = 128;

/// Largest ring capacity (slots). Keeps `prod - cons` unambiguous with `u32`
/// free-running indices.
pub const MAX_RING_CAP: u32 = 1 << 30;

const _: () = assert!(MAX_RING_CAP.is_power_of_two());
const _: () = assert!(MAX_RING_CAP as u64 <= (u32::MAX as u64) / 2);

/// One free-running index alone in its 128-byte block.
#[repr(C, align(128))]
struct RingIndex {
    value: AtomicU32,
}

/// The two indices at the start of a ring.
#[repr(C)]
struct RingHeader {
    prod: RingIndex,
    cons: RingIndex,
}

const _: () = assert!(std::mem::size_of::<RingIndex>() == INDEX_BLOCK);
const _: () = assert!(std::mem::size_of::<RingHeader>() == 2 * INDEX_BLOCK);
const _: () = assert!(std::mem::align_of::<RingHeader>() == INDEX_BLOCK);

/// The peer moved an index to a value no honest peer could produce
/// (`prod - cons > cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingCorrupt;

/// Bytes a ring of `cap` slots of `words` u64 words occupies (header included),
/// rounded up to [`INDEX_BLOCK`] so rings can follow one another. `None` on
/// overflow or a capacity that is not a power of two in `1..=MAX_RING_CAP`.
pub fn ring_bytes(cap: u32, words: usize) -> Option<usize> {
    if !cap.is_power_of_two() || cap > MAX_RING_CAP {
        return None;
    }
    let slots = (cap as usize).checked_mul(words)?.checked_mul(8)?;
    let total = slots.checked_add(std::mem::size_of::<RingHeader>())?;
    total.checked_add(INDEX_BLOCK - 1).map(|t| t & !(INDEX_BLOCK - 1))
}

/// Where a ring lives and the pointers derived from it; shared by both ends.
struct RingView<const W: usize> {
    /// Keeps the mapping alive as long as the pointers below are used.
    _map: Arc<SharedFile>,
    hdr: NonNull<RingHeader>,
    slots: NonNull<AtomicU64>,
    mask: u32,
}

// SAFETY: the view points into a `MAP_SHARED` mapping kept alive by `_map`;
// the memory is only accessed through atomics, so using it from whichever
// single thread owns the endpoint is sound.
unsafe impl<const W: usize> Send for RingView<W> {}

impl<const W: usize> RingView<W> {
    fn new(map: Arc<SharedFile>, offset: usize, cap: u32) -> Option<Self> {
        let bytes = ring_bytes(cap, W)?;
        let end = offset.checked_add(bytes)?;
        if W == 0 || offset & (INDEX_BLOCK - 1) != 0 || end > map.len() {
            return None;
        }
        let base = map.as_ptr();
        // The mapping is page aligned, so `base + offset` is 128-byte aligned.
        if (base as usize) & (INDEX_BLOCK - 1) != 0 {
            return None;
        }
        // SAFETY: offset + bytes <= map.len(), so both pointers stay inside
        // the live mapping held by `map`.
        let (hdr, slots) = unsafe {
            let h = base.add(offset);
            (
                h.cast::<RingHeader>(),
                h.add(std::mem::size_of::<RingHeader>()).cast::<AtomicU64>(),
            )
        };
        Some(RingView {
            hdr: NonNull::new(hdr)?,
            slots: NonNull::new(slots)?,
            mask: cap - 1,
            _map: map,
        })
    }

    #[inline]
    fn cap(&self) -> u32 {
        self.mask + 1
    }

    #[inline]
    fn header(&self) -> &RingHeader {
        // SAFETY: `hdr` is aligned and inside the mapping (checked in `new`)
        // and the mapping lives as long as `self`. `RingHeader` is made of
        // atomics, valid for any bit pattern, and only accessed atomically.
        unsafe { self.hdr.as_ref() }
    }

    #[inline]
    fn slot(&self, index: u32) -> &[AtomicU64; W] {
        let i = (index & self.mask) as usize;
        // SAFETY: i < cap, and `new` checked that cap * W words follow the
        // header inside the mapping; AtomicU64 is valid for any bit pattern
        // and 8-byte aligned here (header is 256 bytes from a 128-aligned
        // base).
        unsafe { &*self.slots.as_ptr().add(i * W).cast::<[AtomicU64; W]>() }
    }
}

/// Writes the starting value of both indices of a ring (normally 0, which a
/// fresh memfd already holds). Only before either end is attached; tests use it
/// to start near `u32::MAX` and exercise index wrap-around.
pub fn init_indices<const W: usize>(map: &Arc<SharedFile>, offset: usize, cap: u32, start: u32) -> bool {
    let Some(v) = RingView::<W>::new(Arc::clone(map), offset, cap) else {
        return false;
    };
    // Relaxed: no end is attached yet; the file is handed to the peer later
    // through a socket, which orders these stores before the peer's loads.
    v.header().prod.value.store(start, Ordering::Relaxed);
    v.header().cons.value.store(start, Ordering::Relaxed);
    true
}

/// The producing end of a shared ring.
pub struct Producer<const W: usize> {
    view: RingView<W>,
    /// Local shadow of the producer index (authoritative; never read back).
    prod: u32,
    /// Last consumer index read from shared memory.
    cons_cache: u32,
}

impl<const W: usize> std::fmt::Debug for Producer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("cap", &self.view.cap())
            .field("prod", &self.prod)
            .field("cons_cache", &self.cons_cache)
            .finish()
    }
}

impl<const W: usize> Producer<W> {
    /// Attach the producing end of the ring at `offset` in `map`, whose indices
    /// both start at `start`. `None` if the ring does not fit or is misaligned.
    /// Control path; any thread.
    pub fn new(map: Arc<SharedFile>, offset: usize, cap: u32, start: u32) -> Option<Self> {
        Some(Producer {
            view: RingView::new(map, offset, cap)?,
            prod: start,
            cons_cache: start,
        })
    }

    /// Capacity in slots.
    pub fn cap(&self) -> u32 {
        self.view.cap()
    }

    /// Free slots, refreshing the consumer index from shared memory.
    pub fn free(&mut self) -> Result<u32, RingCorrupt> {
        self.refresh()?;
        Ok(self.view.cap() - self.prod.wrapping_sub(self.cons_cache))
    }

    fn refresh(&mut self) -> Result<(), RingCorrupt> {
        // Acquire: pairs with the consumer's Release store of `cons` in
        // `Consumer::try_pop`, so its reads of the slots we may now reuse have
        // happened before our overwrite.
        let cons = self.view.header().cons.value.load(Ordering::Acquire);
        // The consumer can neither pass the producer nor fall more than `cap`
        // behind it.
        if self.prod.wrapping_sub(cons) > self.view.cap() {
            return Err(RingCorrupt);
        }
        self.cons_cache = cons;
        Ok(())
    }

    /// Push one item; `Ok(false)` when the ring is full. Data path; never
    /// blocks, never allocates.
    #[inline]
    pub fn try_push(&mut self, item: [u64; W]) -> Result<bool, RingCorrupt> {
        if self.prod.wrapping_sub(self.cons_cache) >= self.view.cap() {
            self.refresh()?;
            if self.prod.wrapping_sub(self.cons_cache) >= self.view.cap() {
                return Ok(false);
            }
        }
        let slot = self.view.slot(self.prod);
        for (w, v) in slot.iter().zip(item) {
            // Relaxed: published by the Release store of `prod` below.
            w.store(v, Ordering::Relaxed);
        }
        self.prod = self.prod.wrapping_add(1);
        // Release: pairs with the consumer's Acquire load of `prod` in
        // `Consumer::try_pop`/`Consumer::snapshot`; makes the slot words (and
        // everything this thread wrote before, e.g. a copied message) visible
        // to the consumer.
        self.view.header().prod.value.store(self.prod, Ordering::Release);
        Ok(true)
    }
}

/// The consuming end of a shared ring.
pub struct Consumer<const W: usize> {
    view: RingView<W>,
    /// Local shadow of the consumer index (authoritative; never read back).
    cons: u32,
    /// Last producer index read from shared memory.
    prod_cache: u32,
}

impl<const W: usize> std::fmt::Debug for Consumer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("cap", &self.view.cap())
            .field("cons", &self.cons)
            .field("prod_cache", &self.prod_cache)
            .finish()
    }
}

impl<const W: usize> Consumer<W> {
    /// Attach the consuming end of the ring at `offset` in `map`, whose indices
    /// both start at `start`. `None` if the ring does not fit or is misaligned.
    /// Control path; any thread.
    pub fn new(map: Arc<SharedFile>, offset: usize, cap: u32, start: u32) -> Option<Self> {
        Some(Consumer {
            view: RingView::new(map, offset, cap)?,
            cons: start,
            prod_cache: start,
        })
    }

    /// Capacity in slots.
    pub fn cap(&self) -> u32 {
        self.view.cap()
    }

    /// The local consumer index (items consumed so far, free-running).
    pub fn position(&self) -> u32 {
        self.cons
    }

    /// Read the producer index now: items up to the returned index (exclusive)
    /// have been published.
    pub fn snapshot(&mut self) -> Result<u32, RingCorrupt> {
        // Acquire: pairs with the producer's Release store of `prod` in
        // `Producer::try_push`: the slots below it (and the bytes the producer
        // wrote before publishing) are visible to us.
        let prod = self.view.header().prod.value.load(Ordering::Acquire);
        if prod.wrapping_sub(self.cons) > self.view.cap() {
            return Err(RingCorrupt);
        }
        self.prod_cache = prod;
        Ok(prod)
    }

    /// Whether an item is ready to pop (reads the producer index only when
    /// the items known to be published are used up). Data path; never blocks.
    #[inline]
    pub fn ready(&mut self) -> Result<bool, RingCorrupt> {
        if self.cons == self.prod_cache {
            self.snapshot()?;
        }
        Ok(self.cons != self.prod_cache)
    }

    /// Pop one item; `Ok(None)` when the ring is empty. Data path; never blocks.
    #[inline]
    pub fn try_pop(&mut self) -> Result<Option<[u64; W]>, RingCorrupt> {
        if self.cons == self.prod_cache {
            self.snapshot()?;
            if self.cons == self.prod_cache {
                return Ok(None);
            }
        }
        let slot = self.view.slot(self.cons);
        let mut item = [0u64; W];
        for (v, w) in item.iter_mut().zip(slot.iter()) {
            // Relaxed: ordered after the Acquire load of `prod` above.
            *v = w.load(Ordering::Relaxed);
        }
        self.cons = self.cons.wrapping_add(1);
        // Release: pairs with the producer's Acquire load of `cons` in
        // `Producer::refresh`; our slot reads happen before it reuses the slot.
        self.view.header().cons.value.store(self.cons, Ordering::Release);
        Ok(Some(item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: usize) -> Arc<SharedFile> {
        Arc::new(SharedFile::create("ring-test", bytes).expect("memfd"))
    }

    #[test]
    fn ring_bytes_rejects_bad_caps() {
        assert_eq!(ring_bytes(0, 2), None);
        assert_eq!(ring_bytes(3, 2), None);
        assert_eq!(ring_bytes(MAX_RING_CAP * 2, 1), None);
        // Header (256) + slots, rounded up to a 128-byte block.
        assert_eq!(ring_bytes(4, 2), Some(256 + 128));
        assert_eq!(ring_bytes(1, 1), Some(256 + 128));
        assert_eq!(ring_bytes(16, 2), Some(256 + 256));
    }

    #[test]
    fn attach_checks_bounds_and_alignment() {
        let f = file(4096);
        assert!(Producer::<2>::new(Arc::clone(&f), 0, 8, 0).is_some());
        assert!(Producer::<2>::new(Arc::clone(&f), 64, 8, 0).is_none(), "misaligned");
        assert!(Consumer::<4>::new(Arc::clone(&f), 0, 1024, 0).is_none(), "does not fit");
    }

    #[test]
    fn full_empty_and_fifo_across_index_wrap() {
        let f = file(8192);
        let start = u32::MAX - 5;
        assert!(init_indices::<2>(&f, 0, 8, start));
        let mut p = Producer::<2>::new(Arc::clone(&f), 0, 8, start).unwrap();
        let mut c = Consumer::<2>::new(Arc::clone(&f), 0, 8, start).unwrap();
        assert_eq!(c.try_pop(), Ok(None));
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..50u64 {
            // Fill until full, then drain a varying amount.
            while p.try_push([next_in, !next_in]).unwrap() {
                next_in += 1;
            }
            assert_eq!(next_in - next_out, 8, "full at exactly cap");
            assert_eq!(p.free(), Ok(0));
            for _ in 0..(round % 8 + 1) {
                let item = c.try_pop().unwrap().expect("item");
                assert_eq!(item, [next_out, !next_out]);
                next_out += 1;
            }
        }
        while let Some(item) = c.try_pop().unwrap() {
            assert_eq!(item, [next_out, !next_out]);
            next_out += 1;
        }
        assert_eq!(next_in, next_out);
        assert!(c.position() < start, "indices wrapped past u32::MAX");
    }

    #[test]
    fn corrupt_peer_indices_are_detected() {
        let f = file(4096);
        let mut p = Producer::<1>::new(Arc::clone(&f), 0, 4, 0).unwrap();
        let mut c = Consumer::<1>::new(Arc::clone(&f), 0, 4, 0).unwrap();
        let view = RingView::<1>::new(Arc::clone(&f), 0, 4).unwrap();
        // A "consumer" that claims to be ahead of the producer.
        view.header().cons.value.store(3, Ordering::Relaxed);
        assert_eq!(p.free(), Err(RingCorrupt));
        view.header().cons.value.store(0, Ordering::Relaxed);
        assert_eq!(p.free(), Ok(4));
        // A "producer" that claims more than cap items.
        view.header().prod.value.store(100, Ordering::Relaxed);
        assert_eq!(c.try_pop(), Err(RingCorrupt));
        assert_eq!(c.snapshot(), Err(RingCorrupt));
        assert_eq!(c.ready(), Err(RingCorrupt));
    }

    #[test]
    fn ready_says_whether_try_pop_has_an_item() {
        let f = file(4096);
        let mut p = Producer::<1>::new(Arc::clone(&f), 0, 4, 0).unwrap();
        let mut c = Consumer::<1>::new(Arc::clone(&f), 0, 4, 0).unwrap();
        assert_eq!(c.ready(), Ok(false));
        assert_eq!(p.try_push([7]), Ok(true));
        assert_eq!(p.try_push([8]), Ok(true));
        assert_eq!(c.ready(), Ok(true));
        assert_eq!(c.ready(), Ok(true), "asking twice consumes nothing");
        assert_eq!(c.try_pop(), Ok(Some([7])));
        assert_eq!(c.ready(), Ok(true));
        assert_eq!(c.try_pop(), Ok(Some([8])));
        assert_eq!(c.ready(), Ok(false));
        assert_eq!(c.try_pop(), Ok(None));
    }

    #[test]
    fn two_threads_transfer_in_order() {
        let f = file(1 << 16);
        let mut p = Producer::<2>::new(Arc::clone(&f), 0, 64, 0).unwrap();
        let mut c = Consumer::<2>::new(Arc::clone(&f), 0, 64, 0).unwrap();
        const N: u64 = 20_000;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < N {
                if p.try_push([i, i.wrapping_mul(0x9e37_79b9)]).unwrap() {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut expect = 0;
        while expect < N {
            match c.try_pop().unwrap() {
                Some(item) => {
                    assert_eq!(item, [expect, expect.wrapping_mul(0x9e37_79b9)]);
                    expect += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
        assert_eq!(c.try_pop(), Ok(None));
    }
}
