//! The buffers an engine (responder or requester) holds on its core: one
//! per-core cache for each of its three pool classes, a few buffers of each
//! class kept in front of them, and the accessors both engines need. Owned by
//! one core.

use mempool::pool::{BufRef, ClassId, Mempool, PoolCache};

use crate::fabric::LocalBuf;

/// Buffers of each class an engine keeps in front of the pool's per-core
/// cache: a Call returns a buffer or two of a class and the next Call takes
/// as many, so most gets and puts stay here (a plain array) instead of paying
/// for the pool cache's checks and published statistics. Kept small: these
/// buffers are out of the pool's reach (other cores cannot have them) until
/// the engine takes them again or shuts down.
const FRONT: usize = 2;

/// The pool classes an engine takes buffers from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Recv = 0,
    Send = 1,
    Data = 2,
}

#[derive(Clone, Copy)]
struct Front {
    bufs: [BufRef; FRONT],
    len: usize,
}

/// Receive (inline), send/head, and data buffers for one engine on one core.
pub(crate) struct EngineBufs<'p> {
    pub(crate) pool: &'p Mempool,
    /// The pool caches of the three classes, in [`Class`] order.
    caches: [PoolCache<'p>; 3],
    front: [Front; 3],
    recv_class: u8,
    send_class: u8,
}

impl Drop for EngineBufs<'_> {
    fn drop(&mut self) {
        self.drain();
    }
}

impl<'p> EngineBufs<'p> {
    /// Claim `core`'s caches of the three classes.
    pub(crate) fn new(
        pool: &'p Mempool,
        recv: ClassId,
        send: ClassId,
        data: ClassId,
        core: usize,
    ) -> Result<Self, mempool::MempoolError> {
        const NONE: BufRef = BufRef {
            region: 0,
            class: 0,
            index: 0,
        };
        Ok(EngineBufs {
            caches: [
                pool.cache(recv, core)?,
                pool.cache(send, core)?,
                pool.cache(data, core)?,
            ],
            front: [Front {
                bufs: [NONE; FRONT],
                len: 0,
            }; 3],
            pool,
            recv_class: recv.get(),
            send_class: send.get(),
        })
    }

    #[inline]
    fn class_of(&self, b: BufRef) -> usize {
        if b.class == self.recv_class {
            Class::Recv as usize
        } else if b.class == self.send_class {
            Class::Send as usize
        } else {
            Class::Data as usize
        }
    }

    /// A buffer of class `c`, or `None` when the pool has none for this core.
    #[inline]
    pub(crate) fn get(&mut self, c: Class) -> Option<BufRef> {
        let f = &mut self.front[c as usize];
        if f.len > 0 {
            f.len -= 1;
            return Some(f.bufs[f.len]);
        }
        self.caches[c as usize].get().map(|b| b.into_raw())
    }

    /// Buffers of each class held in front of the pool (in [`Class`] order).
    pub(crate) fn kept(&self) -> [usize; 3] {
        [self.front[0].len, self.front[1].len, self.front[2].len]
    }

    /// Give every kept buffer back to the pool (shutdown).
    pub(crate) fn drain(&mut self) {
        for k in 0..3 {
            let f = &mut self.front[k];
            if f.len > 0 {
                // SAFETY: as in `put`: these buffers were put by the engine,
                // their only holder, after their last use.
                let r = unsafe { self.caches[k].put_bulk(&f.bufs[..f.len]) };
                debug_assert!(r.is_ok(), "returning {:?}: {r:?}", &f.bufs[..f.len]);
                f.len = 0;
            }
        }
    }

    /// `len` bytes of buffer `b`, as the fabric names local memory.
    #[inline]
    pub(crate) fn local(&self, b: BufRef, len: u32) -> LocalBuf {
        LocalBuf {
            region: b.region,
            offset: self.pool.offset(b).unwrap_or(0) as u64,
            len,
        }
    }

    /// Return `b` (kept in front of the pool while there is room).
    #[inline]
    pub(crate) fn put(&mut self, b: BufRef) {
        let k = self.class_of(b);
        let f = &mut self.front[k];
        if f.len < FRONT {
            debug_assert!(!f.bufs[..f.len].contains(&b), "{b:?} returned twice");
            f.bufs[f.len] = b;
            f.len += 1;
            return;
        }
        // SAFETY: `b` came from this pool and the engine is its only holder; the
        // engines return a buffer only once no posted work request refers to it
        // (after its completions, or after the connection's teardown).
        let r = unsafe { self.caches[k].put_bulk(&[b]) };
        debug_assert!(r.is_ok(), "returning {b:?}: {r:?}");
    }

    /// Return every buffer of `bufs` that is `Some`.
    #[inline]
    pub(crate) fn put_all<const N: usize>(&mut self, bufs: [Option<BufRef>; N]) {
        for b in bufs.into_iter().flatten() {
            self.put(b);
        }
    }

    /// The bytes of `b`.
    #[inline]
    pub(crate) fn bytes(&self, b: BufRef) -> &'p [u8] {
        let pool: &'p Mempool = self.pool;
        // SAFETY: the engine holds `b`, and no posted work request writes it
        // while the engine reads it (reads complete before a Call executes;
        // replies are posted after they are built).
        unsafe { pool.bytes(b) }.unwrap_or(&[])
    }

    /// The bytes of `b`, mutable.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn bytes_mut(&self, b: BufRef) -> &'p mut [u8] {
        let pool: &'p Mempool = self.pool;
        // SAFETY: as in `bytes`; the engines borrow each buffer mutably at most
        // once at a time (distinct buffers for headers, heads, data and chunks).
        unsafe { pool.bytes_mut(b) }.unwrap_or(&mut [])
    }
}
