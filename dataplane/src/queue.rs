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
#[derive(Debug)]
pub struct Slab<T> {
    slots: Box<[T]>,
    free: Vec<u32>,
    in_use: Box<[bool]>,
}

impl<T: Default> Slab<T> {
    pub fn with_capacity(n: usize) -> Self {
        assert!(n <= u32::MAX as usize);
        let slots: Vec<T> = (0..n).map(|_| T::default()).collect();
        Slab {
            slots: slots.into_boxed_slice(),
            // Pop from the end: hand out low indices first.
            free: (0..n as u32).rev().collect(),
            in_use: vec![false; n].into_boxed_slice(),
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
        self.in_use[i as usize] = true;
        Some(i)
    }
    /// Return slot `i`. Freeing a free slot is a bug: it is ignored in release
    /// builds and asserted in debug builds.
    pub fn free(&mut self, i: u32) {
        let used = self.in_use.get_mut(i as usize);
        match used {
            Some(u) if *u => {
                *u = false;
                // Capacity: free holds at most capacity entries.
                self.free.push(i);
            }
            _ => debug_assert!(false, "slab double free of {i}"),
        }
    }
    pub fn is_used(&self, i: u32) -> bool {
        self.in_use.get(i as usize).copied().unwrap_or(false)
    }
    pub fn get(&self, i: u32) -> Option<&T> {
        self.is_used(i).then(|| &self.slots[i as usize])
    }
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        if self.is_used(i) {
            Some(&mut self.slots[i as usize])
        } else {
            None
        }
    }
    /// Indices of the slots in use, in index order.
    pub fn used_indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.in_use
            .iter()
            .enumerate()
            .filter(|(_, u)| **u)
            .map(|(i, _)| i as u32)
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
