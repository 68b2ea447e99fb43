//! Small fixed-capacity containers for the engine: allocated once at start-up,
//! never grown.
//!
//! - [`IndexQueue`]: a bounded FIFO of `u32` indices, one per scarce resource (the
//!   SPDK nvmf/rdma.c "pending queue" pattern): requests wait here, in arrival
//!   order, until the resource frees up.
//! - [`Slab`]: a fixed array of slots with a free list; slot indices go into
//!   `WrId`s, so a completion finds its request with an array index.
//!
//! Owned by one core; no synchronisation.

/// A bounded FIFO of indices with free-running head/tail counters.
#[derive(Debug)]
pub struct IndexQueue {
    slots: Box<[u32]>,
    head: u32,
    tail: u32,
}

impl IndexQueue {
    /// A queue holding at most `capacity` indices (rounded up to a power of two).
    pub fn with_capacity(capacity: usize) -> Self {
        let cap = capacity.max(1).next_power_of_two();
        assert!(cap <= 1 << 30, "index queue capacity out of range");
        IndexQueue {
            slots: vec![0; cap].into_boxed_slice(),
            head: 0,
            tail: 0,
        }
    }
    #[inline]
    fn mask(&self) -> u32 {
        self.slots.len() as u32 - 1
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head) as usize
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }
    #[inline]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Append; `Err(v)` when full (the caller's sizing was wrong: every queue is
    /// sized for the number of requests that can wait on it).
    #[inline]
    pub fn push(&mut self, v: u32) -> Result<(), u32> {
        if self.len() == self.slots.len() {
            return Err(v);
        }
        let i = (self.tail & self.mask()) as usize;
        self.slots[i] = v;
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }
    #[inline]
    pub fn front(&self) -> Option<u32> {
        (!self.is_empty()).then(|| self.slots[(self.head & self.mask()) as usize])
    }
    #[inline]
    pub fn pop(&mut self) -> Option<u32> {
        let v = self.front()?;
        self.head = self.head.wrapping_add(1);
        Some(v)
    }
    /// Remove every occurrence of `v` (used when a connection is torn down and its
    /// waiting requests leave the queue), keeping the order of the rest.
    pub fn remove_where(&mut self, mut pred: impl FnMut(u32) -> bool) -> usize {
        let n = self.len();
        let mut removed = 0;
        for _ in 0..n {
            let v = self.pop().expect("len counted");
            if pred(v) {
                removed += 1;
            } else {
                let _ = self.push(v);
            }
        }
        removed
    }
}

/// A fixed set of slots with a free list.
///
/// Each slot keeps its in-use flag beside its value, so a lookup is one
/// bounds check and one load of the slot's own cache line (lookups run
/// many times per request on the hot path).
#[derive(Debug)]
pub struct Slab<T> {
    slots: Box<[SlabEntry<T>]>,
    free: Vec<u32>,
}

#[derive(Debug)]
struct SlabEntry<T> {
    used: bool,
    value: T,
}

impl<T: Default> Slab<T> {
    pub fn with_capacity(n: usize) -> Self {
        assert!(n <= u32::MAX as usize);
        let slots: Vec<SlabEntry<T>> = (0..n)
            .map(|_| SlabEntry {
                used: false,
                value: T::default(),
            })
            .collect();
        Slab {
            slots: slots.into_boxed_slice(),
            // Pop from the end: hand out low indices first.
            free: (0..n as u32).rev().collect(),
        }
    }
}

impl<T> Slab<T> {
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    pub fn available(&self) -> usize {
        self.free.len()
    }
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }
    /// Take a free slot's index, or `None` when all are in use.
    pub fn alloc(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        self.slots[i as usize].used = true;
        Some(i)
    }
    /// Return slot `i`. Freeing a free slot is a bug: it is ignored in release
    /// builds and asserted in debug builds.
    pub fn free(&mut self, i: u32) {
        match self.slots.get_mut(i as usize) {
            Some(e) if e.used => {
                e.used = false;
                // Capacity: free holds at most capacity entries.
                self.free.push(i);
            }
            _ => debug_assert!(false, "slab double free of {i}"),
        }
    }
    #[inline]
    pub fn is_used(&self, i: u32) -> bool {
        self.slots.get(i as usize).is_some_and(|e| e.used)
    }
    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize).filter(|e| e.used).map(|e| &e.value)
    }
    #[inline]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize).filter(|e| e.used).map(|e| &mut e.value)
    }
    /// Every slot, in use or free, in index order (for values a free slot
    /// keeps, e.g. buffers it reuses).
    pub fn all_slots_mut(&mut self) -> impl Iterator<Item = (bool, &mut T)> + '_ {
        self.slots.iter_mut().map(|e| (e.used, &mut e.value))
    }
    /// Every slot, in use or free, in index order.
    pub fn all_slots(&self) -> impl Iterator<Item = (bool, &T)> + '_ {
        self.slots.iter().map(|e| (e.used, &e.value))
    }
    /// Indices of the slots in use, in index order.
    pub fn used_indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, e)| e.used)
            .map(|(i, _)| i as u32)
    }
}

