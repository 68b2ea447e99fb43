//! The buffers an engine (responder or requester) holds on its core: one
//! per-core cache for each of its three pool classes, and the accessors both
//! engines need. Owned by one core.

use mempool::pool::{BufRef, ClassId, Mempool, PoolCache};

use crate::fabric::LocalBuf;

/// Receive (inline), send/head, and data buffers for one engine on one core.
pub(crate) struct EngineBufs<'p> {
    pub(crate) pool: &'p Mempool,
    pub(crate) recv: PoolCache<'p>,
    pub(crate) send: PoolCache<'p>,
    pub(crate) data: PoolCache<'p>,
    recv_class: u8,
    send_class: u8,
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
        Ok(EngineBufs {
            recv: pool.cache(recv, core)?,
            send: pool.cache(send, core)?,
            data: pool.cache(data, core)?,
            pool,
            recv_class: recv.get(),
            send_class: send.get(),
        })
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

    /// Return `b` to its class's cache.
    #[inline]
    pub(crate) fn put(&mut self, b: BufRef) {
        let cache = if b.class == self.recv_class {
            &mut self.recv
        } else if b.class == self.send_class {
            &mut self.send
        } else {
            &mut self.data
        };
        // SAFETY: `b` came from this pool and the engine is its only holder; the
        // engines return a buffer only once no posted work request refers to it
        // (after its completions, or after the connection's teardown).
        let r = unsafe { cache.put_bulk(&[b]) };
        debug_assert!(r.is_ok(), "returning {b:?}: {r:?}");
    }

    /// Return every buffer of `bufs` that is `Some`, with one bulk put per
    /// class (a request's buffers go back together when it is released).
    #[inline]
    pub(crate) fn put_all<const N: usize>(&mut self, bufs: [Option<BufRef>; N]) {
        const NONE: BufRef = BufRef {
            region: 0,
            class: 0,
            index: 0,
        };
        let mut by_class = [[NONE; N]; 3];
        let mut n = [0usize; 3];
        for b in bufs.into_iter().flatten() {
            let k = if b.class == self.recv_class {
                0
            } else if b.class == self.send_class {
                1
            } else {
                2
            };
            by_class[k][n[k]] = b;
            n[k] += 1;
        }
        for (k, cache) in [&mut self.recv, &mut self.send, &mut self.data].into_iter().enumerate() {
            if n[k] > 0 {
                // SAFETY: as in `put`: the engine is the only holder of these
                // buffers and no posted work request refers to them.
                let r = unsafe { cache.put_bulk(&by_class[k][..n[k]]) };
                debug_assert!(r.is_ok(), "returning {:?}: {r:?}", &by_class[k][..n[k]]);
            }
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
