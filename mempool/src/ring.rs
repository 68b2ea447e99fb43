//! Bounded multi-producer multi-consumer ring in the style of DPDK's
//! `rte_ring`.
//!
//! # Design
//!
//! * Capacity is a power of two; slot `i` of the free-running index `x` is
//!   `x & mask`. Indices are `usize` and never reset, so "used" is always
//!   `prod_tail - cons_tail` computed with wrapping arithmetic.
//! * Producer state (`prod.head`, `prod.tail`) and consumer state
//!   (`cons.head`, `cons.tail`) live on separate 128-byte blocks
//!   (`#[repr(align(128))]`, two cache lines to defeat the adjacent-line
//!   prefetcher), so producers and consumers do not false-share.
//! * Two phases on each side. A producer first *reserves* slots by moving
//!   `prod.head` forward with a compare-and-swap, then copies its items into
//!   the reserved slots, then waits until `prod.tail` reaches the start of its
//!   reservation (all earlier producers have published) and *publishes* by
//!   storing `prod.tail = its head`. Consumers mirror this with `cons.head` /
//!   `cons.tail`. Consumers only read slots below `prod.tail`; producers only
//!   overwrite slots below `cons.tail + capacity`.
//! * Burst operations move as many items as fit (possibly zero); bulk
//!   operations move all or nothing.
//!
//! Like `rte_ring`, the ring is non-blocking for reservations but a thread
//! preempted between reserving and publishing delays the publication of later
//! reservations on the same side (they spin, yielding after a while). Run one
//! thread per core, as the reactor does, and this does not happen in practice.
//!
//! # Memory ordering
//!
//! Every `Acquire` below names its `Release` partner in a comment, and vice
//! versa. The four pairings are:
//!
//! 1. `prod.tail` Release store (publish)  → consumer's `prod.tail` Acquire
//!    load: the consumer sees the slot contents written before publication.
//! 2. `cons.tail` Release store (release slots) → producer's `cons.tail`
//!    Acquire load: the producer overwrites a slot only after the consumer's
//!    read of it happened.
//! 3. `prod.tail` Release store by the previous producer → the next
//!    producer's Acquire spin-load of `prod.tail` (and the same for
//!    `cons.tail`): makes publication transitive, so a consumer that acquires
//!    the latest tail sees every earlier producer's slot writes too.
//! 4. `prod.head` / `cons.head` AcqRel compare-and-swap → the next
//!    reserver's Acquire load of the head: guarantees that the tail the next
//!    reserver loads afterwards is at least as new as the one the previous
//!    reserver based its reservation on (so `free`/`avail` never
//!    underflow). The code also re-checks and retries if it ever would.
//!
//! Any thread may call any method of [`Ring`]. The [`spsc`] handles are
//! `Send` but each must be used by one thread at a time (their methods take
//! `&mut self`).

use core::mem::MaybeUninit;

use crate::error::MempoolError;

/// Largest capacity [`Ring::new`] accepts (2^31 slots).
pub const MAX_CAPACITY: usize = 1 << 31;

const _: () = assert!(MAX_CAPACITY.is_power_of_two());
// Free-running indices must be able to count at least two full laps of the
// largest ring before wrapping, so `prod - cons <= capacity` stays meaningful.
const _: () = assert!(MAX_CAPACITY <= usize::MAX / 4);

/// Spins before a waiting thread starts yielding its core.
#[cfg(not(loom))]
const SPINS_BEFORE_YIELD: u32 = 128;
/// Yields before a waiting thread starts sleeping.
#[cfg(not(loom))]
const YIELDS_BEFORE_SLEEP: u32 = 16;

#[cfg(not(loom))]
mod sync {
    pub(crate) use core::cell::UnsafeCell;
    pub(crate) use core::sync::atomic::{AtomicUsize, Ordering};
    pub(crate) use std::sync::Arc;

