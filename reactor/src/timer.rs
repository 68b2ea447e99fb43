//! Coarse per-core timer wheel.
//!
//! One level of `slots` buckets (a power of two), one bucket per tick (1 ms
//! by default). A timer due at absolute tick `d` lives in bucket `d & mask`
//! on an intrusive doubly linked list through a preallocated entry table, so
//! schedule and cancel are O(1) and nothing allocates after construction
//! (the callback itself may be a `Box`, see [`crate::CoreCtx::schedule_timer`]).
//! Timers further away than one revolution simply stay in their bucket and
//! are skipped until their tick comes; the wheel is meant for coarse
//! timeouts (retransmit, idle connection, stats), not for precise events.
//!
//! A timer fires no earlier than its due tick, and at the first loop
//! iteration after it. The wheel is owned by one core and is not `Sync`.

use crate::error::TimerError;

const NIL: u32 = u32::MAX;

/// Largest number of timers one wheel may hold (entry indices are `u32`
/// and `NIL` is reserved).
pub const MAX_TIMERS: usize = 1 << 24;

/// Largest number of buckets.
pub const MAX_SLOTS: usize = 1 << 20;

const _: () = assert!(MAX_TIMERS < NIL as usize);
const _: () = assert!(MAX_SLOTS.is_power_of_two());

/// Handle of a scheduled timer. Stale handles (the timer fired or was
/// cancelled, and its entry reused) are detected by a generation count, so
/// cancelling one is harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId {
    index: u32,
    generation: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Linked into bucket `due & mask`.
    Armed,
    /// Handed out by `expire`, callback running; not linked.
    Firing,
    /// Cancelled while firing: freed when the callback comes back.
    CancelledWhileFiring,
}

#[derive(Debug)]
struct Entry<C> {
    generation: u32,
    state: State,
    due_tick: u64,
    /// Zero for one-shot timers.
    period_ticks: u64,
    next: u32,
    prev: u32,
    callback: Option<C>,
}

/// A timer wheel holding callbacks of type `C`.
#[derive(Debug)]
pub struct TimerWheel<C> {
    buckets: Vec<u32>,
    mask: u64,
    entries: Vec<Entry<C>>,
    /// Head of the free list (linked through `next`).
    free: u32,
    /// Last tick processed by `expire`; new timers are due after it.
    current_tick: u64,
    /// Timers that are armed or firing.
    live: usize,
}

impl<C> TimerWheel<C> {
    /// A wheel with `slots` buckets (power of two in 1..=[`MAX_SLOTS`]) and
    /// room for `capacity` timers (1..=[`MAX_TIMERS`]), all allocated now.
    pub fn new(slots: usize, capacity: usize) -> Result<Self, String> {
        if slots == 0 || !slots.is_power_of_two() || slots > MAX_SLOTS {
            return Err(format!(
                "timer slots must be a power of two in 1..={MAX_SLOTS}, found {slots}"
            ));
        }
        if capacity == 0 || capacity > MAX_TIMERS {
            return Err(format!("max timers must be in 1..={MAX_TIMERS}, found {capacity}"));
        }
        let mut entries = Vec::with_capacity(capacity);
        for i in 0..capacity {
            let next = if i + 1 < capacity { (i + 1) as u32 } else { NIL };
            entries.push(Entry {
                generation: 0,
                state: State::Free,
                due_tick: 0,
                period_ticks: 0,
                next,
                prev: NIL,
                callback: None,
            });
        }
        Ok(TimerWheel {
            buckets: vec![NIL; slots],
            mask: (slots - 1) as u64,
            entries,
            free: 0,
            current_tick: 0,
            live: 0,
        })
    }

    /// Capacity given at construction.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Timers armed or currently firing.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no timer is armed or firing.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Last tick processed by [`TimerWheel::expire`].
    pub fn current_tick(&self) -> u64 {
        self.current_tick
    }

    /// Arms a timer due at absolute tick `due_tick` (moved to
    /// `current_tick + 1` if it is not after the current tick), repeating
    /// every `period_ticks` ticks if non-zero.
    pub fn schedule_at(&mut self, due_tick: u64, period_ticks: u64, callback: C) -> Result<TimerId, TimerError> {
        if self.free == NIL {
            return Err(TimerError::Full {
                capacity: self.entries.len(),
            });
        }
        let index = self.free;
        let e = &mut self.entries[index as usize];
        debug_assert_eq!(e.state, State::Free);
        self.free = e.next;
        e.callback = Some(callback);
        e.period_ticks = period_ticks;
        let id = TimerId {
            index,
            generation: e.generation,
        };
        self.live += 1;
        let due = due_tick.max(self.current_tick + 1);
        self.link(index, due);
        Ok(id)
    }