/// Fixed-capacity table whose ids carry a 16-bit generation above a 16-bit
/// index, so a stale id never names a reused slot.
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
    slots: Vec<(u16, Option<T>)>,
    free: Vec<u16>,
}

impl<T> GenSlab<T> {
    /// Slots in use.
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
    pub(crate) fn with_capacity(n: u16) -> Self {
        GenSlab {
            slots: (0..n).map(|_| (0, None)).collect(),
            free: (0..n).rev().collect(),
        }
    }
    pub(crate) fn insert(&mut self, v: T) -> Option<u32> {
        let i = self.free.pop()?;
        let s = &mut self.slots[i as usize];
        s.1 = Some(v);
        Some(((s.0 as u32) << 16) | i as u32)
    }
    pub(crate) fn index(&self, id: u32) -> Option<usize> {
        let i = (id & 0xffff) as usize;
        let (gen, v) = self.slots.get(i)?;
        (*gen as u32 == id >> 16 && v.is_some()).then_some(i)
    }
    pub(crate) fn id_of(&self, i: usize) -> u32 {
        ((self.slots[i].0 as u32) << 16) | i as u32
    }
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i)?.1.as_ref()
    }
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i)?.1.as_mut()
    }
    pub(crate) fn remove(&mut self, i: usize) -> Option<T> {
        let s = self.slots.get_mut(i)?;
        let v = s.1.take()?;
        s.0 = s.0.wrapping_add(1);
        self.free.push(i as u16);
        Some(v)
    }
    /// Only the verbs provider walks its table.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) fn used(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1.is_some())
            .map(|(i, _)| i)
    }
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_queue_fifo_bounded_wraps() {
        let mut q = IndexQueue::with_capacity(3);
        assert_eq!(q.capacity(), 4);
        for round in 0..10u32 {
            for i in 0..4 {
                q.push(round * 10 + i).unwrap();
            }
            assert_eq!(q.push(99), Err(99));
            for i in 0..4 {
                assert_eq!(q.pop(), Some(round * 10 + i));
            }
            assert!(q.is_empty());
        }
        for i in 0..4 {
            q.push(i).unwrap();
        }
        assert_eq!(q.remove_where(|v| v % 2 == 0), 2);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(1), Some(3), None));
    }

    #[test]
    fn gen_slab_ids_go_stale_when_a_slot_is_reused() {
        let mut s: GenSlab<&str> = GenSlab::with_capacity(1);
        let a = s.insert("a").unwrap();
        assert!(s.insert("b").is_none(), "full");
        let i = s.index(a).unwrap();
        assert_eq!((s.get(i), s.len()), (Some(&"a"), 1));
        assert_eq!(s.remove(i), Some("a"));
        let b = s.insert("b").unwrap();
        assert_ne!(a, b, "the generation changed");
        assert_eq!(s.index(a), None, "a stale id names nothing");
        assert_eq!(s.id_of(s.index(b).unwrap()), b);
    }

    #[test]
    fn slab_alloc_free_accounting() {
        let mut s: Slab<u64> = Slab::with_capacity(3);
        let a = s.alloc().unwrap();
        let b = s.alloc().unwrap();
        let c = s.alloc().unwrap();
        assert_eq!((a, b, c), (0, 1, 2));
        assert!(s.alloc().is_none());
        *s.get_mut(b).unwrap() = 7;
        s.free(b);
        assert!(s.get(b).is_none());
        assert_eq!(s.alloc(), Some(1));
        assert_eq!(s.in_use(), 3);
        assert_eq!(s.used_indices().collect::<Vec<_>>(), vec![0, 1, 2]);
    }
}