    /// Back-off while another thread finishes publishing: spin, then
    /// yield, then sleep briefly. With one thread per core (the reactor's
    /// layout) the predecessor is running and the spin phase suffices; the
    /// later phases matter when threads outnumber cores and the predecessor
    /// was preempted inside its reservation.
    #[inline]
    pub(crate) fn spin_wait(spins: &mut u32) {
        *spins = spins.saturating_add(1);
        if *spins <= super::SPINS_BEFORE_YIELD {
            core::hint::spin_loop();
        } else if *spins <= super::SPINS_BEFORE_YIELD + super::YIELDS_BEFORE_SLEEP {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

#[cfg(loom)]
mod sync {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
    pub(crate) use loom::sync::Arc;

    pub(crate) fn spin_wait(_spins: &mut u32) {
        loom::thread::yield_now();
    }
}

use sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

/// One side's head/tail pair, alone on a 128-byte block.
#[repr(align(128))]
struct HeadTail {
    /// Next index to reserve (free-running).
    head: AtomicUsize,
    /// Everything below this index has been published by this side.
    tail: AtomicUsize,
}

impl HeadTail {
    fn new() -> Self {
        HeadTail {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }
}

/// Whether a side may have one or many concurrent users.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sync {
    Multi,
    Single,
}

/// Burst (as many as fit) or bulk (all or nothing).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Amount {
    Burst,
    Bulk,
}

/// A bounded lock-free MPMC ring of `Copy` items; see the [module
/// docs](self) for the algorithm and memory ordering.
///
/// All methods take `&self` and may be called from any thread. Nothing
/// allocates after [`Ring::new`].
pub struct Ring<T> {
    prod: HeadTail,
    cons: HeadTail,
    mask: usize,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: items are moved between threads through the ring, so `T: Send` is
// required and sufficient. The slots are only accessed under the
// reservation protocol: a slot is written by exactly one producer that
// reserved it (CAS on prod.head) and read by exactly one consumer that
// reserved it (CAS on cons.head), and the tail Release/Acquire pairs order
// those accesses (see module docs), so there are no data races on `slots`.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above; `&Ring` only exposes the reservation-protocol methods.
unsafe impl<T: Send> core::marker::Sync for Ring<T> {}

impl<T> core::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &(self.mask + 1))
            .field("prod_head", &self.prod.head.load(Ordering::Relaxed))
            .field("prod_tail", &self.prod.tail.load(Ordering::Relaxed))
            .field("cons_head", &self.cons.head.load(Ordering::Relaxed))
            .field("cons_tail", &self.cons.tail.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T: Copy + Send> Ring<T> {
    /// Creates an empty ring holding up to `capacity` items.
    ///
    /// `capacity` must be a power of two in `1..=MAX_CAPACITY`; otherwise
    /// [`MempoolError::InvalidCapacity`]. Allocates the slot array once.
    /// Start-up only.
    pub fn new(capacity: usize) -> Result<Ring<T>, MempoolError> {
        if capacity == 0 || !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
            return Err(MempoolError::InvalidCapacity {
                requested: capacity,
                max: MAX_CAPACITY,
            });
        }
        let slots = (0..capacity)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(Ring {
            prod: HeadTail::new(),
            cons: HeadTail::new(),
            mask: capacity - 1,
            slots,
        })
    }

    /// Number of slots. Any thread.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Number of published items not yet consumed. Exact when no operation
    /// is in flight; a snapshot in `0..=capacity` otherwise. Any thread.
    #[inline]
    pub fn len(&self) -> usize {
        // Relaxed: a statistic, no slot access depends on it.
        let cons_tail = self.cons.tail.load(Ordering::Relaxed);
        let prod_tail = self.prod.tail.load(Ordering::Relaxed);
        let used = prod_tail.wrapping_sub(cons_tail);
        // A stale prod_tail next to a fresher cons_tail looks "negative":
        // the ring was (nearly) empty.
        if used > self.capacity() {
            0
        } else {
            used
        }
    }

    /// `len() == 0`. Any thread.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Enqueues as many of `items` as fit, in order, and returns how many
    /// (0 when full). Any thread.
    #[inline]
    pub fn enqueue_burst(&self, items: &[T]) -> usize {
        self.enqueue_impl(items, Sync::Multi, Amount::Burst)
    }

    /// Enqueues all of `items` or none; returns whether it did. Any thread.
    #[inline]
    pub fn enqueue_bulk(&self, items: &[T]) -> bool {
        items.is_empty() || self.enqueue_impl(items, Sync::Multi, Amount::Bulk) != 0
    }

    /// Dequeues up to `out.len()` items into the front of `out` and returns
    /// how many (0 when empty). Any thread.
    #[inline]
    pub fn dequeue_burst(&self, out: &mut [T]) -> usize {
        self.dequeue_impl(out, Sync::Multi, Amount::Burst)
    }

    /// Fills all of `out` or dequeues nothing; returns whether it did. Any
    /// thread.
    #[inline]
    pub fn dequeue_bulk(&self, out: &mut [T]) -> bool {
        out.is_empty() || self.dequeue_impl(out, Sync::Multi, Amount::Bulk) != 0
    }

    /// Enqueues one item; gives it back when the ring is full. Any thread.
    #[inline]
    pub fn enqueue(&self, item: T) -> Result<(), T> {
        if self.enqueue_burst(core::slice::from_ref(&item)) == 1 {
            Ok(())
        } else {
            Err(item)
        }
    }

    /// Dequeues one item, `None` when empty. Any thread.
    #[inline]
    pub fn dequeue(&self) -> Option<T> {
        let mut one = [MaybeUninit::<T>::uninit()];
        // SAFETY: `MaybeUninit<T>` has the layout of `T`, and `dequeue_raw`
        // writes before any read; we only read `one[0]` when it reports 1.
        let n = unsafe { self.dequeue_raw(one.as_mut_ptr().cast::<T>(), 1, Sync::Multi, Amount::Burst) };
        if n == 1 {
            // SAFETY: dequeue_raw initialised the first element.
            Some(unsafe { one[0].assume_init() })
        } else {
            None
        }
    }

    fn enqueue_impl(&self, items: &[T], sync: Sync, amount: Amount) -> usize {
        let cap = self.capacity();
        let mut spins = 0u32;
        let (start, n) = loop {
            // Acquire pairs with the AcqRel compare_exchange on prod.head
            // below, done by whichever producer wrote this value (pairing 4).
            // For a single producer this is our own previous store.
            let head = self.prod.head.load(Ordering::Acquire);
            // Acquire pairs with the Release store of cons.tail at the end of
            // `dequeue_raw` (pairing 2): slots below cons_tail + cap are no
            // longer being read.
            let cons_tail = self.cons.tail.load(Ordering::Acquire);
            let used = head.wrapping_sub(cons_tail);
            if used > cap {
                // `head` went stale while consumers moved on; reload.
                sync::spin_wait(&mut spins);
                continue;
            }
            let free = cap - used;
            let n = match amount {
                Amount::Burst => items.len().min(free),
                Amount::Bulk if items.len() <= free => items.len(),
                Amount::Bulk => 0,
            };
            if n == 0 {
                return 0;
            }
            let new_head = head.wrapping_add(n);
            match sync {
                Sync::Single => {
                    // Relaxed: only this producer touches prod.head; the
                    // publication below is what consumers synchronise on.
                    self.prod.head.store(new_head, Ordering::Relaxed);
                    break (head, n);
                }
                Sync::Multi => {
                    // AcqRel: Release half pairs with the Acquire head load
                    // at the top of this loop in the next producer (pairing 4).
                    match self
                        .prod
                        .head
                        .compare_exchange_weak(head, new_head, Ordering::AcqRel, Ordering::Relaxed)
                    {
                        Ok(_) => break (head, n),
                        Err(_) => continue,
                    }
                }
            }
        };

        // SAFETY: we exclusively own slots [start, start + n): we reserved
        // them with the head update above, and `n <= cap - (start -
        // cons_tail)` means no consumer is still reading them (pairing 2).
        unsafe { self.copy_in(start, &items[..n]) };

        if sync == Sync::Multi {
            // Acquire pairs with the Release store of prod.tail below by the
            // producer whose reservation ends at `start` (pairing 3).
            while self.prod.tail.load(Ordering::Acquire) != start {
                sync::spin_wait(&mut spins);
            }
        }
        // Release pairs with the Acquire load of prod.tail in `dequeue_raw`
        // (pairing 1) and with the spin-load above in the next producer
        // (pairing 3).
        self.prod.tail.store(start.wrapping_add(n), Ordering::Release);
        n
    }

    fn dequeue_impl(&self, out: &mut [T], sync: Sync, amount: Amount) -> usize {
        // SAFETY: `out` is a valid, writable slice of `out.len()` `T`s.
        unsafe { self.dequeue_raw(out.as_mut_ptr(), out.len(), sync, amount) }
    }

    /// # Safety
    /// `out` must be valid for writes of `want` values of `T`.
    unsafe fn dequeue_raw(&self, out: *mut T, want: usize, sync: Sync, amount: Amount) -> usize {
        let cap = self.capacity();
        let mut spins = 0u32;
        let (start, n) = loop {
            // Acquire pairs with the AcqRel compare_exchange on cons.head
            // below by the consumer that wrote this value (pairing 4).
            let head = self.cons.head.load(Ordering::Acquire);
            // Acquire pairs with the Release store of prod.tail at the end of
            // `enqueue_impl` (pairing 1): slots below prod_tail hold
            // published items.
            let prod_tail = self.prod.tail.load(Ordering::Acquire);
            let avail = prod_tail.wrapping_sub(head);
            if avail > cap {
                // `head` went stale; reload.
                sync::spin_wait(&mut spins);
                continue;
            }
            let n = match amount {
                Amount::Burst => want.min(avail),
                Amount::Bulk if want <= avail => want,
                Amount::Bulk => 0,
            };
            if n == 0 {
                return 0;
            }
            let new_head = head.wrapping_add(n);
            match sync {
                Sync::Single => {
                    // Relaxed: only this consumer touches cons.head.
                    self.cons.head.store(new_head, Ordering::Relaxed);
                    break (head, n);
                }
                Sync::Multi => {
                    // AcqRel: Release half pairs with the Acquire head load at
                    // the top of this loop in the next consumer (pairing 4).
                    match self
                        .cons
                        .head
                        .compare_exchange_weak(head, new_head, Ordering::AcqRel, Ordering::Relaxed)
                    {
                        Ok(_) => break (head, n),
                        Err(_) => continue,
                    }
                }
            }
        };

        // SAFETY: slots [start, start + n) are below prod_tail, so they were
        // published (pairing 1), and we reserved them exclusively with the
        // head update. `out` is valid for `n <= want` writes (caller).
        unsafe { self.copy_out(start, out, n) };

        if sync == Sync::Multi {
            // Acquire pairs with the Release store of cons.tail below by the
            // consumer whose reservation ends at `start` (pairing 3).
            while self.cons.tail.load(Ordering::Acquire) != start {
                sync::spin_wait(&mut spins);
            }
        }
        // Release pairs with the Acquire load of cons.tail in `enqueue_impl`
        // (pairing 2) and the spin-load above in the next consumer (pairing 3).
        self.cons.tail.store(start.wrapping_add(n), Ordering::Release);
        n
    }

    /// Copies `items` into the slots starting at free-running index `start`.
    ///
    /// # Safety
    /// The caller must exclusively own slots `[start, start + items.len())`.
    #[cfg(not(loom))]
    #[inline]
    unsafe fn copy_in(&self, start: usize, items: &[T]) {
        let cap = self.capacity();
        let idx = start & self.mask;
        let first = items.len().min(cap - idx);
        let base = UnsafeCell::raw_get(self.slots.as_ptr()).cast::<T>();
        // SAFETY: `idx + first <= cap` and `items.len() - first <= idx`, so
        // both destination ranges lie inside the slot array; the caller owns
        // them, so nothing else reads or writes them concurrently; the
        // source is a distinct caller slice, hence non-overlapping.
        unsafe {
            core::ptr::copy_nonoverlapping(items.as_ptr(), base.add(idx), first);
            core::ptr::copy_nonoverlapping(items.as_ptr().add(first), base, items.len() - first);
        }
    }

    /// Copies `n` items out of the slots starting at `start` into `out`.
    ///
    /// # Safety
    /// The caller must exclusively own those slots, they must hold published
    /// items, and `out` must be valid for `n` writes.
    #[cfg(not(loom))]
    #[inline]
    unsafe fn copy_out(&self, start: usize, out: *mut T, n: usize) {
        let cap = self.capacity();
        let idx = start & self.mask;
        let first = n.min(cap - idx);
        let base = UnsafeCell::raw_get(self.slots.as_ptr()).cast::<T>();
        // SAFETY: ranges lie inside the slot array (see copy_in), the slots
        // were initialised by the publishing producer, `out` is valid for
        // `n` writes and is caller memory, not the slot array.
        unsafe {
            core::ptr::copy_nonoverlapping(base.add(idx), out, first);
            core::ptr::copy_nonoverlapping(base, out.add(first), n - first);
        }
    }

    #[cfg(loom)]
    unsafe fn copy_in(&self, start: usize, items: &[T]) {
        for (i, item) in items.iter().enumerate() {
            let slot = &self.slots[start.wrapping_add(i) & self.mask];
            // SAFETY: caller owns the slot; loom checks that claim.
            slot.with_mut(|p| unsafe { p.write(MaybeUninit::new(*item)) });
        }
    }

    #[cfg(loom)]
    unsafe fn copy_out(&self, start: usize, out: *mut T, n: usize) {
        for i in 0..n {
            let slot = &self.slots[start.wrapping_add(i) & self.mask];
            // SAFETY: caller owns the published slot and `out` is valid for
            // `n` writes; loom checks the ownership claim.
            let v = slot.with(|p| unsafe { (*p).assume_init() });
            // SAFETY: i < n.
            unsafe { out.add(i).write(v) };
        }
    }
}

/// Creates a single-producer single-consumer ring: the same ring with the
/// compare-and-swap and the wait-for-predecessor loops skipped.
///
/// Each handle is `Send` (move it to its thread) and takes `&mut self`, so
/// the type system guarantees one producer and one consumer.
/// Errors as [`Ring::new`]. Start-up only.
pub fn spsc<T: Copy + Send>(capacity: usize) -> Result<(SpscProducer<T>, SpscConsumer<T>), MempoolError> {
    let ring = Arc::new(Ring::new(capacity)?);
    Ok((SpscProducer { ring: ring.clone() }, SpscConsumer { ring }))
}

/// Producing end of an [`spsc`] ring. Used by one thread at a time.
pub struct SpscProducer<T> {
    ring: Arc<Ring<T>>,
}

/// Consuming end of an [`spsc`] ring. Used by one thread at a time.
pub struct SpscConsumer<T> {
    ring: Arc<Ring<T>>,
}

impl<T: Copy + Send> SpscProducer<T> {
    /// As [`Ring::enqueue_burst`], single-producer path.
    #[inline]
    pub fn enqueue_burst(&mut self, items: &[T]) -> usize {
        self.ring.enqueue_impl(items, Sync::Single, Amount::Burst)
    }

    /// As [`Ring::enqueue`], single-producer path.
    #[inline]
    pub fn enqueue(&mut self, item: T) -> Result<(), T> {
        if self.enqueue_burst(core::slice::from_ref(&item)) == 1 {
            Ok(())
        } else {
            Err(item)
        }
    }

    /// As [`Ring::len`].
    #[inline]
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// As [`Ring::is_empty`].
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// As [`Ring::capacity`].
    #[inline]
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

impl<T: Copy + Send> SpscConsumer<T> {
    /// As [`Ring::dequeue_burst`], single-consumer path.
    #[inline]
    pub fn dequeue_burst(&mut self, out: &mut [T]) -> usize {
        self.ring.dequeue_impl(out, Sync::Single, Amount::Burst)
    }

    /// As [`Ring::dequeue`], single-consumer path.
    #[inline]
    pub fn dequeue(&mut self) -> Option<T> {
        let mut one = [MaybeUninit::<T>::uninit()];
        // SAFETY: `MaybeUninit<T>` has `T`'s layout; read only when written.
        let n = unsafe {
            self.ring
                .dequeue_raw(one.as_mut_ptr().cast::<T>(), 1, Sync::Single, Amount::Burst)
        };
        if n == 1 {
            // SAFETY: dequeue_raw initialised it.
            Some(unsafe { one[0].assume_init() })
        } else {
            None
        }
    }

    /// As [`Ring::len`].
    #[inline]
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// As [`Ring::is_empty`].
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// As [`Ring::capacity`].
    #[inline]
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_capacities() {
        for bad in [0usize, 3, 6, 100, MAX_CAPACITY * 2] {
            assert!(
                matches!(
                    Ring::<u32>::new(bad),
                    Err(MempoolError::InvalidCapacity { requested, .. }) if requested == bad
                ),
                "capacity {bad} accepted"
            );
        }
        assert_eq!(Ring::<u32>::new(1).unwrap().capacity(), 1);
        assert_eq!(Ring::<u32>::new(64).unwrap().capacity(), 64);
    }

    #[test]
    fn fifo_and_full_empty() {
        let r = Ring::<u64>::new(8).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.dequeue(), None);
        for i in 0..8 {
            assert_eq!(r.enqueue(i), Ok(()));
        }
        assert_eq!(r.len(), 8);
        assert_eq!(r.enqueue(99), Err(99));
        for i in 0..8 {
            assert_eq!(r.dequeue(), Some(i));
        }
        assert_eq!(r.dequeue(), None);
    }

    #[test]
    fn burst_wraps_and_truncates() {
        let r = Ring::<u32>::new(8).unwrap();
        let mut out = [0u32; 8];
        // Move the indices so that bursts straddle the end of the array.
        for lap in 0..5u32 {
            let items: Vec<u32> = (0..6).map(|i| lap * 100 + i).collect();
            assert_eq!(r.enqueue_burst(&items), 6);
            // Only 2 more fit.
            assert_eq!(r.enqueue_burst(&[7, 7, 7]), 2);
            assert_eq!(r.len(), 8);
            assert_eq!(r.dequeue_burst(&mut out[..5]), 5);
            assert_eq!(&out[..5], &items[..5]);
            assert_eq!(r.dequeue_burst(&mut out), 3);
            assert_eq!(&out[..3], &[items[5], 7, 7]);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn bulk_is_all_or_nothing() {
        let r = Ring::<u8>::new(4).unwrap();
        assert!(r.enqueue_bulk(&[1, 2, 3]));
        assert!(!r.enqueue_bulk(&[4, 5]));
        assert_eq!(r.len(), 3);
        let mut out = [0u8; 4];
        assert!(!r.dequeue_bulk(&mut out));
        assert!(r.dequeue_bulk(&mut out[..3]));
        assert_eq!(&out[..3], &[1, 2, 3]);
        assert!(r.enqueue_bulk(&[]));
        assert!(r.dequeue_bulk(&mut []));
    }

    #[test]
    fn spsc_round_trip() {
        let (mut p, mut c) = spsc::<u32>(4).unwrap();
        assert_eq!(p.enqueue_burst(&[1, 2, 3, 4, 5]), 4);
        assert_eq!(p.enqueue(6), Err(6));
        assert_eq!(c.len(), 4);
        assert_eq!(c.dequeue(), Some(1));
        let mut out = [0; 8];
        assert_eq!(c.dequeue_burst(&mut out), 3);
        assert_eq!(&out[..3], &[2, 3, 4]);
        assert_eq!(c.dequeue(), None);
        assert_eq!(p.capacity(), 4);
    }

    #[test]
    fn layout_separates_producer_and_consumer() {
        assert_eq!(core::mem::align_of::<HeadTail>(), 128);
        let r = Ring::<u32>::new(2).unwrap();
        let p = &r.prod as *const HeadTail as usize;
        let c = &r.cons as *const HeadTail as usize;
        assert!(p.abs_diff(c) >= 128);
    }
}