    /// Cancels a timer. Returns `true` if it was armed (it will not fire) or
    /// is a periodic timer whose callback is running right now (it will not
    /// fire again); `false` for a stale handle.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        let Some(e) = self.entries.get_mut(id.index as usize) else {
            return false;
        };
        if e.generation != id.generation {
            return false;
        }
        match e.state {
            State::Armed => {
                self.unlink(id.index);
                self.release(id.index);
                true
            }
            State::Firing => {
                e.state = State::CancelledWhileFiring;
                true
            }
            State::Free | State::CancelledWhileFiring => false,
        }
    }

    /// Advances the wheel to `now_tick`, moving every timer due at or before
    /// it into `out` (as `(id, callback)`, entry state "firing"). The caller
    /// runs each callback and then calls [`TimerWheel::finish`] with the id.
    /// `out` never grows beyond the wheel's capacity.
    pub fn expire(&mut self, now_tick: u64, out: &mut Vec<(TimerId, C)>) {
        if now_tick <= self.current_tick {
            return;
        }
        let behind = now_tick - self.current_tick;
        // Each bucket needs visiting at most once: after one revolution every
        // bucket that can hold a due timer has been seen.
        let visits = behind.min(self.mask + 1);
        for step in 1..=visits {
            let bucket = ((self.current_tick + step) & self.mask) as usize;
            let mut cursor = self.buckets[bucket];
            while cursor != NIL {
                let next = self.entries[cursor as usize].next;
                if self.entries[cursor as usize].due_tick <= now_tick {
                    self.unlink(cursor);
                    let e = &mut self.entries[cursor as usize];
                    e.state = State::Firing;
                    let id = TimerId {
                        index: cursor,
                        generation: e.generation,
                    };
                    if let Some(cb) = e.callback.take() {
                        out.push((id, cb));
                    }
                }
                cursor = next;
            }
        }
        self.current_tick = now_tick;
    }

    /// Completes a timer handed out by [`TimerWheel::expire`]. A periodic
    /// timer that was not cancelled meanwhile is re-armed `period_ticks`
    /// after the current tick with `callback` (pass `None` for a one-shot
    /// timer whose callback was consumed); anything else is freed. Returns
    /// `true` if the timer was re-armed.
    pub fn finish(&mut self, id: TimerId, callback: Option<C>) -> bool {
        let Some(e) = self.entries.get_mut(id.index as usize) else {
            return false;
        };
        if e.generation != id.generation {
            return false;
        }
        match (e.state, callback) {
            (State::Firing, Some(cb)) if e.period_ticks > 0 => {
                e.callback = Some(cb);
                let due = self.current_tick + e.period_ticks;
                self.link(id.index, due);
                true
            }
            (State::Firing, _) | (State::CancelledWhileFiring, _) => {
                self.release(id.index);
                false
            }
            (State::Free, _) | (State::Armed, _) => false,
        }
    }

    /// Drops every armed timer without running it (used when the core starts
    /// draining for shutdown). Timers currently firing are freed when they
    /// finish. Returns how many were dropped.
    pub fn clear(&mut self) -> usize {
        let mut dropped = 0;
        for bucket in 0..self.buckets.len() {
            let mut cursor = self.buckets[bucket];
            while cursor != NIL {
                let next = self.entries[cursor as usize].next;
                self.unlink(cursor);
                self.release(cursor);
                dropped += 1;
                cursor = next;
            }
        }
        for e in self.entries.iter_mut() {
            if e.state == State::Firing {
                e.state = State::CancelledWhileFiring;
            }
        }
        dropped
    }

    fn link(&mut self, index: u32, due: u64) {
        let bucket = (due & self.mask) as usize;
        let head = self.buckets[bucket];
        {
            let e = &mut self.entries[index as usize];
            e.state = State::Armed;
            e.due_tick = due;
            e.prev = NIL;
            e.next = head;
        }
        if head != NIL {
            self.entries[head as usize].prev = index;
        }
        self.buckets[bucket] = index;
    }

    fn unlink(&mut self, index: u32) {
        let (prev, next, due) = {
            let e = &self.entries[index as usize];
            debug_assert_eq!(e.state, State::Armed);
            (e.prev, e.next, e.due_tick)
        };
        if prev == NIL {
            let bucket = (due & self.mask) as usize;
            debug_assert_eq!(self.buckets[bucket], index);
            self.buckets[bucket] = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
        let e = &mut self.entries[index as usize];
        e.prev = NIL;
        e.next = NIL;
    }

    /// Returns an unlinked entry to the free list and bumps its generation.
    fn release(&mut self, index: u32) {
        let free = self.free;
        let e = &mut self.entries[index as usize];
        e.state = State::Free;
        e.callback = None;
        e.generation = e.generation.wrapping_add(1);
        e.next = free;
        e.prev = NIL;
        self.free = index;
        self.live -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(w: &mut TimerWheel<u32>, tick: u64) -> Vec<u32> {
        let mut out = Vec::new();
        w.expire(tick, &mut out);
        let mut fired = Vec::new();
        for (id, cb) in out {
            fired.push(cb);
            w.finish(id, Some(cb));
        }
        fired.sort_unstable();
        fired
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(TimerWheel::<u32>::new(3, 4).is_err());
        assert!(TimerWheel::<u32>::new(0, 4).is_err());
        assert!(TimerWheel::<u32>::new(8, 0).is_err());
    }

    #[test]
    fn fires_at_due_tick_not_before() {
        let mut w = TimerWheel::new(8, 16).unwrap();
        w.schedule_at(5, 0, 1u32).unwrap();
        w.schedule_at(3, 0, 2u32).unwrap();
        assert_eq!(fire(&mut w, 2), Vec::<u32>::new());
        assert_eq!(fire(&mut w, 3), vec![2]);
        assert_eq!(fire(&mut w, 4), Vec::<u32>::new());
        assert_eq!(fire(&mut w, 5), vec![1]);
        assert!(w.is_empty());
    }

    #[test]
    fn timers_beyond_one_revolution_wait_their_turn() {
        let mut w = TimerWheel::new(4, 16).unwrap();
        // Same bucket (1 & 3 == 9 & 3 == 17 & 3) but different revolutions.
        w.schedule_at(1, 0, 1u32).unwrap();
        w.schedule_at(9, 0, 9u32).unwrap();
        w.schedule_at(17, 0, 17u32).unwrap();
        assert_eq!(fire(&mut w, 1), vec![1]);
        assert_eq!(fire(&mut w, 8), Vec::<u32>::new());
        assert_eq!(fire(&mut w, 9), vec![9]);
        // Jumping far ahead visits each bucket once and fires all due timers.
        assert_eq!(fire(&mut w, 1000), vec![17]);
        assert_eq!(w.current_tick(), 1000);
    }

    #[test]
    fn lagging_wheel_fires_everything_due() {
        let mut w = TimerWheel::new(8, 64).unwrap();
        for d in 1..=40u32 {
            w.schedule_at(u64::from(d), 0, d).unwrap();
        }
        let fired = fire(&mut w, 25);
        assert_eq!(fired, (1..=25).collect::<Vec<_>>());
        assert_eq!(w.len(), 15);
        assert_eq!(fire(&mut w, 40), (26..=40).collect::<Vec<_>>());
    }

    #[test]
    fn cancel_prevents_firing_and_stale_ids_are_rejected() {
        let mut w = TimerWheel::new(8, 2).unwrap();
        let a = w.schedule_at(2, 0, 1u32).unwrap();
        let b = w.schedule_at(2, 0, 2u32).unwrap();
        assert_eq!(w.schedule_at(2, 0, 3u32), Err(TimerError::Full { capacity: 2 }));
        assert!(w.cancel(a));
        assert!(!w.cancel(a), "second cancel of the same id");
        // The freed entry is reused with a new generation.
        let c = w.schedule_at(2, 0, 3u32).unwrap();
        assert!(!w.cancel(a), "stale id must not cancel the new timer");
        assert_eq!(fire(&mut w, 2), vec![2, 3]);
        assert!(!w.cancel(b));
        assert!(!w.cancel(c));
    }

    #[test]
    fn past_due_is_moved_to_next_tick() {
        let mut w = TimerWheel::new(8, 4).unwrap();
        fire(&mut w, 10);
        w.schedule_at(3, 0, 7u32).unwrap();
        assert_eq!(fire(&mut w, 11), vec![7]);
    }

    #[test]
    fn periodic_rearms_until_cancelled() {
        let mut w = TimerWheel::new(16, 4).unwrap();
        let id = w.schedule_at(2, 3, 5u32).unwrap();
        assert_eq!(fire(&mut w, 2), vec![5]);
        assert_eq!(fire(&mut w, 4), Vec::<u32>::new());
        assert_eq!(fire(&mut w, 5), vec![5]);
        assert_eq!(fire(&mut w, 8), vec![5]);
        assert!(w.cancel(id));
        assert_eq!(fire(&mut w, 50), Vec::<u32>::new());
        assert!(w.is_empty());
    }

    #[test]
    fn cancel_while_firing_stops_periodic() {
        let mut w = TimerWheel::new(16, 4).unwrap();
        let id = w.schedule_at(1, 1, 5u32).unwrap();
        let mut out = Vec::new();
        w.expire(1, &mut out);
        assert_eq!(out.len(), 1);
        assert!(w.cancel(id));
        let (fid, cb) = out.pop().unwrap();
        assert!(!w.finish(fid, Some(cb)));
        assert!(w.is_empty());
    }

    #[test]
    fn clear_drops_armed_timers() {
        let mut w = TimerWheel::new(8, 8).unwrap();
        for d in 1..=5u32 {
            w.schedule_at(u64::from(d) * 3, 0, d).unwrap();
        }
        assert_eq!(w.clear(), 5);
        assert!(w.is_empty());
        assert_eq!(fire(&mut w, 100), Vec::<u32>::new());
        // All entries are free again.
        for d in 0..8u32 {
            w.schedule_at(200, 0, d).unwrap();
        }
    }
}
